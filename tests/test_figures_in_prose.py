"""Figures typed in prose, checked against their source: one number, one source (issue 47).

Where a lesson's text must hold a recorded or computed number, it is listed here: the file, the text around
the number (``{}`` marks it) and the function that computes it from its source (a recording under
data/reference/, the one calibration per GPU, the toolchain, a constant). The test finds the template in the
prose (comment markers stripped, whitespace collapsed), reads the typed number and compares it with the
computed one, formatted the same way. A recording that changes, or a number edited by hand, fails here.

Prefer rendering a number in an output cell; list it here only where the prose must say it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

from gpucourse.measure import calibration, reference

ROOT = Path(__file__).resolve().parents[1]
H200 = "nvidia-h200"


@dataclass(frozen=True)
class Typed:
    path: str
    template: str  # the prose around the number; "{}" is the number
    source: str  # where the number comes from, in words (for the failure message)
    value: Callable[[], str]  # the number, computed from that source and formatted as the prose writes it


def prose(path: str) -> str:
    """The words of a jupytext lesson (comment markers stripped) or a markdown file, whitespace collapsed."""
    text = (ROOT / path).read_text()
    if path.endswith(".py"):
        text = re.sub(r"^# ?", "", text, flags=re.MULTILINE)
    return " ".join(text.split())


def typed_numbers(text: str, template: str) -> list[str]:
    """Every number written where ``template``'s ``{}`` is."""
    before, after = template.split("{}")
    pattern = re.escape(re.sub(r"\s+", " ", before)) + r"([0-9][0-9,.]*?)" + re.escape(re.sub(r"\s+", " ", after))
    return re.findall(pattern, text)


def mismatch(text: str, row: Typed) -> str | None:
    """Why ``text`` disagrees with ``row`` (its template absent or repeated, or another number), else None."""
    found = typed_numbers(text, row.template)
    if len(found) != 1:
        return f"{row.path}: {row.template!r} found {len(found)} times (once expected)"
    expected = row.value()
    if found[0] != expected:
        return f"{row.path}: typed {found[0]} in {row.template!r}, but {row.source} gives {expected}"
    return None


# --- the sources ---------------------------------------------------------------------------------------------


@cache
def _cal() -> calibration.Calibration:
    cal = calibration.recorded(H200)
    if cal is None:
        pytest.skip("no H200 calibration recording in data/reference")
    return cal


def _rows(sweep: str):
    rec = reference.load(sweep, gpu=H200)
    if rec is None:
        pytest.skip(f"no H200 recording of {sweep}")
    return rec.data


def _stride_gbps(stride: int) -> float:
    data = _rows("coalescing.stride")
    return float(data[(data.dtype == "float32") & (data.stride == stride)].gbps.iloc[0])


def _layout_gbps(layout: str) -> float:
    data = _rows("coalescing.layout")
    return float(data[data.layout == layout].gbps.iloc[0])


def _rung_gbps(variant: str) -> float:
    data = _rows("reductions.sum")
    return float(data[data.variant == variant].gbps.iloc[0])


def _tree_rungs() -> list[float]:
    data = _rows("reductions.sum")
    return list(data[(data.kind == "kernel") & (data.variant != "grid stride")].gbps)


def _ceiling_tflops() -> float:
    data = _rows("measuring.ceilings")
    return float(data[data.quantity == "fp32 matmul"].measured.iloc[0])


def _datasheet_tflops() -> float:
    data = _rows("measuring.ceilings")
    return float(data[data.quantity == "fp32 matmul"].datasheet.iloc[0])


def _cublas_1024_gflops() -> float:
    data = _rows("tiling.matmul")
    rows = data[(data.rung == "cuBLAS") & (data.n == 1024)]
    return float(rows.gflops.iloc[0])


def _first_attempt(kernel: str, occupancy_pct: float) -> float:
    data = _rows("occupancy.memory_bound")
    return float(data[(data.kernel == kernel) & (data.occupancy_pct == occupancy_pct)].gbps.iloc[0])


H100_FIRST_CONTACT = ROOT / "data/reference/nvidia-h100-80gb-hbm3/first-contact/tier-subset.junit.xml"


