// Node identity: an id names one entity of one user, whatever its kind (ARCHITECTURE §2), so one
// composite uniqueness constraint on the shared :Entity label keys every node. Its backing range
// index serves every MATCH/MERGE on (user_id, id). Composite property uniqueness constraints are
// available in Neo4j 5.26 Community; key and existence constraints (which would also require the
// properties to be present) are Enterprise-only, so HRT's writes always set both properties.
CREATE CONSTRAINT entity_user_id IF NOT EXISTS
FOR (n:Entity) REQUIRE (n.user_id, n.id) IS UNIQUE;
