"""The Weaviate vector index (:class:`hrt.stores.weaviate.vectors.WeaviateVectorIndex`)."""
