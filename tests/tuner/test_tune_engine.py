"""`tabletune tune` on the real vLLM CPU engine: a small sweep, its profile and report, resume."""

from __future__ import annotations

from pathlib import Path

import pytest

from tuner.config import TuneConfig
from tuner.engine_defaults import default_model, vocab_size
from tuner.core.errors import ProfileMismatch
from tuner.core.profile import Profile, load
from tuner.prompts import repetitive
from tuner.report import write_report
from tuner.tune import tune

pytestmark = pytest.mark.engine


def config(out: Path, log_dir: Path) -> TuneConfig:
    paths = default_model()
    vocab = vocab_size(paths.target)
    return TuneConfig(model=paths.target, num_speculative_tokens=2, max_num_seqs=8, grid=[1, 4, 8],
                      repeats=1, decode_tokens=17, acceptance_prompts=repetitive(16, vocab, seed=1),
                      acceptance_max_tokens=32, out=out, log_dir=log_dir)


@pytest.fixture(scope="module")
async def tuned(tmp_path_factory: pytest.TempPathFactory) -> tuple[TuneConfig, Profile]:
    tmp = tmp_path_factory.mktemp("tune")
    cfg = config(tmp / "profile.json", tmp / "logs")
    return cfg, await tune(cfg)


async def test_small_tune_gives_a_valid_profile_and_table(tuned: tuple[TuneConfig, Profile]) -> None:
    from vllm.v1.spec_decode.dynamic.utils import (
        build_dynamic_sd_schedule_lookup,
        validate_and_normalize_dynamic_sd_schedule,
    )

    cfg, profile = tuned
    assert profile.finished_k() == {0, 1, 2}
    T = profile.step_time_matrix()
    assert T.shape == (3, 3) and (T > 0).all()
    assert all(c.engine_ms is not None for c in profile.cells)  # the plugin's clock was read
    # at least `repeats` samples a cell, more (up to the limit) while its interval is wide
    counts = [len(v) for v in profile.samples_by_cell().values()]
    assert len(counts) == 9 and all(cfg.repeats <= n <= cfg.repeat_limit for n in counts), counts
    # Reject-all kept drafting at full length: most request-steps had a complete draft.
    shares = [s.full_draft_share for s in profile.samples if s.k > 0]
    assert shares and min(shares) > 0.5
    acc = profile.acceptance
    assert acc is not None and acc.source == "plugin" and len(acc.a) == 2
    assert 0.5 < acc.a[0] <= 1.0 and acc.a[1] <= acc.a[0] + 1e-9  # greedy on repetitive prompts
    # The table is one vLLM accepts at startup (its own validator and lookup builder).
    assert profile.table is not None
    schedule = validate_and_normalize_dynamic_sd_schedule(profile.table)
    assert len(build_dynamic_sd_schedule_lookup(schedule, 8, 2)) == 9
    assert load(cfg.out) == profile


async def test_report_has_markdown_and_png(tuned: tuple[TuneConfig, Profile], tmp_path: Path) -> None:
    _, profile = tuned
    md, png = write_report(profile, tmp_path / "profile")
    assert png.stat().st_size > 10_000 and png.read_bytes()[:4] == b"\x89PNG"
    text = md.read_text()
    assert "**tuned table**" in text and "documented" in text
    assert f"`{profile.table}`" in text
    assert text.count("\n| ") >= len(profile.grid) + 1  # a row per grid point


async def test_resume_skips_finished_k(tuned: tuple[TuneConfig, Profile], tmp_path: Path) -> None:
    cfg, profile = tuned
    # As if interrupted while measuring k=2: k=0 and k=1 are on disk, k=2 and acceptance are not.
    partial = profile.model_copy(deep=True)
    partial.cells = [c for c in partial.cells if c.k < 2]
    partial.acceptance, partial.table = None, None
    out = tmp_path / "profile.json"
    partial.save(out)
    resumed = await tune(cfg.model_copy(update={"out": out, "log_dir": tmp_path / "logs"}))
    assert resumed.finished_k() == {0, 1, 2} and resumed.table is not None
    assert len(list((tmp_path / "logs").glob("vllm-*.log"))) == 1  # only k=2's server started
    assert [c for c in resumed.cells if c.k < 2] == [c for c in profile.cells if c.k < 2]


