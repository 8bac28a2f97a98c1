"""The PostgreSQL record store: records, API keys and the outbox that the projector delivers to the
graph store and the vector index (:class:`hrt.stores.postgres.records.PostgresRecordStore`)."""
