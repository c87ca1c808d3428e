"""The README's results table is the generator's output from the committed result files."""

from __future__ import annotations

from benchmarks.readme_table import (NOHARMS, RESULTS, ROOT, change, field_rows, main,
                                     noharm_row, render, render_index)


def test_the_readme_results_tables_equal_the_generated_ones() -> None:
    readme = (ROOT / "README.md").read_text()
    assert render(readme) == readme, "run: python -m benchmarks.readme_table"
    index = (RESULTS / "README.md").read_text()
    assert render_index(index) == index, "run: python -m benchmarks.readme_table"
    assert main(["--check"]) == 0


def test_a_field_row_gives_each_change_in_percent_with_its_interval_and_word() -> None:
    shape = {"shape": "burst-c16", "blocks": 6,
             "comparisons": [
                 {"policy": "tuned", "versus": "documented", "metric": "output_throughput",
                  "ratio": 1.052, "ci": [1.010, 1.096], "word": "faster"},
                 {"policy": "tuned", "versus": "documented", "metric": "p50_tpot",
                  "ratio": 0.95, "ci": [0.90, 1.01], "word": "same within noise"}],
             "versus_best_fixed": [{"policy": "tuned", "ratio": 0.99, "ci": [0.97, 1.01],
                                    "word": "same within noise", "closest": "fixed-k2"},
                                   {"policy": "tuned", "metric": "p50_tpot", "ratio": 0.9,
                                    "ci": [0.85, 0.95], "word": "faster", "closest": "fixed-k2"},
                                   {"policy": "documented", "ratio": 0.9, "ci": [0.85, 0.95],
                                    "word": "slower", "closest": "fixed-k2"}]}
    (row,) = field_rows("CPU", "cpu-tiny-field", {"policies": ["fixed-k2", "documented", "tuned"],
                                                  "shapes": [shape]})
    assert ("| burst-c16 (6 blocks) | tuned | -1.0% [-3.0, +1.0] same within noise | "
            "-10.0% [-15.0, -5.0] faster |") in row
    assert "| +5.2% [+1.0, +9.6] faster | -5.0% [-10.0, +1.0] same within noise |" in row
    assert change(None) == "not measured"
    assert "too few blocks" in change({"ratio": 1.1, "ci": [None, None], "word": None})


def test_a_noharm_row_says_each_shapes_interval_the_pushes_and_the_verdict_from_the_file() -> None:
    shape = {"shape": "burst-c8", "blocks": 6, "ratio": 0.99812, "ci": [0.9901, 1.0062],
             "verdict": "undecided"}
    s = {"shapes": [shape], "blocks": 6, "parts": 3, "ci_level": 0.95, "target": 0.995,
         "pushes_target_per_10min": 1.0, "verdict": "undecided",
         "measured": {"pushes": 1, "false_changes": 0, "minutes": 12.5}}
    row = noharm_row(next(iter(NOHARMS)), s)
    assert "6 blocks over 3 calls" in row and "burst-c8 0.998 [0.990, 1.006] undecided" in row
    assert "1 push and 0 false changes in 12.5 sidecar-minutes" in row and "**undecided**" in row
