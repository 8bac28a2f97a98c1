"""``hrt bench``: the speed-at-scale benchmark (a command, never a test).

- :mod:`hrt.bench.synth`: a seeded, deterministic generator of users' knowledge graphs with
  realistic text and a power-law degree distribution, and of the key phrases to query them with.
- :mod:`hrt.bench.run`: the harness. It ingests the same data into each deployment through the
  Python API, starts a real ``hrt serve`` per deployment and size, and measures ``POST
  /v1/retrieve`` over HTTP (per stage from ``Server-Timing``, end to end, sequential and under
  concurrent clients), ingest throughput and peak RSS; it writes JSON, a PNG and a README table.
- :mod:`hrt.bench.peer`: neo4j-graphrag's ``WeaviateNeo4jRetriever`` on the same Weaviate and
  Neo4j data, side by side.

See ``docs/bench.md``.
"""
