"""An ONNX Runtime session on the CPU, tuned to share its cores with the rest of a request: the
ONNX embedder's (:mod:`hrt.onnx_embedder`), its export check's, and the ONNX cross-encoder's
(:mod:`hrt.rerankers.onnx_cross`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def cpu_session(path: Path, threads: int) -> Any:
    """An ONNX Runtime session of ``path`` on the CPU, tuned to share its cores with a request (also
    the ONNX cross-encoder's, :mod:`hrt.rerankers.onnx_cross`)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = max(0, threads)  # 0: ONNX Runtime's default (one per core)
    options.inter_op_num_threads = 1
    # a pool that spins after each call would burn the core the rest of the request needs (the
    # lexical leg runs during the embedding), and slows concurrent embedding calls
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.log_severity_level = 3  # errors only
    # no arena: it would keep the peak of the largest batch ever run (hundreds of MB for a batch of
    # long texts) for the life of the server; without it memory is returned after each batch, at no
    # cost in phrase latency
    options.enable_cpu_mem_arena = False
    return ort.InferenceSession(str(path), sess_options=options, providers=["CPUExecutionProvider"])
