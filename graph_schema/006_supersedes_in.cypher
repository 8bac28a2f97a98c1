// The successors of many facts at once: retrieval asks, for every candidate memory unit and
// artifact of a request (~700 at 100k entities), which facts supersede it (hrt/pipeline/validity.py).
// Matching each candidate's node and its incoming SUPERSEDES relationships one by one cost Neo4j
// tens of milliseconds a request; one seek of this index with the list of ids, over the few
// SUPERSEDES relationships a user has, costs about one. tid is the link key every relationship
// carries (003_link_order.cypher): its target's id.
CREATE INDEX supersedes_in IF NOT EXISTS
FOR ()-[r:SUPERSEDES]-() ON (r.user_id, r.tid);
