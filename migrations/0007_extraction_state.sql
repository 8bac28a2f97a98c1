-- Conversation memory (#32): a user's extraction statistics (term and co-occurrence counts, proper
-- nouns, sessions, messages), written in the same transaction as the records they come from.
-- Keys compare byte-wise (COLLATE "C"): a namespace is read by key prefix.
CREATE TABLE hrt_extraction_state (
    user_id text NOT NULL,
    ns text NOT NULL,
    key text COLLATE "C" NOT NULL,
    value text NOT NULL,
    PRIMARY KEY (user_id, ns, key)
);
