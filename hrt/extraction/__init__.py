"""From conversations to memory: messages in, memory units, concepts and relations out.

- :mod:`hrt.extraction.messages`: the request and response of ``POST /v1/conversations``.
- :mod:`hrt.extraction.rules`: the deterministic rule extractor (entities and topics of a text).
- :mod:`hrt.extraction.conversation`: turn by turn, the records a message adds and the per-user
  statistics the rules need (term and co-occurrence counts, proper nouns), kept incrementally;
  its parts: :mod:`hrt.extraction.statistics` (the options and the statistics rows),
  :mod:`hrt.extraction.planner_base` (the plan and the planner's state), :mod:`hrt.extraction.linking`
  (concepts and their links), :mod:`hrt.extraction.llm_call` (how the rules call the LLM extractor).
- :mod:`hrt.extraction.llm`: the optional LLM extractor behind an OpenAI-compatible chat endpoint.
- :mod:`hrt.extraction.wire`: the request from JSON (the route's body, the MCP tool's arguments),
  validated strictly, every bad field named as written (``messages[2].content``).
- :mod:`hrt.extraction.transcripts`: transcript files (OpenAI-style chats, LoCoMo) as sessions of
  messages, for ``hrt ingest --conversation``.
"""
