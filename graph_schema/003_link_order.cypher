// Link order keys: every relationship carries, besides {user_id, weight, relation_type}, the keys
// of the walk's visit order (hrt/stores/graph_walk.py link_order) as seen from each of its ends:
//   sid, tid  the ids of its source and target
//   nw        0.0 - weight                    (strongest first)
//   sts, tts  0.0 - coalesce(ts, 0.0) of its source and of its target (newest first)
// Neo4jGraphStore writes them with every edge and refreshes sts/tts when a node's ts changes.
// With these composite range indexes, expansion reads a node's first links of one type and
// direction in visit order straight from an index (and stops after the fan-out cap), so a hub
// concept with thousands of mentions costs what a node with ten links does.
CREATE INDEX link_mentions_out IF NOT EXISTS
FOR ()-[r:MENTIONS]-() ON (r.user_id, r.sid, r.nw, r.tts, r.tid);
CREATE INDEX link_mentions_in IF NOT EXISTS
FOR ()-[r:MENTIONS]-() ON (r.user_id, r.tid, r.nw, r.sts, r.sid);
CREATE INDEX link_related_to_out IF NOT EXISTS
FOR ()-[r:RELATED_TO]-() ON (r.user_id, r.sid, r.nw, r.tts, r.tid);
CREATE INDEX link_related_to_in IF NOT EXISTS
FOR ()-[r:RELATED_TO]-() ON (r.user_id, r.tid, r.nw, r.sts, r.sid);
CREATE INDEX link_derived_from_out IF NOT EXISTS
FOR ()-[r:DERIVED_FROM]-() ON (r.user_id, r.sid, r.nw, r.tts, r.tid);
CREATE INDEX link_derived_from_in IF NOT EXISTS
FOR ()-[r:DERIVED_FROM]-() ON (r.user_id, r.tid, r.nw, r.sts, r.sid);
CREATE INDEX link_follows_out IF NOT EXISTS
FOR ()-[r:FOLLOWS]-() ON (r.user_id, r.sid, r.nw, r.tts, r.tid);
CREATE INDEX link_follows_in IF NOT EXISTS
FOR ()-[r:FOLLOWS]-() ON (r.user_id, r.tid, r.nw, r.sts, r.sid);

// A concept's mentioning memory units newest first: its newest mention (scoring's recency of a
// concept) and the memory units listed with it (assembly) without reading all of a hub's mentions.
CREATE INDEX mentions_newest IF NOT EXISTS
FOR ()-[r:MENTIONS]-() ON (r.user_id, r.tid, r.sts);
