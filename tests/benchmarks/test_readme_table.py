"""The README's results table is the generator's output from the committed result files."""

from __future__ import annotations

from benchmarks.readme_table import ROOT, main, render


def test_the_readme_results_table_equals_the_generated_one() -> None:
    readme = (ROOT / "README.md").read_text()
    assert render(readme) == readme, "run: python -m benchmarks.readme_table"
    assert main(["--check"]) == 0
