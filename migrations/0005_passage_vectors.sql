-- Passage vectors (issue #23): a memory unit of two or more sentences is also embedded sentence by
-- sentence, each behind its title or author (hrt.records.passage_texts); scoring adds its best
-- passage cosine to the semantic term (passage_weight). The (k, dim) float32 rows, as `vector`;
-- NULL for an entity without passages, and for the rows written before this migration, which read
-- as their own vector until they are written again (a re-ingest of the same records).
ALTER TABLE hrt_entities ADD COLUMN passages bytea;
