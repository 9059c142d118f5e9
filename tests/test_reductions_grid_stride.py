"""Lesson 04a's last rung (Harris's kernel 7, many elements per thread), its Little's-law model, the ladder's
size and caption, and the site-stack paths (torch missing: G23; the atomics table's arch: G19). CPU only."""

from __future__ import annotations

import re
import sys
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from gpucourse.errors import InvalidConfig
from gpucourse.lessons import reductions
from gpucourse.lessons.reductions import compiled, experiments, figures, kernels, model
from gpucourse.measure import calibration, reference

# --- the kernel under the microscope ----------------------------------------------------------------------


@pytest.mark.parametrize("n, block", [(1, 32), (31, 32), (513, 64), (1000, 256), (1500, 256), (2049, 256),
                                      (4096, 512), (3001, 128)])
def test_grid_stride_sums_any_size_including_one_not_a_multiple_of_the_grid(n, block):
    x = np.random.default_rng(n).random(n, dtype=np.float32)
    assert reductions.reduce_sum(x, "grid stride", block) == pytest.approx(float(x.sum(dtype=np.float64)), rel=1e-5)


def test_grid_stride_with_a_grid_that_does_not_divide_n(monkeypatch):
    # 3 resident blocks of 64 = 192 threads over 1,000 elements: 1000 = 5·192 + 40, so 40 threads take 6
    monkeypatch.setattr(experiments, "SIM_RESIDENT_BLOCKS", 3)
    x = np.random.default_rng(3).random(1000, dtype=np.float32)
    assert experiments.launch_blocks("grid stride", 1000, 64) == 3
    assert reductions.reduce_sum(x, "grid stride", 64) == pytest.approx(float(x.sum(dtype=np.float64)), rel=1e-5)
    assert model.grid_stride_loads_per_thread(1000, 64, 3) == (5, 6)


def _loads_per_thread(report) -> pd.Series:
    """Warp load requests per (block, warp), from the microscope."""
    loads = report.requests()
    loads = loads[(loads.op == "load")]
    per_warp = loads.groupby(["block", "warp"]).size()
    return per_warp


def test_each_thread_loads_its_grid_stride_slice_once_and_four_at_a_time():
    report, correct = reductions.trace_reduction("grid stride", n=1000, block=256)
    assert correct
    memory = report.memory()
    loads = memory[memory.op == "load"]
    # every element read exactly once: 1,000 lanes' loads in all; 4 loads per thread for lanes 0–231, 3 beyond
    assert int(report.requests().query("op == 'load'").lanes.sum()) == 1000
    assert reductions.reduction_counts("grid stride", 1000, 256)["loads per thread (most)"] == 4
    per_warp = _loads_per_thread(report)
    assert (per_warp.iloc[:7] == 4).all()  # warps 0–6: four load requests, one per partial sum
    # warp 7 splits: lanes 224–231 take the main loop (4 requests), lanes 232–255 the ragged end (3 more)
    assert per_warp.iloc[7] == 7
    assert int(loads.sectors.sum()) == 125  # 4,000 bytes / 32: coalesced like every other rung


def test_one_atomic_per_block_and_one_launch():
    counts = reductions.reduction_counts("grid stride", 2049, 256)
    assert counts["blocks"] == experiments.SIM_RESIDENT_BLOCKS == 2  # capped by the resident grid, not n / 1024
    assert counts["atomics"] == counts["blocks"] and counts["launches to finish"] == 1
    report, _ = reductions.trace_reduction("grid stride", n=2049, block=256)
    atomics = report.requests().query("op == 'atomic'")
    assert int(atomics.lanes.sum()) == 2  # lane 0 of warp 0 of each block, nobody else
    # the per-lane atomic would be a known-wrong rung: the ballot kernel shows the microscope counts lanes
    assert reductions.ballot_counts(512, 0.5).set_index("version").loc["per lane", "atomic lanes"] > 2


def test_the_grid_stride_rung_issues_fewer_warp_lines_per_element_than_the_tree_rungs():
    table = reductions.counts_table(1000, 256).set_index("variant")
    per_element = table["warp line issues"] / table["n"]
    assert per_element.idxmin() == "grid stride"
    assert table.loc["grid stride", "barriers per warp"] == 1.0


def test_the_grid_stride_kernel_keeps_four_independent_partial_sums_in_its_source():
    import inspect

    source = inspect.getsource(kernels.grid_stride_kernel)
    assert source.count("+= x[i") == 5  # four in the main loop, one in the ragged end
    assert "cuda.gridDim.x * B" in source and "cuda.atomic.add(out, 0, v)" in source
    assert kernels.GRID_STRIDE_PARTIALS == 4


# --- the model --------------------------------------------------------------------------------------------


def test_resident_grid_and_loads_per_thread_on_an_h200():
    assert model.resident_blocks(132, (9, 0), 256) == 1056  # 132 SMs × 2,048 / 256
    assert model.resident_blocks(40, (7, 5), 256) == 160  # a T4: 1,024 threads per SM
    assert model.grid_stride_blocks(1 << 26, 256, 1056) == 1056
    assert model.grid_stride_blocks(1000, 256, 1056) == 1  # a small n takes few blocks
    assert model.grid_stride_blocks(1, 256, 1056) == 1
    assert model.grid_stride_loads_per_thread(1 << 26, 256, 1056) == (248, 249)


