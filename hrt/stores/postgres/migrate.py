"""Numbered SQL migrations for the PostgreSQL record store (``migrations/NNNN_name.sql``).

Each migration runs in one transaction together with its row in ``hrt_schema_migrations``, under an
advisory lock, so concurrent ``hrt migrate`` calls serialise and a failed migration leaves nothing
behind. The runner refuses to go on when a recorded migration is unfinished (applied outside this
runner or by a non-transactional statement) or when an applied file has changed since.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import psycopg

from hrt.errors import StoreError, StoreUnavailable

ADVISORY_LOCK = 0x4852_5430  # "HRT0"
_NAME = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    name: str
    sql: str

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.sql.encode()).hexdigest()


def bundled_migrations() -> list[Migration]:
    """The migrations shipped with HRT (the top-level ``migrations/`` folder, packaged). Run from a
    source checkout (the package next to its ``migrations/``), the checkout's own folder: an
    editable install of another checkout would otherwise hand over that checkout's migrations."""
    source = Path(__file__).resolve().parents[2] / "migrations"
    if (source / "0001_records_and_outbox.sql").is_file():
        return load_migrations(source)
    found = []
    for entry in resources.files("hrt.migrations_sql").iterdir():
        m = _NAME.match(entry.name)
        if m:
            found.append(Migration(int(m.group(1)), m.group(2), entry.read_text(encoding="utf-8")))
    return sorted(found, key=lambda x: x.version)


def load_migrations(folder: Path) -> list[Migration]:
    found = []
    for path in folder.glob("*.sql"):
        m = _NAME.match(path.name)
        if m:
            found.append(Migration(int(m.group(1)), m.group(2), path.read_text(encoding="utf-8")))
    return sorted(found, key=lambda x: x.version)


def migrate(dsn: str, migrations: list[Migration] | None = None) -> list[int]:
    """Apply pending migrations; returns the versions applied now (empty when up to date)."""
    migrations = bundled_migrations() if migrations is None else migrations
    try:
        conn = psycopg.connect(dsn, autocommit=True, connect_timeout=10)
    except psycopg.OperationalError as exc:
        if "password authentication failed" in str(exc) or "no password supplied" in str(exc):
            raise StoreError(
                f"PostgreSQL refused the credentials of HRT_POSTGRES_DSN for migrations: {exc}", store="PostgreSQL"
            ) from exc
        raise StoreUnavailable(f"cannot reach PostgreSQL for migrations: {exc}", store="PostgreSQL") from exc
    applied: list[int] = []
    with conn:
        conn.execute(
            "CREATE TABLE IF NOT EXISTS hrt_schema_migrations (version integer PRIMARY KEY, name text NOT NULL, "
            "checksum text NOT NULL, started_at timestamptz NOT NULL DEFAULT now(), finished_at timestamptz)"
        )
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (ADVISORY_LOCK,))
            rows = conn.execute("SELECT version, name, checksum, finished_at FROM hrt_schema_migrations").fetchall()
            done = {r[0]: r for r in rows}
            for version, name, _, finished in rows:
                if finished is None:
                    raise StoreError(
                        f"migration {version:04d}_{name} is recorded as started but not finished; "
                        "repair the database by hand before migrating again"
                    )
            for m in migrations:
                if m.version in done:
                    if done[m.version][2] != m.checksum:
                        raise StoreError(f"migration {m.version:04d}_{m.name}.sql changed after it was applied")
                    continue
                with conn.transaction():
                    conn.execute(
                        "INSERT INTO hrt_schema_migrations (version, name, checksum) VALUES (%s, %s, %s)",
                        (m.version, m.name, m.checksum),
                    )
                    conn.execute(m.sql.encode())
                    conn.execute(
                        "UPDATE hrt_schema_migrations SET finished_at = now() WHERE version = %s", (m.version,)
                    )
                applied.append(m.version)
    return applied


def applied_versions(dsn: str) -> list[int]:
    with psycopg.connect(dsn, autocommit=True, connect_timeout=10) as conn:
        exists = conn.execute("SELECT to_regclass('hrt_schema_migrations')").fetchone()
        if exists is None or exists[0] is None:
            return []
        return [r[0] for r in conn.execute("SELECT version FROM hrt_schema_migrations ORDER BY version")]
