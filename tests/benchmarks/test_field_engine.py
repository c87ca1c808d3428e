"""The field bench end to end on the real CPU engine, reduced (issue #35 item 6): two tables,
two sidecars (one exploring, one observing) and the plugin's bandit under a closed loop and
Poisson arrivals, on a prompts file of the client's `custom` dataset, one block; the client's
saved result of every run is read back."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from benchmarks.client_record import FieldRecord
from benchmarks.field import main
from benchmarks.field_client import ClientResult
from benchmarks.synthetic import paper_profile
from tuner.engine_defaults import default_model

pytestmark = pytest.mark.engine

PROMPTS = Path(__file__).parents[1] / "data" / "prompts.jsonl"


def test_a_scenario_runs_on_your_prompts_and_keeps_the_clients_results(tmp_path: Path) -> None:
    profile = paper_profile()  # K=3, max_num_seqs=16
    profile.table = profile.build().table.to_list()
    profile.save(tmp_path / "profile.json")
    out = tmp_path / "out"
    rc = main(["--profile", str(tmp_path / "profile.json"), "--model", str(default_model().target),
               "--out", str(out), "--policies",
               "fixed-k0,fixed-k3,sidecar-from-tuned,watch-from-tuned,nightjar-style",
               "--shapes", "burst,poisson",
               "--concurrency", "2", "--rates", "4", "--run-s", "2", "--waves", "2",
               "--blocks", "1", "--warmup-rounds", "0", "--idle-s", "0",
               "--output-len", "200", "--prompts", str(PROMPTS), "--goodput", "tpot:10000",
               "--sidecar-arg=--rebuild-every-steps=10"])  # rebuilds inside the short arms
    assert rc == 0
    record = FieldRecord.model_validate_json((out / "field.json").read_text())
    policies = ("fixed-k0", "fixed-k3", "sidecar-from-tuned", "watch-from-tuned", "nightjar-style")
    assert {(r.shape, r.arm) for r in record.runs} == {
        (s, p) for s in ("burst-c2", "poisson-r4") for p in policies}
    # each sidecar arm reports its own process's doings; the watch one only recommends
    assert all((r.sidecar is not None) == r.arm.endswith("-from-tuned") for r in record.runs)
    watch, sidecar = record.meta.watch, record.meta.sidecar
    assert watch is not None and sidecar is not None
    assert watch[-1] == "--dry-run" and "--dry-run" not in sidecar
    outcomes = {}
    for name in ("sidecar", "watch"):
        lines = [json.loads(line) for line in gzip.open(out / f"{name}-part0.log.gz", "rt")]
        (connected,) = [e for e in lines if e["event"] == "connected"]
        assert connected["dry_run"] is (name == "watch")
        outcomes[name] = {e["decision"]["outcome"] for e in lines if e["event"] == "rebuild"}
    # both rebuilt; only the watch's rebuilds stopped at a recommendation
    assert outcomes["watch"] == {"dry_run"}
    assert outcomes["sidecar"] and "dry_run" not in outcomes["sidecar"]
    saved = sorted((out / "runs").glob("*.json"))
    assert len(saved) == 10
    for path in saved:  # the client's own result, as --save-result writes it
        result = ClientResult.model_validate(json.loads(path.read_text()))
        assert result.completed >= 4 and result.total_output_tokens > 0
        assert result.request_goodput == pytest.approx(result.request_throughput)  # a loose SLO
        # the file's output lengths (16..64 tokens), not --output-len's 200 ± 50%
        assert result.total_output_tokens <= 64 * result.completed
    # the bandit picks k itself (untried k's first) on the table it finds, and is off in the
    # other arms: fixed k=0 verifies nothing else, whichever arm ran before it
    ks = {(r.arm, r.shape): {k for p in r.phases
                             for k, n in (p.engine.steps_per_k or {}).items() if n > 0}
          for r in record.runs}
    assert all(len(ks[("nightjar-style", s)]) >= 2 for s in ("burst-c2", "poisson-r4")), ks
    assert all(ks[("fixed-k0", s)] == {0} for s in ("burst-c2", "poisson-r4")), ks
    assert all(p.engine.table_version[0] == p.engine.table_version[1]
               for r in record.runs if r.arm == "nightjar-style" for p in r.phases)
    summary = json.loads((out / "summary.json").read_text())
    k3 = summary["shapes"][0]["policies"]["fixed-k3"]["figures"]
    assert k3["output_throughput"]["median"] > 0 and k3["tpot_p50_ms"]["median"] > 0


def test_no_speculation_serves_the_same_blocks_on_its_own_engine_after_the_tables(
        tmp_path: Path) -> None:
    """nospec: vLLM started again without speculation once the table's blocks are done; the
    same blocks (their requests), vLLM's token count without the plugin's, and a comparison
    paired by block."""
    profile = paper_profile()
    profile.table = profile.build().table.to_list()
    profile.save(tmp_path / "profile.json")
    out = tmp_path / "out"
    rc = main(["--profile", str(tmp_path / "profile.json"), "--model", str(default_model().target),
               "--out", str(out), "--policies", "fixed-k3,nospec", "--shapes", "burst",
               "--concurrency", "2", "--waves", "1", "--blocks", "2", "--warmup-rounds", "0",
               "--idle-s", "0", "--output-len", "24"])
    assert rc == 0
    record = FieldRecord.model_validate_json((out / "field.json").read_text())
    assert sorted((r.block, r.arm) for r in record.runs) == [
        (0, "fixed-k3"), (0, "nospec"), (1, "fixed-k3"), (1, "nospec")]
    by = {(r.block, r.arm): r for r in record.runs}
    for b in (0, 1):  # the same requests: the same seed, the same prompt tokens
        spec, plain = by[(b, "fixed-k3")], by[(b, "nospec")]
        assert spec.seed == plain.seed
        assert (spec.phases[0].client.total_input_tokens
                == plain.phases[0].client.total_input_tokens)
        assert plain.phases[0].engine.steps is None and plain.phases[0].engine.generated_tokens > 0
        assert spec.phases[0].engine.steps
    (part,) = record.meta.parts
    assert part.blocks == 2 and part.stop_reason == "blocks"
    # the engine without speculation had no speculative config and no plugin
    commands = [p.read_text().splitlines()[0] for p in (out / "logs").glob("vllm-*.log")]
    assert sorted("--speculative-config" in c for c in commands) == [False, True], commands
    summary = json.loads((out / "summary.json").read_text())
    (shape,) = summary["shapes"]
    assert shape["blocks"] == 2
    assert any(c["policy"] == "nospec" and c["versus"] == "fixed-k3" and c["ratio"] > 0
               for c in shape["comparisons"])
