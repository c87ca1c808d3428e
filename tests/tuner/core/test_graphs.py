"""CUDA-graph boundaries placed in the grid and under table edges (sizes given by hand: the CPU
engine captures no graphs)."""

from __future__ import annotations

from tuner.core.graphs import Boundary, boundaries, grid_points, snap_edges
from tuner.core.table import Table

# vLLM's default capture sizes end at 512 tokens (the H200 runs)
SIZES = [1, 2, 4, 8, 16, 24, 32, 64, 128, 256, 512]


def test_the_h200_cliffs_are_found_before_measuring() -> None:
    found = boundaries(SIZES, None, K=3, max_num_seqs=256)
    last = {b.k: b.B_last for b in found}
    # k=0 and k=1 fit 512 tokens up to B=256 (pure decode): no boundary inside the grid;
    # k=2 leaves the graphs after B=170 (the MoE's T(B, 2) jump between 128 and 192), k=3 after 128
    assert last == {2: 170, 3: 128}
    # serving adds prefill: k=1 at B=256 carried 547 tokens (~0.14 prefill per request)
    served = boundaries(SIZES, None, K=3, max_num_seqs=256, prefill_per_request=[0.1, 0.14, 0.1, 0.1])
    assert {b.k: b.B_last for b in served}[1] == 239
    assert any(b.tokens == 512 for b in served)


def test_grid_gets_both_sides_of_each_boundary_and_the_token_budget_counts() -> None:
    found = boundaries(SIZES, 2048, K=3, max_num_seqs=1024)
    grid = grid_points([1, 8, 16, 128, 256, 1024], found, 1024)
    assert {128, 129, 170, 171} <= set(grid) and {512, 513} <= set(grid)  # 2048 tokens at k=3
    assert Boundary(k=3, B_last=512, tokens=2048) in found


def test_an_edge_near_a_boundary_snaps_onto_it() -> None:
    found = [Boundary(k=2, B_last=170, tokens=512)]
    t = Table.from_list([[1, 160, 2], [161, 256, 1]])
    assert snap_edges(t, found).to_list() == [[1, 170, 2], [171, 256, 1]]
    far = Table.from_list([[1, 100, 2], [101, 256, 1]])
    assert snap_edges(far, found) == far  # 70 batch sizes away: not the same jump


def test_a_profile_with_graph_limits_snaps_its_table_and_reports_them(tmp_path) -> None:
    from benchmarks.synthetic import paper_profile
    from tuner.core.profile import GraphInfo
    from tuner.report import markdown, plot

    p = paper_profile()  # K=3, B up to 16: k=3 up to B=12, then k=1
    assert p.build().table.to_list() == [[1, 12, 3], [13, 16, 1]]
    p.graph = GraphInfo(capture_sizes=[1, 2, 4, 8, 16, 32, 44])  # 44 tokens: k=3 fits B <= 11
    assert {(b.k, b.B_last) for b in p.graph_boundaries()} >= {(3, 11)}
    after = p.build().table
    assert after.to_list() == [[1, 11, 3], [12, 16, 1]]  # the edge moves onto the limit
    p.table = after.to_list()
    assert "k=3 past B=11 (44 tokens)" in markdown(p, "x.png")
    assert plot(p, tmp_path / "p.png").stat().st_size > 10_000
