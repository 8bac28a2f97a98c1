"""``hrt bench``: the speed-at-scale benchmark (a command, never a test).

- :mod:`hrt.bench.synth`: a seeded, deterministic generator of users' knowledge graphs with
  realistic text and a power-law degree distribution, and of the key phrases to query them with.
- The harness. It ingests the same data into each deployment through the Python API, starts a real
  ``hrt serve`` per deployment and size, and measures ``POST /v1/retrieve`` over HTTP (per stage
  from ``Server-Timing``, end to end, sequential and under concurrent clients), ingest throughput
  and peak RSS; it writes JSON, a PNG and a README table. One module per concern:
  :mod:`hrt.bench.run` the command line, :mod:`hrt.bench.harness` the run, :mod:`hrt.bench.ingest`
  the ingest child, :mod:`hrt.bench.server` the ``hrt serve`` process, :mod:`hrt.bench.loadgen`
  the requests, :mod:`hrt.bench.host` the machine and its processes, :mod:`hrt.bench.targets` the
  deployments, :mod:`hrt.bench.stats` sizes, percentiles and goals, :mod:`hrt.bench.report` the
  outputs.
- :mod:`hrt.bench.peer`: neo4j-graphrag's ``WeaviateNeo4jRetriever`` on the same Weaviate and
  Neo4j data, side by side.

The imports between these modules form no cycle (``tests/unit/test_import_graph.py``).

See ``docs/bench.md``.
"""
