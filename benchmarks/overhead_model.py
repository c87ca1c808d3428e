"""overhead.json as types (issue #37 item 5): benchmarks/overhead.py builds an OverheadReport
part by part and writes the parts it measured; tests read the committed files back through it."""

from __future__ import annotations


from pydantic import BaseModel, ConfigDict, Field

__all__ = ["EngineSetup", "OverheadReport", "PluginRatio", "PluginRun", "ScrapeCost",
           "ScrapeParse", "SidecarUsage"]


class _Record(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ScrapeParse(_Record):
    """The sidecar's parse of a real /metrics body: all of it against the wanted lines only."""

    body_bytes: int
    full_parse_ms: float
    sidecar_parse_ms: float


class ScrapeCost(_Record):
    """vLLM's own CPU per GET /metrics, the idle engine's share subtracted."""

    vllm_cpu_ms_per_scrape: float
    idle_cpu_share: float


class SidecarUsage(_Record):
    """The real sidecar under load: its CPU, its memory, and the swap latency of its push."""

    cpu_share_of_one_core: float
    rss_mb: float
    swap_latency_s: float | None      # None: the swap still waited for its first step
    table_version: int


class EngineSetup(_Record):
    """The vLLM the A/B ran (the embedded tiny model unless --model) and its starts' order."""

    model: str
    max_num_seqs: int
    extra_args: list[str]
    order: str


class PluginRatio(_Record):
    """One load: median throughput with and without the plugin, their ratio and spreads."""

    model_config = ConfigDict(serialize_by_alias=True, validate_by_name=True)
    with_: float = Field(alias="with")  # "with" is a Python keyword
    without: float
    ratio: float
    spread_with: float
    spread_without: float


class PluginRun(_Record):
    """One vLLM start: its throughput per load and, with the plugin, the sidecar's usage."""

    plugin: bool
    tokens_per_s: dict[int, list[float]]
    metrics_scrape: ScrapeCost | None = None
    sidecar: SidecarUsage | None = None


class OverheadReport(BaseModel):
    """overhead.json: the hooks' and the rebuild's cost always; the rest as the flags ran it
    (--hooks-only, --sidecar-only, the A/B), and older files lack the later parts."""

    model_config = ConfigDict(extra="forbid")  # not frozen: filled part by part
    hook_us_per_step: dict[int, float]
    rebuild_us_1024x9: float
    sidecar_choose_ms_1024x9: float | None = None
    scrape_parse: ScrapeParse | None = None
    engine: EngineSetup | None = None
    throughput_with_vs_without_plugin: dict[int, PluginRatio] | None = None
    sidecar: list[SidecarUsage] | None = None
    metrics_scrape: ScrapeCost | None = None

