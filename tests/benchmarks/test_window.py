"""A bench window's engine count is checked against what its steps could generate
(benchmarks/window.py): a read that lacks the counter or a count the steps cannot explain is
measured again, never averaged into an interval."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from benchmarks.window import generated
from tuner.step_clock import implausible
from tuner.core.engine_client import EngineClient
from tuner.core.errors import ScrapeError
from tuner.step_clock import StepLoad

STEPS = StepLoad(steps=220, step_ms=8.1, requests_per_step=64.0, tokens_per_step=359.0)


def test_a_count_the_steps_can_carry_is_plausible() -> None:
    assert implausible(35_000.0, STEPS) is None          # ~160 tokens a step of 359 carried
    assert implausible(35_000.0, None) is None           # no step totals: nothing to bound it by


@pytest.mark.parametrize(("tokens", "words"), [
    (-2_860_000.0, "went down by 2860000"),                 # the H200 bench's negative windows
    (3_058_000.0, "where the window's 220 engine steps carried 78980"),  # ... and its jumps
    (0.0, "no token generated in 220 engine steps")])
def test_counts_seen_on_the_gpu_are_implausible(tokens: float, words: str) -> None:
    assert words in (implausible(tokens, STEPS) or "")


def test_a_few_idle_steps_may_generate_nothing() -> None:
    assert implausible(0.0, StepLoad(steps=3, step_ms=5.0, requests_per_step=1.0,
                                     tokens_per_step=40.0)) is None


@pytest.fixture
async def metrics_server() -> AsyncIterator[tuple[TestServer, list[str]]]:
    bodies: list[str] = []

    async def metrics(_: web.Request) -> web.Response:
        return web.Response(text=bodies.pop(0))

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    server = TestServer(app)
    await server.start_server()
    yield server, bodies
    await server.close()


async def test_a_body_without_the_counter_is_an_error_not_zero(
        metrics_server: tuple[TestServer, list[str]]) -> None:
    server, bodies = metrics_server
    bodies += ['vllm:generation_tokens_total{engine="0",model_name="m"} 1234.0\n'
               'vllm:generation_tokens_total{engine="1",model_name="m"} 10.0\n',
               'vllm:num_requests_running{engine="0"} 4.0\n']
    async with EngineClient(engine_url=str(server.make_url(""))) as engine:
        _, total = await generated(engine)
        assert total == 1244.0                         # summed over engines
        with pytest.raises(ScrapeError, match="has no vllm:generation_tokens_total"):
            await generated(engine)


class _Reads:
    """An engine whose /metrics reads give these counter values, in turn."""

    engine_url = "http://engine"

    def __init__(self, values: list[float]) -> None:
        self.values = values

    async def get_metrics(self) -> str:
        return f'vllm:generation_tokens_total{{engine="0"}} {self.values.pop(0)}\n'


class _Load:
    def check(self) -> None:
        pass

    def completed_between(self, t0: float, t1: float) -> tuple[int, int]:
        return 0, 0


async def test_an_implausible_window_is_measured_again_then_refused() -> None:
    from benchmarks.window import measure
    engine = _Reads([5_000.0, 100.0, 100.0, 300.0])        # went down, then a good window
    m = await measure(engine, None, _Load(), 0.01)  # type: ignore[arg-type]
    assert m.tokens_per_s * m.window_s == pytest.approx(200.0) and engine.values == []
    (bad, why), = m.discarded   # kept, with its reason, for cells.csv's `dropped`
    assert bad.tokens_per_s < 0 and why.startswith("implausible engine count")
    with pytest.raises(ScrapeError, match="3 windows in a row could not be counted"):
        await measure(_Reads([9.0, 1.0] * 3), None, _Load(), 0.01)  # type: ignore[arg-type]


def test_the_analysis_leaves_out_windows_an_older_bench_recorded_unchecked() -> None:
    from benchmarks.cells import Window
    from benchmarks.stats import analyze

    def w(block: int, policy: str, tps: float) -> Window:
        return Window(block=block, round=0, load=64, group="tables", position=0, policy=policy,
                      tokens_per_s=tps, window_s=2.0, started_s=0.0, steps=220, step_ms=8.1,
                      requests_per_step=64.0, tokens_per_step=359.0)
    good = [w(b, p, 15_000.0 + 100 * b) for b in range(6) for p in ("fixed-k3", "aa:fixed-k3")]
    a = analyze(good + [w(6, "fixed-k3", 1_516_962.0), w(6, "aa:fixed-k3", 14_000.0)])
    assert a.dropped == 1 and a.aa[64].ratio.high < 1.5   # 1.5e6 tok/s would give a ratio ~100
