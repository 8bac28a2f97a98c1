-- Replicas and poison events (issue #22).
--
-- Delivery is leased per target: a projector delivers a target's events only inside a transaction
-- holding that target's advisory lock (pg_try_advisory_xact_lock, keys in hrt/stores/postgres_records.py),
-- so one process at a time feeds a target, in outbox order. Nothing here stores the lease.
--
-- Attempts are counted per target (the graph can fail an event the vector index took). An event
-- that fails for good (N attempts, HRT_PROJECTOR_MAX_ATTEMPTS; a target that is down does not
-- count) is marked done for that target and kept here, so its target moves on; `hrt doctor`
-- reports these rows and `hrt doctor --repair` rebuilds the user's projections and clears them.
ALTER TABLE hrt_outbox
    ADD COLUMN graph_attempts  integer NOT NULL DEFAULT 0,
    ADD COLUMN vector_attempts integer NOT NULL DEFAULT 0;

CREATE TABLE hrt_outbox_dead (
    seq         bigint      NOT NULL,
    target      text        NOT NULL CHECK (target IN ('graph', 'vector')),
    user_id     text        NOT NULL,
    op          text        NOT NULL,
    key         jsonb       NOT NULL,
    version     bigint      NOT NULL,
    attempts    integer     NOT NULL,
    last_error  text,
    created_at  timestamptz NOT NULL,          -- when the event was written
    dead_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (seq, target)
);
CREATE INDEX hrt_outbox_dead_user ON hrt_outbox_dead (user_id);
