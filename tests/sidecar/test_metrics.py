"""The sidecar's /metrics series (sidecar/metrics.py): a table of many ranges does not multiply
the series (issue #39 item 3)."""

from __future__ import annotations

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from sidecar.counters import Stats
from sidecar.metrics import TABLE_K_RANGES, registry_for
from sidecar.state import Process, SidecarState

MANY = [[b, b, 1] for b in range(1, 4096)]  # the 4,095-range table


def samples(state: SidecarState, name: str) -> list[tuple[dict[str, str], float]]:
    text = generate_latest(registry_for(lambda: state)).decode()
    return [(s.labels, s.value) for family in text_string_to_metric_families(text)
            for s in family.samples if s.name == name]


def state_with(engine: list[list[int]] | None, recommended: list[list[int]] | None) -> SidecarState:
    process = Process(healthy=True, health_reason="", scrape_age_s=None, stats=Stats(), goodput=[])
    return SidecarState(engine_table=engine, recommended_table=recommended, process=process)


def test_table_k_has_a_series_per_range_of_a_small_table() -> None:
    state = state_with([[1, 8, 3], [9, 16, 1]], [[1, 16, 2]])
    assert samples(state, "tabletune_sidecar_table_k") == [
        ({"table": "engine", "batch_size_start": "1", "batch_size_end": "8"}, 3.0),
        ({"table": "engine", "batch_size_start": "9", "batch_size_end": "16"}, 1.0),
        ({"table": "recommended", "batch_size_start": "1", "batch_size_end": "16"}, 2.0)]
    assert samples(state, "tabletune_sidecar_table_ranges") == [
        ({"table": "engine"}, 2.0), ({"table": "recommended"}, 1.0)]


def test_a_table_of_many_ranges_exports_its_first_ranges_and_its_count() -> None:
    state = state_with(MANY, MANY[:TABLE_K_RANGES + 1])
    table_k = samples(state, "tabletune_sidecar_table_k")
    assert len(table_k) == 2 * TABLE_K_RANGES == 64  # was 4,097 series with the table
    engine = [labels for labels, _ in table_k if labels["table"] == "engine"]
    assert engine[-1]["batch_size_start"] == str(TABLE_K_RANGES)
    assert samples(state, "tabletune_sidecar_table_ranges") == [
        ({"table": "engine"}, 4095.0), ({"table": "recommended"}, float(TABLE_K_RANGES + 1))]


def test_no_table_no_series() -> None:
    state = state_with(None, None)
    assert samples(state, "tabletune_sidecar_table_k") == []
    assert samples(state, "tabletune_sidecar_table_ranges") == []
