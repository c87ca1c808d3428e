"""The README's results table is the generator's output from the committed result files."""

from __future__ import annotations

from benchmarks.field_summary_model import FieldClaim, FieldShape, FieldSummary, Word
from benchmarks.noharm_summary import NoharmSummary, Ratio
from benchmarks.readme_table import (NOHARMS, RESULTS, ROOT, change, field_rows,
                                     main, noharm_file, noharm_row, render, render_index,
                                     shows_best_fixed_k)


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
    assert "too few to tell" in change(claim("documented", "p50_tpot", 1.1, [None, None], None))


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


def _summary(blocks: int, policies: list[str], tables: dict[str, list[list[int]]],
             claims: list[FieldClaim]) -> FieldSummary:
    shapes = sorted({c.shape for c in claims})
    return FieldSummary(
        headline=claims, family=len(claims),
        shapes=[FieldShape(shape=x, blocks=blocks, policies={}, comparisons=[], after_learning=[],
                           versus_best_fixed=[]) for x in shapes],
        policies=policies, tables=tables, ci_level=0.95, blocks=blocks, parts=1,
        goodput_slo=None, short_runs=[], statistic="", command=None)


def test_rows_name_their_setting_once_and_give_no_interval_below_three_blocks() -> None:
    """Two blocks leave one degree of freedom, whose Holm interval spans orders of magnitude:
    the cell says so with the point figure; no speculation gets its own columns."""
    claims = [FieldClaim(shape=sh, policy=p, versus=v, metric=m, ratio=r, same_table=False,
                         ci=[r * 0.5, r * 20.0], level=0.01, p=0.5, word="same within noise")
              for sh in ("burst-c1", "burst-c256") for p, r in (("tuned", 0.92), ("nospec", 0.7))
              for v in ("best fixed k", "nospec") if v != p
              for m in ("output_throughput", "p50_tpot")]
    s = _summary(2, ["fixed-k0", "fixed-k1", "tuned", "nospec"], {"tuned": [[1, 8, 1]]}, claims)
    rows = field_rows("H200, 32B", "x", s, ("best fixed k", "nospec"))
    assert len(rows) == 4 and rows[0].startswith("| H200, 32B | burst-c1 (2 blocks) | tuned |")
    assert all(r.startswith("|  | ") for r in rows[1:])
    assert "| -8.0% (2 blocks: too few to tell) |" in rows[0] and "[" not in rows[0].split("|")[4]
    assert rows[1].split("|")[6].strip() == "not measured"  # no speculation against itself
    assert change(claims[0], 3).startswith("-8.0% [-54.0, +1740.0]")


def test_the_readme_shows_runs_of_every_fixed_k_or_none_the_index_the_others() -> None:
    every = _summary(6, ["fixed-k0", "fixed-k1", "fixed-k2", "tuned"],
                     {"tuned": [[1, 4, 2], [5, 8, 1]]}, [])
    some = _summary(6, ["fixed-k0", "fixed-k1", "tuned"], {"tuned": [[1, 8, 2]]}, [])
    none = _summary(6, ["tuned", "nospec"], {"tuned": [[1, 8, 2]]}, [])
    assert shows_best_fixed_k(every) and shows_best_fixed_k(none) and not shows_best_fixed_k(some)
    readme = (ROOT / "README.md").read_text()
    index = (RESULTS / "README.md").read_text()
    assert "fixed k=0 and k=1 only" not in readme and "fixed k=0 and k=1 only" in index


def test_an_earning_row_gives_both_shares_and_reads_the_later_interval_against_90_percent() -> None:
    from benchmarks.field_summary_model import GapClosed
    from benchmarks.readme_table import earn_rows, earn_verdict

    def gap(awake: float, share: float | None, ci: list[float | None],
            word: Word = "faster") -> GapClosed:
        return GapClosed(policy="sidecar-from-quarter", start="quarter", awake_s=awake, blocks=12,
                         gap=1.5, gap_word=word, share=share, ci=ci)
    shape = FieldShape(shape="burst-c64", blocks=12, policies={}, comparisons=[],
                       after_learning=[], versus_best_fixed=[],
                       gap_closed=[gap(0.0, 0.6, [0.5, 0.7]), gap(60.0, 0.8, [0.7, 0.89])])
    (row,) = earn_rows("run", "run/README.md", shape)
    assert row == ("| [run](run/README.md) | burst-c64 | quarter | 1.50 | 60% [50%, 70%] (12 blocks) "
                   "| 80% [70%, 89%] (12 blocks) | **missed** |")
    assert earn_verdict(gap(60.0, 0.95, [0.91, 0.99])) == "**met**"
    assert earn_verdict(gap(60.0, 0.9, [0.8, 0.99])) == "undecided"
    assert earn_verdict(gap(60.0, 0.9, [None, None])) == "too few blocks"
    assert earn_verdict(gap(60.0, None, [None, None], "same within noise")) == "no gap"
    assert earn_verdict(gap(60.0, None, [None, None], "slower")) == "tuned is slower"
    assert earn_verdict(gap(60.0, None, [None, None], None)) == earn_verdict(None) == "too few blocks"
