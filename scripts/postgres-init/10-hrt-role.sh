#!/bin/sh
# HRT's own PostgreSQL role and database, for docker-compose.yml: the role HRT connects as
# (HRT_DB_USER, default hrt: a login, no superuser, no CREATEDB, no CREATEROLE) with the password
# HRT_DB_PASSWORD, and the database HRT_DB_NAME (default hrt) owned by it, so the role owns the
# database's public schema, where `hrt migrate` puts every table. The superuser (POSTGRES_USER)
# stays with the postgres service and out of HRT's environment (docs/security.md).
#
# The postgres image runs this once, when it makes an empty volume (/docker-entrypoint-initdb.d).
# For a volume made before it (when HRT connected as the superuser), run it once by hand:
#   docker compose exec postgres sh /docker-entrypoint-initdb.d/10-hrt-role.sh
# It is idempotent: it makes what is missing, sets the role's password to HRT_DB_PASSWORD, and
# hands the role the database and the tables, sequences and views an earlier HRT made in its public
# schema as another user. Connection settings come from libpq's PG* variables, if any. It is
# executable so that the image runs it (rather than sourcing it into its entrypoint).
set -eu

: "${HRT_DB_USER:=hrt}"
: "${HRT_DB_NAME:=hrt}"
: "${HRT_DB_PASSWORD:?set HRT_DB_PASSWORD: the password of the role HRT connects as}"
if [ "$HRT_DB_USER" = "${POSTGRES_USER:-postgres}" ]; then
    echo "HRT_DB_USER must not be the superuser ${POSTGRES_USER:-postgres}" >&2
    exit 1
fi

run_psql() {
    psql -X -q -v ON_ERROR_STOP=1 --username "${POSTGRES_USER:-postgres}" \
        -v role="$HRT_DB_USER" -v db="$HRT_DB_NAME" "$@"
}

# psql reads the password from the environment (\getenv), never from a command line
run_psql --dbname postgres <<'SQL'
\getenv password HRT_DB_PASSWORD
SELECT format('CREATE ROLE %I LOGIN', :'role')
 WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = :'role') \gexec
ALTER ROLE :"role" WITH LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS PASSWORD :'password';
SELECT format('CREATE DATABASE %I OWNER %I', :'db', :'role')
 WHERE NOT EXISTS (SELECT FROM pg_database WHERE datname = :'db') \gexec
ALTER DATABASE :"db" OWNER TO :"role";
SQL

run_psql --dbname "$HRT_DB_NAME" <<'SQL'
ALTER SCHEMA public OWNER TO :"role";
-- what an HRT connected as another user made: its tables (their indexes and owned sequences
-- follow), free-standing sequences, views
SELECT format('ALTER %s %s OWNER TO %I',
              CASE c.relkind WHEN 'S' THEN 'SEQUENCE' WHEN 'v' THEN 'VIEW' WHEN 'm' THEN 'MATERIALIZED VIEW'
                             ELSE 'TABLE' END,
              c.oid::regclass, :'role')
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p', 'S', 'v', 'm')
   AND c.relowner <> (SELECT oid FROM pg_roles WHERE rolname = :'role')
   AND NOT (c.relkind = 'S' AND EXISTS (SELECT FROM pg_depend d WHERE d.classid = 'pg_class'::regclass
                                        AND d.objid = c.oid AND d.deptype IN ('a', 'i')))
 \gexec
SQL