def _h100_first_attempt(padding_bytes: int) -> float:
    """The H100's first-attempt copy (64 threads, 25 % with 24,960 B of padding, 100 % with none), as its
    first-contact tier run measured it: the failed assertion's ``Measurement(label=…).gbps`` values."""
    text = H100_FIRST_CONTACT.read_text()
    label = re.escape(f"copy, 64 threads, {padding_bytes} B padding")
    found = re.findall(r"E\s+\+\s+(?:where|and)\s+([0-9.]+) = Measurement\(label='" + label, text)
    assert found, f"no measurement of {label!r} in {H100_FIRST_CONTACT.name}"
    return float(found[0])


def _occupancy_model():
    from gpucourse.lessons import occupancy

    return occupancy.lesson_speed_model("memory")


def _first_attempt_check() -> dict:
    from gpucourse.lessons import occupancy

    check = occupancy.first_attempt_check()
    if check is None:
        pytest.skip("no first-attempt recording of the calibration GPU")
    return check


def _spills(field: str) -> str:
    from gpucourse.lessons import occupancy

    usage = occupancy.usage("accumulators", max_registers=32, cc=(9, 0))
    if not usage.known:
        pytest.skip(f"no ptxas here: {usage.reason}")
    return f"{getattr(usage, field):,}"


def _driver_configurations() -> int:
    from gpucourse.lessons.occupancy import experiments, model

    return (len(experiments.DRIVER_THREADS) * len(experiments.DRIVER_DYNAMIC_BYTES) * len(experiments.DRIVER_CAPS)
            * len(model.KERNELS))


def _in_flight_mb(loads: int) -> float:
    return 2048 * loads * 4 * _cal().sm_count / 1e6


