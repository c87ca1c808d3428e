"""Fixes for vLLM bugs that stop a DSD table from working at all, applied where they bite.

V2 runner + EAGLE/MTP drafter + any DSD table (vLLM 0.26; fixed upstream by 0.32): every CUDA
graph manager derives its decode query lengths from the table as k + (decode_query_len - K).
The drafter's decode manager has decode_query_len = 1, so with K = 3 the table's k = 2 gives
length 0 and round_up(num_tokens, 0) raises ZeroDivisionError while the engine starts
(vLLM issue #48494); smaller k give negative lengths that fail later, during capture. A draft
decode step always has one token per request, whatever k the table picks, so that manager must
capture for length 1 only. The wrapper hides the table from managers whose query length cannot
hold a draft (decode_query_len <= K), as vLLM 0.32's own guard does; there it changes nothing.
"""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger("vllm.tabletune")


def fix_v2_draft_decode_graphs() -> bool:
    """Wrap CudaGraphManager._init_candidates once; False where this vLLM has no V2 runner."""
    try:
        from vllm.v1.worker.gpu import cudagraph_utils
    except Exception as exc:  # no V2 runner in this build (or it does not import here)
        log.debug("TableTune: V2 CUDA-graph workaround not applied (%s)", exc)
        return False
    cls = cudagraph_utils.CudaGraphManager
    orig = getattr(cls, "_init_candidates", None)
    if orig is None or getattr(orig, "_tabletune", False):
        return orig is not None

    def _init_candidates(self: Any) -> None:
        try:
            spec = self.vllm_config.speculative_config
            table = getattr(spec, "num_speculative_tokens_per_batch_size", None)
            bypass = table is None or self.decode_query_len > self.vllm_config.num_speculative_tokens
        except AttributeError:  # a vLLM laid out otherwise: leave its own code alone
            bypass = True
        if bypass:
            orig(self)
            return
        log.info("TableTune: draft-decode CUDA graphs captured for query length %d only "
                 "(works around vLLM issue #48494 under a DSD table)", self.decode_query_len)
        spec.num_speculative_tokens_per_batch_size = None
        try:
            orig(self)
        finally:
            spec.num_speculative_tokens_per_batch_size = table

    _init_candidates._tabletune = True  # type: ignore[attr-defined]
    cls._init_candidates = _init_candidates  # type: ignore[method-assign]
    return True
