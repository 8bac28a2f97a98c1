"""The Neo4j graph store (:class:`hrt.stores.neo4j.graph.Neo4jGraphStore`) and its Cypher."""
