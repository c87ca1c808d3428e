"""The emulator's cut, on both of vLLM's rejection-sampler layouts (torch on CPU, no engine)."""

from __future__ import annotations

from pathlib import Path

import torch

from vllm_patch.emulation import Capper, _write


def capper(tmp_path: Path, rates: tuple[float, ...]) -> Capper:
    path = str(tmp_path / "rates.json")
    _write(path, rates)
    return Capper(path)


def test_v1_rows_are_cut_after_the_allowed_drafts(tmp_path: Path) -> None:
    out = torch.tensor([[5, 6, 7, 8], [5, 6, -1, -1], [9, -1, -1, -1]])
    cut = capper(tmp_path, (1.0, 0.0, 0.0)).cap(out)  # keep 1 draft + the next token
    assert cut.tolist() == [[5, 6, -1, -1], [5, 6, -1, -1], [9, -1, -1, -1]]


def test_v2_counts_are_capped_and_prefills_keep_their_token(tmp_path: Path) -> None:
    sampled = torch.zeros(4, 4, dtype=torch.int64)
    num_sampled = torch.tensor([4, 2, 1, 0], dtype=torch.int32)
    assert capper(tmp_path, (1.0, 0.0, 0.0)).cap_counts(sampled, num_sampled).tolist() == [2, 2, 1, 0]
    assert capper(tmp_path, (0.0,)).cap_counts(sampled, num_sampled).tolist() == [1, 1, 1, 0]
    kept = capper(tmp_path, (1.0, 1.0, 1.0)).cap_counts(sampled, num_sampled)
    assert kept.tolist() == [4, 2, 1, 0] and kept.dtype == torch.int32


def test_v2_cut_replays_the_rates(tmp_path: Path) -> None:
    torch.manual_seed(0)
    c = capper(tmp_path, (0.75, 0.55, 0.40))
    n = 20000
    kept = c.cap_counts(torch.zeros(n, 4), torch.full((n,), 4)) - 1  # drafts kept per row
    shares = [(kept >= i).float().mean().item() for i in (1, 2, 3)]
    assert all(abs(s - a) < 0.02 for s, a in zip(shares, (0.75, 0.55, 0.40))), shares
