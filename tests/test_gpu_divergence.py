"""GPU tier for lesson 02: divergence ratios measured in one run on a real GPU (`pytest -m gpu`).

Each test times the kernels it compares one after the other in the same process, through the
course's harness (result checked first, warm-up, events, median of ≥ 10 samples); expectations
are ratios, never absolute times.
"""

import pytest

from gpucourse.lessons import divergence

pytestmark = pytest.mark.gpu

BODY = 1024  # FMAs on path A: the branchy section dominates the kernel


def median_ms(frame, placement, fraction):
    row = frame[(frame.placement == placement) & (frame.fraction == fraction)]
    assert len(row) == 1, (placement, fraction)
    return float(row.median_ms.iloc[0])


def test_interleaved_half_costs_at_least_1_7x_the_same_work_clustered_per_warp():
    frame = divergence.measure_fraction_curve(BODY, BODY, placements=("interleaved", "clustered"),
                                              fractions=(0.5, 1.0))
    ratio = median_ms(frame, "interleaved", 0.5) / median_ms(frame, "clustered", 0.5)
    assert ratio >= 1.7, f"interleaved/clustered at f=0.5 = {ratio:.2f}"


def test_one_lane_in_32_makes_every_warp_pay_path_a_when_path_b_is_cheap():
    cheap = divergence.path_b_body(BODY, "cheap")
    frame = divergence.measure_fraction_curve(BODY, cheap, placements=("interleaved",),
                                              fractions=(1 / 32, 1.0))
    ratio = median_ms(frame, "interleaved", 1 / 32) / median_ms(frame, "interleaved", 1.0)
    assert ratio >= 0.8, f"interleaved f=1/32 vs f=1 = {ratio:.2f}"


def test_a_trivially_predicated_branch_shows_no_divergence_gap():
    frame = divergence.measure_fraction_curve(1, 1, kernel="predicated",
                                              placements=("interleaved", "clustered"), fractions=(0.5, 1.0))
    ratio = median_ms(frame, "interleaved", 0.5) / median_ms(frame, "clustered", 0.5)
    assert ratio < 1.25, f"predicated interleaved/clustered at f=0.5 = {ratio:.2f}"


def test_sorting_first_pays_for_heavy_bodies_and_not_for_trivial_ones():
    frame = divergence.measure_sort_pays(1 / 32, bodies=(1, BODY)).set_index("body_a")
    assert frame.loc[BODY, "compact_speedup"] > 1.0, frame.to_string()
    assert frame.loc[1, "compact_speedup"] < 1.0 and frame.loc[1, "sort_speedup"] < 1.0, frame.to_string()


def test_the_microscope_and_the_ptx_check_work_in_gpu_mode_too():
    report = divergence.trace_two_paths(0.5, "interleaved")
    assert divergence.body_efficiency(report) == 0.5
    assert divergence.ptx_evidence().set_index("kernel").loc["two_paths", "flag test compiles to"] == "branch"
