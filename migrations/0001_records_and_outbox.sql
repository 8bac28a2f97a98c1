-- HRT record store (source of truth) and the outbox that feeds the graph and vector projections.
-- Every table is keyed by user_id first: every statement HRT runs filters on it.

CREATE TABLE hrt_entities (
    user_id     text        NOT NULL,
    id          text        NOT NULL,
    kind        text        NOT NULL CHECK (kind IN ('memory_unit', 'concept', 'artifact')),
    data        jsonb       NOT NULL,
    vector      bytea       NOT NULL,          -- float32 little-endian, L2-normalised
    ts          double precision,              -- creation_ts / created_at, epoch seconds; NULL for concepts
    version     bigint      NOT NULL DEFAULT 1,
    updated_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (user_id, id)
);
CREATE INDEX hrt_entities_kind ON hrt_entities (user_id, kind);

CREATE TABLE hrt_relations (
    user_id       text             NOT NULL,
    source        text             NOT NULL,
    target        text             NOT NULL,
    type          text             NOT NULL CHECK (type IN ('MENTIONS', 'RELATED_TO', 'DERIVED_FROM', 'FOLLOWS')),
    weight        double precision NOT NULL,
    relation_type text,
    version       bigint           NOT NULL DEFAULT 1,
    updated_at    timestamptz      NOT NULL DEFAULT now(),
    PRIMARY KEY (user_id, source, target, type)
);
CREATE INDEX hrt_relations_target ON hrt_relations (user_id, target);

CREATE TABLE hrt_preferences (
    user_id     text             NOT NULL,
    target_kind text             NOT NULL,
    target      text             NOT NULL,
    weight      double precision NOT NULL,
    PRIMARY KEY (user_id, target_kind, target)
);

-- One row per change to project. The projector delivers rows in seq order to each target and
-- marks them; a row is deleted once every target has it. Rows are written in the same
-- transaction as the records they describe, so a crash can delay projection but never lose it.
CREATE TABLE hrt_outbox (
    seq           bigserial   PRIMARY KEY,
    user_id       text        NOT NULL,
    op            text        NOT NULL CHECK (op IN ('upsert_entity', 'delete_entity', 'upsert_relation',
                                                     'delete_relation', 'delete_user')),
    key           jsonb       NOT NULL,        -- {"id": ...} or {"source":, "target":, "type":}
    version       bigint      NOT NULL,        -- the record version this event announces (0 for deletes)
    graph_done    boolean     NOT NULL DEFAULT false,
    vector_done   boolean     NOT NULL DEFAULT false,
    attempts      integer     NOT NULL DEFAULT 0,
    last_error    text,
    created_at    timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX hrt_outbox_pending ON hrt_outbox (seq) WHERE NOT (graph_done AND vector_done);