TYPED = (
    # lesson 03: the one-element copy, from the stride recording (W7: it was also quoted from a tier run)
    Typed("notebooks/03_coalescing.py", "Even stride 1 sits at **{}** of the ceiling",
          "coalescing.stride (stride 1 ÷ its copy ceiling)", lambda: f"{_cal().fraction_of_ceiling:.2f}"),
    Typed("notebooks/03_coalescing.py", "the H200 ran it at {} of its copy ceiling",
          "coalescing.stride (stride 1 ÷ its copy ceiling)", lambda: f"{_cal().fraction_of_ceiling:.2f}"),
    Typed("notebooks/03_coalescing.py", "one 4-byte load per thread kept an H200 at {} of its ceiling",
          "coalescing.stride (stride 1 ÷ its copy ceiling)", lambda: f"{_cal().fraction_of_ceiling:.2f}"),
    Typed("notebooks/03_coalescing.py", "the one-element copy at {} of 4,271 GB/s",
          "coalescing.stride, float32 stride 1", lambda: f"{_cal().one_element_gbps:,.0f}"),
    Typed("notebooks/03_coalescing.py", "the one-element copy at 2,626 of {} GB/s",
          "the recorded copy ceiling (measuring.ceilings)", lambda: f"{_cal().ceiling_gbps:,.0f}"),
    Typed("notebooks/03_coalescing.py", "of 4,271 GB/s, {}, `data/reference/nvidia-h200/quick/coalescing.stride.csv`",
          "coalescing.stride (stride 1 ÷ its copy ceiling)", lambda: f"{_cal().fraction_of_ceiling:.2f}"),
    Typed("notebooks/03_coalescing.py", "stopped at {} of the ceiling: see",
          "coalescing.layout, row traversal ÷ the copy ceiling",
          lambda: f"{_layout_gbps('row traversal') / _cal().ceiling_gbps:.2f}"),
    Typed("notebooks/03_coalescing.py", "what the model's {} ns stands for",
          "the calibrated latency (gpucourse.measure.calibration)", lambda: f"{_cal().latency_ns:.0f}"),
    Typed("notebooks/03_coalescing.py", "stride 32 ran at **1/{}** of stride 1",
          "coalescing.stride, stride 1 ÷ stride 32", lambda: f"{_stride_gbps(1) / _stride_gbps(32):.0f}"),
    Typed("notebooks/03_coalescing.py", "of stride 1 (1/{} of the ceiling)",
          "coalescing.stride, the ceiling ÷ stride 32", lambda: f"{_cal().ceiling_gbps / _stride_gbps(32):.0f}"),
    Typed("notebooks/03_coalescing.py", "stride 32 ran at **1/{} of stride 1**",
          "coalescing.stride, stride 1 ÷ stride 32", lambda: f"{_stride_gbps(1) / _stride_gbps(32):.1f}"),
    Typed("notebooks/03_coalescing.py", "an H200 lost {}× at stride 32",
          "coalescing.stride, stride 1 ÷ stride 32", lambda: f"{_stride_gbps(1) / _stride_gbps(32):.1f}"),
    # lesson 04: cuBLAS's share of the fp32 peak (W9)
    Typed("notebooks/04_shared_memory.py", "cuBLAS ran fp32 at {} of the CUDA cores'",
          "measuring.ceilings, fp32 matmul ÷ datasheet", lambda: f"{_ceiling_tflops() / _datasheet_tflops():.2f}"),
    Typed("notebooks/04_shared_memory.py", "cores' {} TFLOP/s datasheet peak",
          "measuring.ceilings, the datasheet column", lambda: f"{_datasheet_tflops():.0f}"),
    Typed("notebooks/04_shared_memory.py", "at N = 8192 ({} TFLOP/s, lesson 00's ceilings recording)",
          "measuring.ceilings, fp32 matmul", lambda: f"{_ceiling_tflops():.1f}"),
    Typed("notebooks/04_shared_memory.py", "and at {} at the ladder's N = 1024",
          "tiling.matmul cuBLAS at N = 1024 ÷ the datasheet",
          lambda: f"{_cublas_1024_gflops() / 1000 / _datasheet_tflops():.2f}"),
    Typed("notebooks/04_shared_memory.py", "at the ladder's N = 1024 ({} TFLOP/s)",
          "tiling.matmul cuBLAS at N = 1024", lambda: f"{_cublas_1024_gflops() / 1000:.1f}"),
    # lesson 04a: the ladder and its Little's-law bound (W4)
    Typed("notebooks/04a_reductions.py", "**12–{} % of the 4,271 GB/s copy ceiling**",
          "reductions.sum, best tree rung ÷ the copy ceiling",
          lambda: f"{100 * max(_tree_rungs()) / _cal().ceiling_gbps:.0f}"),
    Typed("notebooks/04a_reductions.py", "**{}–40 % of the 4,271 GB/s copy ceiling**",
          "reductions.sum, first tree rung ÷ the copy ceiling",
          lambda: f"{100 * min(_tree_rungs()) / _cal().ceiling_gbps:.0f}"),
    Typed("notebooks/04a_reductions.py", "**12–40 % of the {} GB/s copy ceiling**",
          "the recorded copy ceiling", lambda: f"{_cal().ceiling_gbps:,.0f}"),
    Typed("notebooks/04a_reductions.py", "those rungs ran at {} (interleaved)",
          "reductions.sum, interleaved", lambda: f"{_rung_gbps('interleaved'):,.0f}"),
    Typed("notebooks/04a_reductions.py", "(interleaved) to {} GB/s (warp shuffle)",
          "reductions.sum, warp shuffle", lambda: f"{_rung_gbps('warp shuffle'):,.0f}"),
    Typed("notebooks/04a_reductions.py", "ceiling**, {}× from the first rung to the best",
          "reductions.sum, best ÷ first tree rung", lambda: f"{max(_tree_rungs()) / min(_tree_rungs()):.1f}"),
    Typed("notebooks/04a_reductions.py", "an H200 has {} MB in flight",
          "132 SMs × 2,048 threads × 4 loads × 4 B", lambda: f"{_in_flight_mb(4):.1f}"),
    Typed("notebooks/04a_reductions.py", "bandwidth × latency needs ({} MB)",
          "the copy ceiling × the calibrated latency", lambda: f"{_cal().ceiling_gbps * _cal().latency_ns / 1e6:.1f}"),
    Typed("notebooks/04a_reductions.py", "03 and 05's: {} ns on an H200",
          "the calibrated latency (gpucourse.measure.calibration)", lambda: f"{_cal().latency_ns:.0f}"),
    Typed("notebooks/04a_reductions.py", "`cupy.sum` read only {} GB/s there",
          "reductions.sum, cupy.sum at 2^24", lambda: f"{_rung_gbps('cupy.sum'):,.0f}"),
    Typed("notebooks/04a_reductions.py", "on the H200 recording ({} against",
          "reductions.sum, warp shuffle", lambda: f"{_rung_gbps('warp shuffle'):,.0f}"),
    Typed("notebooks/04a_reductions.py", "against {} GB/s for the first add through shared memory",
          "reductions.sum, first add", lambda: f"{_rung_gbps('first add'):,.0f}"),
    # lesson 05: the calibration, and the first attempt it is checked on (W3, F14)
    Typed("notebooks/05_occupancy.py", "gives a latency about {} % longer",
          "Little's law on the first attempt's ILP-4 point ÷ the calibrated latency",
          lambda: f"{100 * (_first_attempt_check()['latency on this point (ns)'] / _cal().latency_ns - 1):.0f}"),
    Typed("notebooks/05_occupancy.py", "measured **{} GB/s at 25 % and",
          "occupancy.memory_bound, copy at 25 %", lambda: f"{_first_attempt('copy', 25.0):,.0f}"),
    Typed("notebooks/05_occupancy.py", "25 % and {} GB/s at 100 %**",
          "occupancy.memory_bound, copy at 100 %", lambda: f"{_first_attempt('copy', 100.0):,.0f}"),
    Typed("notebooks/05_occupancy.py", "(an H100: {} and",
          "the H100's first-contact tier run, copy at 25 % (first-contact/tier-subset.junit.xml)",
          lambda: f"{_h100_first_attempt(24960):,.0f}"),
    Typed("notebooks/05_occupancy.py", "(an H100: 838 and {})",
          "the H100's first-contact tier run, copy at 100 % (first-contact/tier-subset.junit.xml)",
          lambda: f"{_h100_first_attempt(0):,.0f}"),
    Typed("notebooks/05_occupancy.py", "3 register caps ({} configurations)",
          "occupancy.experiments' DRIVER_* sizes × the lesson's kernels", lambda: f"{_driver_configurations()}"),
    Typed("notebooks/05_occupancy.py", "which asked for fewer: {} configurations",
          "occupancy.driver recording, rows", lambda: f"{len(_rows('occupancy.driver'))}"),
    Typed("notebooks/05_occupancy.py", "configurations of {} kernels",
          "occupancy.driver recording, kernels", lambda: f"{_rows('occupancy.driver').kernel.nunique()}"),
    Typed("notebooks/05_occupancy.py", "for sm_90 reports {} bytes of spill stores",
          "ptxas on the accumulators kernel, max_registers=32", lambda: _spills("spill_store_bytes")),
    Typed("notebooks/05_occupancy.py", "and {} bytes of spill loads",
          "ptxas on the accumulators kernel, max_registers=32", lambda: _spills("spill_load_bytes")),
    # lesson 03's instructor notes
    Typed("instructor/03_coalescing.md", "the ceiling needs about {} KiB at the calibrated",
          "the copy ceiling ÷ 2 × the calibrated latency ÷ SMs",
          lambda: f"{_cal().ceiling_gbps / 2 * _cal().latency_ns / _cal().sm_count / 1024:.0f}"),
    Typed("instructor/03_coalescing.md", "KiB at the calibrated {} ns", "the calibrated latency",
          lambda: f"{_cal().latency_ns:.0f}"),
    # lesson 05's instructor notes
    Typed("instructor/05_occupancy.md", "on the H200, {} ns loaded latency calibrated on lesson 03's",
          "the calibrated latency", lambda: f"{_cal().latency_ns:.0f}"),
    Typed("instructor/05_occupancy.md", "SM ÷ {} GB/s of reads)", "the calibration point's read rate",
          lambda: f"{_cal().read_gbps:,.0f}"),
    Typed("instructor/05_occupancy.md", "and the {} GB/s measured copy ceiling", "the recorded copy ceiling",
          lambda: f"{_cal().ceiling_gbps:,.0f}"),
    Typed("instructor/05_occupancy.md", "so ≈ {} warp loads", "lesson_speed_model('memory').warps_needed",
          lambda: f"{_occupancy_model().warps_needed:.0f}"),
    Typed("instructor/05_occupancy.md", "(capped at the ceiling) → **≈ {}**", "64 ÷ the warps needed",
          lambda: f"{64 / _occupancy_model().warps_needed:.2f}"),
    Typed("instructor/05_occupancy.md", "ILP-4 25 % point ({} GB/s)", "occupancy.memory_bound, copy_ilp4 at 25 %",
          lambda: f"{_first_attempt('copy_ilp4', 25.0):,.0f}"),
    Typed("instructor/05_occupancy.md", "predicted at {} GB/s", "first_attempt_check()['predicted GB/s']",
          lambda: f"{_first_attempt_check()['predicted GB/s']:,.0f}"),
    Typed("instructor/05_occupancy.md", "GB/s ({}×; Little's law", "recorded ÷ predicted",
          lambda: f"{_first_attempt_check()['recorded GB/s'] / _first_attempt_check()['predicted GB/s']:.2f}"),
    Typed("instructor/05_occupancy.md", "Little's law on it gives {} ns", "Little's law on the first attempt's point",
          lambda: f"{_first_attempt_check()['latency on this point (ns)']:.0f}"),
    Typed("instructor/05_occupancy.md", "Recorded on an H200: {} GB/s at 25 %", "occupancy.memory_bound, copy at 25 %",
          lambda: f"{_first_attempt('copy', 25.0):,.0f}"),
    Typed("instructor/05_occupancy.md", "25 % and {} GB/s at 100 % (H100", "occupancy.memory_bound, copy at 100 %",
          lambda: f"{_first_attempt('copy', 100.0):,.0f}"),
    Typed("instructor/05_occupancy.md", "(H100: {} / 846)", "the H100's first-contact tier run, copy at 25 %",
          lambda: f"{_h100_first_attempt(24960):,.0f}"),
    Typed("instructor/05_occupancy.md", "(H100: 838 / {})", "the H100's first-contact tier run, copy at 100 %",
          lambda: f"{_h100_first_attempt(0):,.0f}"),
    Typed("instructor/05_occupancy.md", "the ILP-4 variant {} vs", "occupancy.memory_bound, copy_ilp4 at 25 %",
          lambda: f"{_first_attempt('copy_ilp4', 25.0):,.0f}"),
    Typed("instructor/05_occupancy.md", "variant 2,470 vs {} GB/s", "occupancy.memory_bound, copy_ilp4 at 100 %",
          lambda: f"{_first_attempt('copy_ilp4', 100.0):,.0f}"),
)


