-- API keys (hrt/auth.py, `hrt keys`). Only an scrypt hash of each token is stored, with its salt;
-- users NULL means every user. A name is unique among unrevoked keys, so a revoked key's name can
-- be given again; revoked keys stay for the audit trail.
CREATE TABLE hrt_api_keys (
    key_id          text             PRIMARY KEY,
    name            text             NOT NULL,
    scopes          text[]           NOT NULL,
    users           text[],
    secret_hash     bytea            NOT NULL,
    salt            bytea            NOT NULL,
    created_at      timestamptz      NOT NULL,
    expires_at      timestamptz,
    revoked_at      timestamptz,
    last_used_at    timestamptz,
    rate_limit      double precision,
    max_concurrency integer
);
CREATE UNIQUE INDEX hrt_api_keys_live_name ON hrt_api_keys (name) WHERE revoked_at IS NULL;
