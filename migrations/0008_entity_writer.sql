-- Reading and browsing entities (#33).
--
-- When and by which API key an entity was last written (the service's clock, epoch seconds, and
-- the key's id; NULL for a write by the operator or the CLI, and for the rows written before this
-- migration: unknown). updated_at stays the database's own time of the last change.
--
-- title_key: the lower-cased title, or a concept's name, as HRT lower-cases it (hrt.records.title_key)
-- for prefix filters; byte-ordered (COLLATE "C") so a prefix is one index range. Backfilled with
-- PostgreSQL's lower(), which may fold non-ASCII letters otherwise: a re-ingest refreshes it.
ALTER TABLE hrt_entities
    ADD COLUMN written_at double precision,
    ADD COLUMN written_by text,
    ADD COLUMN title_key  text COLLATE "C";

UPDATE hrt_entities SET title_key = lower(coalesce(data->>'name', data->>'title', ''));

-- Pages come in id order, byte-wise (ids are ASCII; the same order as the embedded store's),
-- whatever the database's collation: one index for all kinds, one for a kind. The second replaces
-- (user_id, kind), which it begins with.
CREATE INDEX hrt_entities_by_id ON hrt_entities (user_id, id COLLATE "C");
CREATE INDEX hrt_entities_kind_id ON hrt_entities (user_id, kind, id COLLATE "C");
DROP INDEX hrt_entities_kind;
CREATE INDEX hrt_entities_title ON hrt_entities (user_id, title_key);
-- what supersedes an entity, read per entity by browsing's "current only" filter: without it the
-- planner scanned every relation of the database for SUPERSEDES (37 ms a page at 100k, 0.13 with it)
CREATE INDEX hrt_relations_supersedes ON hrt_relations (user_id, target) WHERE type = 'SUPERSEDES';