@pytest.mark.parametrize("row", TYPED, ids=[f"{Path(r.path).stem}: {r.template[:40]}" for r in TYPED])
def test_a_typed_figure_agrees_with_its_source(row):
    problem = mismatch(prose(row.path), row)
    assert problem is None, problem


def test_a_doctored_figure_is_caught():
    """The check can fail: the same rows against a text with one number changed, or the sentence gone."""
    row = TYPED[0]
    text = prose(row.path)
    right = row.template.format(row.value())
    assert right in text
    assert "typed 0.62" in mismatch(text.replace(right, row.template.format("0.62")), row)
    assert "found 0 times" in mismatch(text.replace(right, ""), row)
    assert "found 2 times" in mismatch(f"{text} {right}", row)


def test_the_old_drifting_figures_are_gone():
    """W4, W7, F13: numbers that once disagreed with their recordings (or had none) are no longer typed."""
    for path, gone in (("notebooks/03_coalescing.py", "2,655 of 4,257"), ("notebooks/05_occupancy.py", "876 ns"),
                       ("notebooks/05_occupancy.py", "≈ 0.58"), ("notebooks/04a_reductions.py", "400 ns"),
                       ("instructor/05_occupancy.md", "≈ 111")):
        assert gone not in prose(path), (path, gone)
