// One-off: the link order keys (003_link_order.cypher) of relationships written before HRT wrote
// them. Skipped at once when the marker node exists, so applying the schema again costs nothing.
// (The marker is not an :Entity; no HRT query and no per-user count sees it.)
OPTIONAL MATCH (done:HRTSchemaMigration {name: 'link_keys_v1'})
WITH done WHERE done IS NULL
MATCH (s:Entity)-[r]->(t:Entity)
WHERE r.sid IS NULL OR r.tid IS NULL OR r.nw IS NULL OR r.sts IS NULL OR r.tts IS NULL
CALL (r, s, t) {
  SET r.sid = s.id, r.tid = t.id, r.nw = 0.0 - r.weight,
      r.sts = 0.0 - coalesce(s.ts, 0.0), r.tts = 0.0 - coalesce(t.ts, 0.0)
} IN TRANSACTIONS OF 10000 ROWS;
MERGE (:HRTSchemaMigration {name: 'link_keys_v1'});
