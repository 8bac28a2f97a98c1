"""HRT, the Hybrid Retrieval Tool: deterministic knowledge-graph retrieval for AI agents' memory."""

__version__ = "0.1.0"