def test_littles_law():
    assert model.bytes_in_flight(132, 2048, 4) == 4_325_376
    assert model.littles_law_gbps(1_081_344, 800.0, 4271.0) == pytest.approx(1351.68)
    assert model.littles_law_gbps(4_325_376, 800.0, 4271.0) == 4271.0  # capped at the ceiling
    table = model.in_flight_table(132, (9, 0), 4271.0, 800.0).set_index("variant")
    assert list(table["loads in flight per thread"]) == [1, 1, 1, 2, 2, 2, 4]
    assert table.loc["grid stride", "Little's law bound (GB/s)"] == 4271.0
    assert table.loc["sequential", "Little's law bound (GB/s)"] < 0.65 * 4271.0
    assert "loaded latency 800 ns (calibrated)" in table.attrs["source"]


def test_the_ladders_latency_is_lesson_03s_read_bytes_over_read_rate():
    """W4 / the factor-2 slip: 04a once divided the *read* bytes in flight (1.08 MB) by the one-element copy's
    *effective* rate (reads + writes) and got ~400 ns, making its bounds twice too generous. With the one
    calibration, a one-load rung (the same 8 KiB of reads per SM as lesson 03's copy) is bounded by exactly that
    copy's read rate, and every recorded rung sits under its bound."""
    cal = calibration.recorded()
    if cal is None:
        pytest.skip("no calibration recording in data/reference")
    table = reductions.in_flight_model().set_index("variant")
    bound = table["Little's law bound (GB/s)"]
    one_load = model.bytes_in_flight(cal.sm_count, 2048, 1)
    assert one_load == cal.reads_in_flight_per_sm * cal.sm_count  # 1.08 MB on an H200
    assert bound["sequential"] == pytest.approx(cal.one_element_gbps / 2)  # the copy's read rate, not its 2×
    assert bound["warp shuffle"] == pytest.approx(cal.one_element_gbps)  # two loads: twice the reads in flight
    slipped = one_load / cal.one_element_gbps  # read bytes ÷ read-plus-write rate: the old "≈ 410 ns"
    assert cal.latency_ns == pytest.approx(2 * slipped) and 800 < cal.latency_ns < 850
    assert f"loaded latency {cal.latency_ns:.0f} ns" in table.attrs["source"]
    rec = reference.load("reductions.sum")
    if rec is not None:  # the recording: no tree rung beats its bound (quick H200 recording, 2^24)
        for row in rec.data[rec.data.kind == "kernel"].itertuples():
            assert row.gbps <= bound[row.variant], row


@pytest.mark.parametrize("call", [
    lambda: model.resident_blocks(0, (9, 0), 256), lambda: model.resident_blocks(132, (6, 1), 256),
    lambda: model.resident_blocks(132, (9, 0), 100), lambda: model.grid_stride_blocks(10, 256, 0),
    lambda: model.bytes_in_flight(132, 2048, 0), lambda: model.littles_law_gbps(1e6, 0, 4000),
    lambda: model.loads_in_flight_per_thread("tree"), lambda: model.in_flight_table(132, (6, 1), 4000.0, 800.0),
])
def test_bad_model_input_is_one_line(call):
    with pytest.raises(InvalidConfig) as error:
        call()
    assert "\n" not in str(error.value)


def test_in_flight_model_reads_the_recorded_gpu_without_one():
    table = reductions.in_flight_model()
    assert "132 SMs" in table.attrs["source"] and "H200" in table.attrs["source"]


# --- the ladder's size and caption --------------------------------------------------------------------------


def test_the_ladder_is_drawn_at_2_to_the_26_and_a_smaller_recording_says_why():
    assert reductions.LADDER_N == 1 << 26 and reductions.LADDER_N in experiments.SWEEP_SIZES
    data, source = reductions.ladder_data()
    if data is None:
        pytest.skip(source)
    if int(data.n.iloc[0]) != 1 << 26:
        assert "not at the 67,108,864 of the lesson" in source and "size of the L2" in source
        assert "'" not in source  # a caption is HTML-escaped: apostrophes show as &#x27;


def test_the_unrecorded_rung_is_drawn_as_its_model_bound_and_labelled_so():
    """W5: the grid-stride rung is in no recording; the chart draws its bound, labelled model, no recording."""
    data, _ = reductions.ladder_data()
    if data is None or "grid stride" in set(data.variant):
        pytest.skip("no recording, or one that has the rung")
    fig = figures.ladder_figure()
    drawn = [t for t in fig.data if t.name.startswith("model, no recording")]
    assert len(drawn) == 1 and list(drawn[0].x) == ["grid stride"]
    assert drawn[0].y[0] == reductions.in_flight_model().set_index("variant").loc["grid stride",
                                                                                   "Little's law bound (GB/s)"]
    assert all("grid stride" not in t.x for t in fig.data if not t.name.startswith("model, no recording"))
    assert "is that bound only: the model, never measured in this recording" in charts_caption(fig)


