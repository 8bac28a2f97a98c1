-- API keys, second pass (#30): the admin key that made a key over HTTP (NULL: the operator), and
-- names unique among the live keys of one parent rather than across tenants. New keys store the
-- SHA-256 of the token with an empty salt; a key with a salt keeps its scrypt hash until its first
-- successful use, which re-stores it as SHA-256.
ALTER TABLE hrt_api_keys ADD COLUMN parent text;
DROP INDEX hrt_api_keys_live_name;
CREATE UNIQUE INDEX hrt_api_keys_live_name ON hrt_api_keys (coalesce(parent, ''), name) WHERE revoked_at IS NULL;
