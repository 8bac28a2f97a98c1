// Per-user scans: drift checks (ids), deleting a user, and the operator queries in README.md.
CREATE INDEX entity_user IF NOT EXISTS
FOR (n:Entity) ON (n.user_id);

// Counts and listings per kind for one user.
CREATE INDEX entity_user_kind IF NOT EXISTS
FOR (n:Entity) ON (n.user_id, n.kind);

// A user's memory units by time (newest first) for operators and time-bounded reads.
CREATE INDEX memory_unit_user_ts IF NOT EXISTS
FOR (n:MemoryUnit) ON (n.user_id, n.ts);