def charts_caption(fig) -> str:
    from gpucourse.viz import charts

    return charts.caption_of(fig).replace("<br>", " ")


def test_the_gpu_caption_does_not_repeat_measured_now(monkeypatch):
    """G19: the caption read "Measured now: measured now on …"."""
    from gpucourse.measure import runtime

    table = pd.DataFrame([{"n": 1 << 26, "block": 256, "variant": v, "kind": "kernel", "gbps": 1000.0}
                          for v in kernels.REDUCTIONS]
                         + [{"n": 1 << 26, "block": 256, "variant": "cupy.sum", "kind": "library", "gbps": 4000.0}])
    table.attrs["skipped"] = ["torch.sum skipped: torch is not importable here (no torch)"]
    monkeypatch.setattr(runtime, "is_gpu", lambda: True)
    from gpucourse.measure import ceilings

    monkeypatch.setattr(runtime, "device", lambda: SimpleNamespace(name="NVIDIA H200", compute_capability=(9, 0),
                                                                   sm_count=132))
    monkeypatch.setattr(experiments, "measure_reductions", lambda n: table)
    monkeypatch.setattr(ceilings, "copy_gbps", lambda: 4271.0)
    fig = figures.ladder_figure()
    caption = next(a.text for a in fig.layout.annotations if a.name == "source")
    assert caption.lower().count("measured now") == 1, caption
    assert "torch.sum skipped" in caption
    bound = next(t for t in fig.data if t.name.startswith("Little"))  # the model, for this GPU
    assert dict(zip(bound.x, bound.y, strict=True))["grid stride"] == 4271.0


# --- G23: no torch, no failure --------------------------------------------------------------------------


def test_torch_missing_skips_torch_sum_with_a_note(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch now raises ImportError
    libraries, notes = reductions.available_libraries()
    assert libraries == ("cupy.ReductionKernel", "cupy.sum")
    assert len(notes) == 1 and "torch.sum skipped" in notes[0]


def test_torch_present_keeps_torch_sum(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", SimpleNamespace(sum=sum))  # a stand-in that imports
    assert reductions.available_libraries() == (reductions.LIBRARIES, [])


def test_measure_reductions_never_imports_torch_when_it_is_missing(monkeypatch):
    """The GPU path with torch hidden: measure_reductions asks available_libraries first, so the ladder and
    CuPy's sums are measured and torch.sum is left out with its note (no ImportError from _library_runner)."""
    import importlib

    real_import = importlib.import_module

    def no_torch(name, *args):
        if name == "torch":
            raise ImportError("No module named 'torch'")
        return real_import(name, *args)

    monkeypatch.setattr(importlib, "import_module", no_torch)
    assert reductions.available_libraries(("cupy.sum", "torch.sum"))[0] == ("cupy.sum",)
    source = re.sub(r"\s+", " ", __import__("inspect").getsource(experiments.measure_reductions))
    assert "libraries, skipped = available_libraries(libraries)" in source


# --- G19: the atomics table says what it compiled for ----------------------------------------------------


def test_the_atomics_table_names_the_arch_it_compiled_for(monkeypatch):
    from gpucourse.measure import runtime

    assert compiled.target_arch() == 90  # no GPU: Hopper
    monkeypatch.setattr(runtime, "is_gpu", lambda: True)
    monkeypatch.setattr(runtime, "device", lambda: SimpleNamespace(name="NVIDIA L4", compute_capability=(8, 9)))
    seen = []

    def fake_compile(pairs, cc):
        seen.append(cc)
        return [{"ptx": "red.global.add.u32 [%rd1], 1;"} for _ in pairs]

    monkeypatch.setattr(compiled.ptxinfo, "compile_ptx", fake_compile)
    monkeypatch.setattr(compiled.ptxinfo, "find_ptxas", lambda: None)  # PTX only: no SASS tools needed
    compiled.atomics_as_compiled.cache_clear()
    try:
        table = compiled.atomics_as_compiled()
    finally:
        compiled.atomics_as_compiled.cache_clear()
    assert seen == [(8, 9)]
    assert "sm_89" in table.attrs["source"] and "this GPU" in table.attrs["source"]
    assert "no GPU" not in table.attrs["source"]


# --- the words the recordings corrected ---------------------------------------------------------------------


def _prose(name: str) -> str:
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "notebooks" / name
    return " ".join(re.sub(r"^# ?", "", path.read_text(), flags=re.MULTILINE).split())


def test_the_lessons_say_what_the_recordings_show_not_dram_limited_gaps():
    text = _prose("04a_reductions.py")
    for wrong in ("so the gaps are smaller", "limited by DRAM bandwidth, so the time difference can be small",
                  "same run** on 2²⁴ float32"):
        assert wrong not in text, wrong
    assert "12–40 % of the 4,271 GB/s copy ceiling" in text and "same run** on 2²⁶ float32" in text
    assert "getsource(kernels.grid_stride_kernel)" in text and "reductions.in_flight_model()" in text
    transposes = _prose("04_shared_memory.py")
    assert "four global loads before any store" in transposes and "(the ceiling)" not in transposes
