"""The README's results table is the generator's output from the committed result files."""

from __future__ import annotations

from benchmarks.readme_table import NOHARMS, ROOT, main, noharm_row, render


def test_the_readme_results_table_equals_the_generated_one() -> None:
    readme = (ROOT / "README.md").read_text()
    assert render(readme) == readme, "run: python -m benchmarks.readme_table"
    assert main(["--check"]) == 0


def test_a_noharm_row_says_each_shapes_interval_the_pushes_and_the_verdict_from_the_file() -> None:
    shape = {"shape": "burst-c8", "blocks": 6, "ratio": 0.99812, "ci": [0.9901, 1.0062],
             "verdict": "undecided"}
    s = {"shapes": [shape], "blocks": 6, "parts": 3, "ci_level": 0.95, "target": 0.995,
         "pushes_target_per_10min": 1.0, "verdict": "undecided",
         "measured": {"pushes": 1, "false_changes": 0, "minutes": 12.5}}
    row = noharm_row(next(iter(NOHARMS)), s)
    assert "6 blocks over 3 calls" in row and "burst-c8 0.998 [0.990, 1.006] undecided" in row
    assert "1 push and 0 false changes in 12.5 sidecar-minutes" in row and "**undecided**" in row