async def test_one_server_measures_every_k_on_one_vllm_and_refines_on_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Which points to bisect is pure (tests/tuner/core/test_goodput.py); here the loop is driven on the
    # real engine: ask once for B=2, as if a table edge sat in a step-time cliff between 1 and 4.
    from tuner import findings

    monkeypatch.setattr(findings, "new_refine_points", lambda p: [] if 2 in p.grid else [2])
    cfg = config(tmp_path / "profile.json", tmp_path / "logs").model_copy(
        update={"one_server": True, "grid": [1, 4], "repeats": 2, "max_repeats": 2})
    profile = await tune(cfg)
    assert profile.finished_k() == {0, 1, 2} and profile.table is not None
    assert profile.grid == [1, 2, 4] and profile.refined == [2] and profile.refine_rounds == 1
    assert sorted(c.k for c in profile.cells if c.B == 2) == [0, 1, 2]
    # B=2 was timed after the acceptance run on the same vLLM: reject-all was back on, so all
    # requests stayed for every step and drafts kept their full length
    refined = [s for s in profile.samples if s.B == 2 and s.k > 0]
    assert refined and all(s.engine_steps is not None and s.engine_steps >= cfg.decode_tokens - 1
                           and (s.full_draft_share or 0) > 0.5 for s in refined), refined
    assert len(list((tmp_path / "logs").glob("vllm-*.log"))) == 1  # refined on the same vLLM
    assert "server_start_shared" in profile.timings_s and "cells" in profile.timings_s
    load(cfg.out).check_matches(profile.engine, [1, 4])  # a rerun with the same --grid resumes
    # interleaved: at each B the k's take turns, forward then backward (not one k's column)
    for B in (1, 2, 4):
        by_time = sorted((s for s in profile.samples if s.B == B), key=lambda s: s.started or 0)
        assert [s.k for s in by_time] == [0, 1, 2, 2, 1, 0], by_time
    # every cell records its interval around its median (speed itself is not asserted here)
    assert all(c.ci_low_ms is not None and c.ci_high_ms is not None
               and c.ci_low_ms <= c.step_ms <= c.ci_high_ms for c in profile.cells)


async def test_workload_times_steady_serving_after_measuring_acceptance(tmp_path: Path) -> None:
    from tuner import findings
    from tuner.core.samples import filled
    from tuner.core.workload import Workload

    workload = Workload(prompt_tokens=48, output_tokens=24)
    cfg = config(tmp_path / "profile.json", tmp_path / "logs").model_copy(
        update={"one_server": True, "grid": [1, 4], "refine": 0, "workload": workload,
                # no interval is that narrow: every cell takes the third repeat
                "repeats": 2, "max_repeats": 3, "ci_target": 1e-9})
    profile = await tune(cfg)
    assert sorted(len(v) for v in profile.samples_by_cell().values()) == [3] * 6
    assert profile.workload == workload and load(cfg.out).workload == workload
    assert profile.finished_k() == {0, 1, 2} and profile.acceptance is not None
    for s in profile.samples:
        # each sample says what its steps carried: at most B requests, and (the window spans at
        # least one request lifetime) prefill beside the decodes and drafts
        assert s.mean_batch is not None and 0 < s.mean_batch <= s.B + 0.01, s
        assert s.engine_steps is not None and s.engine_steps >= cfg.decode_tokens - 1
        assert s.tokens_per_step is not None and s.tokens_per_step > s.mean_batch * (s.k + 1), s
    # a cell whose samples all missed their batch (a loaded box can make a client lag a whole
    # lifetime) is named in the warnings; the others take their median over the filled ones
    unfilled = {(c.B, c.k) for c in profile.cells
                if not any(filled(s) for s in profile.samples if (s.B, s.k) == (c.B, c.k))}
    named = {int(w.split(":")[0].removeprefix("B=")) for w in findings.batch_warnings(profile)}
    assert named == {B for B, _ in unfilled}
    # reject-all was restored after the acceptance run: timed drafts kept their full length
    shares = [s.full_draft_share for s in profile.samples if s.k > 0]
    assert shares and min(shares) > 0.5
    with pytest.raises(ProfileMismatch, match="workload"):  # not resumed under another shape
        await tune(cfg.model_copy(update={"workload": None}))
