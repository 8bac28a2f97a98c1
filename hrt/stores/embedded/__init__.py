"""The embedded backend: one SQLite file holding the records, the graph projection, the vectors and
the lexical index (:class:`hrt.stores.embedded.store.EmbeddedStore` and its three adapters)."""
