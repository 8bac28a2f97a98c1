-- Facts about the store as a whole (#35): which embedding model wrote its vectors and their
-- dimension, and the progress of an unfinished `hrt reembed` (hrt/stores/vector_meta.py). A store
-- migrated from before records the model of the first server that opens it.
CREATE TABLE hrt_meta (
    key   text PRIMARY KEY,
    value text NOT NULL
);
