"""The README's results table is the generator's output from the committed result files."""

from __future__ import annotations

from benchmarks.field_summary_model import FieldClaim, FieldShape, FieldSummary, Word
from benchmarks.noharm_summary import NoharmSummary, Ratio
from benchmarks.readme_table import (NOHARMS, RESULTS, ROOT, change, field_rows, main,
                                     noharm_file, noharm_row, render, render_index)


def test_the_readme_results_tables_equal_the_generated_ones() -> None:
    readme = (ROOT / "README.md").read_text()
    assert render(readme) == readme, "run: python -m benchmarks.readme_table"
    index = (RESULTS / "README.md").read_text()
    assert render_index(index) == index, "run: python -m benchmarks.readme_table"
    assert main(["--check"]) == 0


def test_a_field_row_gives_each_change_in_percent_with_its_interval_and_word() -> None:
    def claim(versus: str, metric: str, ratio: float, ci: list[float | None],
              said: Word) -> FieldClaim:
        return FieldClaim(shape="burst-c16", policy="tuned", versus=versus, metric=metric,
                          ratio=ratio, same_table=said == "same table", ci=ci, level=0.05,
                          p=0.01, word=said)
    shape = FieldShape(shape="burst-c16", blocks=6, policies={}, comparisons=[],
                       after_learning=[], versus_best_fixed=[])
    s = FieldSummary(headline=[
        claim("best fixed k", "output_throughput", 0.99, [0.97, 1.01], "same within noise"),
        claim("best fixed k", "p50_tpot", 0.9, [0.85, 0.95], "faster"),
        claim("documented", "output_throughput", 1.052, [1.010, 1.096], "faster"),
        claim("documented", "p50_tpot", 1.0, [0.9, 1.1], "same table")],
        family=3, shapes=[shape], policies=["tuned"], tables={}, ci_level=0.95, blocks=6,
        parts=1, goodput_slo=None, short_runs=[], statistic="", command=None)
    (row,) = field_rows("CPU", "cpu-tiny-field", s)
    assert ("| burst-c16 (6 blocks) | tuned | -1.0% [-3.0, +1.0] same within noise | "
            "-10.0% [-15.0, -5.0] faster | +5.2% [+1.0, +9.6] faster | the same table |") in row
    assert change(None) == "not measured"
    assert "too few blocks" in change(claim("documented", "p50_tpot", 1.1, [None, None], None))


def test_a_noharm_row_says_each_shapes_interval_the_pushes_and_the_verdict_from_the_file() -> None:
    folder = next(iter(NOHARMS))
    read = NoharmSummary.model_validate_json(noharm_file(folder).read_text())
    shape = read.shapes[0].model_copy(update={
        "shape": "burst-c8", "blocks": 6, "ratio": 0.99812, "ci": [0.9901, 1.0062],
        "verdict": "undecided", "mean_tpot_ratio": Ratio(ratio=1.012, ci=[1.0042, 1.0205])})
    s = read.model_copy(update={
        "shapes": [shape], "blocks": 6, "parts": 3, "ci_level": 0.95, "target": 0.995,
        "pushes_target_per_10min": 1.0, "verdict": "undecided",
        "measured": read.measured.model_copy(update={"pushes": 1, "false_changes": 0, "minutes": 12.5})})
    row = noharm_row(folder, s)
    assert "6 blocks over 3 calls" in row and "burst-c8 0.998 [0.990, 1.006] undecided" in row
    assert "(mean TPOT 1.012 [1.004, 1.020])" in row
