-- Facts that change (issue #20): validity intervals and supersession.
--
-- Event time (when a fact was true), epoch seconds, valid_from included, valid_to excluded, NULL
-- open. An entity's record (data) keeps its own valid_from / valid_to / supersedes; its columns hold
-- its effective interval as the projections see it (hrt/projection.py): valid_from is the record's,
-- else its ts (a memory unit's creation_ts, an artifact's created_at; NULL for a concept without
-- one). A relation's interval is its own and lives only in these columns.
ALTER TABLE hrt_entities
    ADD COLUMN valid_from double precision,
    ADD COLUMN valid_to   double precision;

-- rows written before this change: records without an interval start at their ts
UPDATE hrt_entities SET
    valid_from = coalesce(extract(epoch FROM (data->>'valid_from')::timestamptz)::double precision, ts),
    valid_to   = extract(epoch FROM (data->>'valid_to')::timestamptz)::double precision;

ALTER TABLE hrt_relations
    ADD COLUMN valid_from double precision,
    ADD COLUMN valid_to   double precision;

-- SUPERSEDES: a memory unit or artifact -> the one it replaces (written by ingest from an entity's
-- `supersedes`; deleted with either end like every relation). Replaces 0001's inline CHECK, which
-- PostgreSQL named hrt_relations_type_check.
ALTER TABLE hrt_relations DROP CONSTRAINT hrt_relations_type_check;
ALTER TABLE hrt_relations ADD CONSTRAINT hrt_relations_type_check
    CHECK (type IN ('MENTIONS', 'RELATED_TO', 'DERIVED_FROM', 'FOLLOWS', 'SUPERSEDES'));
