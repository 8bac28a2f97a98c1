"""What HRT's clients of OpenAI-compatible servers (llama.cpp's ``llama-server``, llama-cpp-python's
``llama_cpp.server``) share: the reranker (:mod:`hrt.rerankers.qwen3`) and the LLM extractor
(:mod:`hrt.extraction.llm`)."""

from __future__ import annotations


def api_root(base_url: str, what: str) -> str:
    """The server's root URL, given with or without its ``/v1`` suffix (``what`` names the client in
    errors); endpoints are ``{root}/v1/...``."""
    root = base_url.strip().rstrip("/")
    if not root.startswith(("http://", "https://")):
        raise ValueError(f"{what} base_url must be an http(s) URL, got {base_url!r}")
    return root[: -len("/v1")] if root.endswith("/v1") else root
