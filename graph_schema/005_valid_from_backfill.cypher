// One-off: a memory unit's or artifact's validity starts at its ts unless its record says
// otherwise (hrt/projection.py graph_node writes valid_from = ts by default), so nodes written
// before HRT wrote valid_from get valid_from = ts: an upgraded graph reads as a new one would.
// Nodes without a ts (concepts) stay open. Skipped at once when the marker node exists, so
// applying the schema again costs nothing. Relationships need nothing: an absent valid_from or
// valid_to is open, which is what a relation without an interval means.
OPTIONAL MATCH (done:HRTSchemaMigration {name: 'valid_from_v1'})
WITH done WHERE done IS NULL
MATCH (n:Entity)
WHERE n.ts IS NOT NULL AND n.valid_from IS NULL
CALL (n) {
  SET n.valid_from = n.ts
} IN TRANSACTIONS OF 10000 ROWS;
MERGE (:HRTSchemaMigration {name: 'valid_from_v1'});
