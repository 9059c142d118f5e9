"""The lessons' profiler tables: the microscope's count under ncu's names, beside the course's own ncu
recordings read from data/reference/<gpu>/ncu/ (labelled as recorded on that GPU, never this machine).

Each lesson's cell is run as the lesson has it (its source read from notebooks/*.py), so a lesson that
traced another kernel, or showed other rows, fails here."""

import ast
from pathlib import Path

import pytest

import gpucourse  # noqa: F401  (decides the mode first)
from gpucourse.measure import ncu
from gpucourse.microscope.errors import MicroscopeError

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
H100 = "Nsight Compute on NVIDIA H100 80GB HBM3, recorded 2026-11-26"
H200 = "Nsight Compute on NVIDIA H200, recorded 2026-11-26"
MINE = "microscope (this launch)"
LD_PER_REQUEST = "l1tex__average_t_sectors_per_request_pipe_lsu_mem_global_op_ld.ratio"
LDS_WAYS = "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum / smsp__sass_inst_executed_op_shared_ld.sum"
THREADS = "smsp__thread_inst_executed_per_inst_executed.ratio"
DIVERGENT = "smsp__sass_branch_targets_threads_divergent.sum"


def lesson_cell(stem: str, *markers: str):
    """Run the lesson's code cells that contain ``markers`` (in that order, after the lesson's import) and
    return the last one's last value."""
    source = (NOTEBOOKS / f"{stem}.py").read_text()
    lesson = {"03_coalescing": "coalescing", "04_shared_memory": "tiling", "04a_reductions": "reductions",
              "02_divergence": "divergence", "00a_first_kernels": "first_kernels"}[stem]
    namespace: dict = {}
    exec(f"from gpucourse.lessons import {lesson}", namespace)
    for marker in markers:
        cells = [c for c in source.split("# %%") if not c.startswith(" [markdown]") and marker in c]
        assert len(cells) == 1, f"{stem}: expected one code cell with {marker!r}, found {len(cells)}"
        *body, last = ast.parse(cells[0]).body
        exec(compile(ast.Module(body=body, type_ignores=[]), stem, "exec"), namespace)
    return eval(compile(ast.Expression(last.value), stem, "eval"), namespace)


def test_recorded_reads_the_committed_recording_with_its_device_date_and_file():
    rec = ncu.recorded("copy_columns")
    assert rec.device == "NVIDIA H100 80GB HBM3" and rec.date == "2026-11-26"
    assert rec.file == "data/reference/nvidia-h100-80gb-hbm3/ncu/catalogue-metrics.csv"
    assert rec.value(LD_PER_REQUEST) == 32 and rec.warps == 1024 * 1024 // 32
    assert rec.per_warp("l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum") == 32
    assert "not this machine" in rec.caption() and rec.file in rec.caption()
    assert [r.gpu for r in ncu.recordings("copy_columns")] == ["nvidia-h100-80gb-hbm3", "nvidia-h200"]
    assert ncu.recorded("copy_columns", gpu="nvidia-h200").device == "NVIDIA H200"
    assert ncu.recorded("not a catalogue kernel") is None and ncu.recordings("not a catalogue kernel") == []


def test_without_a_recording_the_table_says_so(tmp_path):
    from gpucourse.lessons import coalescing

    table = ncu.beside_recorded(coalescing.trace_layout("column traversal").profile(), "copy_columns",
                                root=tmp_path)
    assert list(table.table().columns) == ["metric", "label", "unit", "scale", MINE, "exactness"]
    assert "No Nsight Compute recording of copy_columns" in table.source()


def test_rows_must_be_a_topic_or_metric_names():
    from gpucourse.lessons import coalescing

    p = coalescing.trace_layout("row traversal").profile()
    with pytest.raises(MicroscopeError, match="rows must be one of"):
        p.table("globals")
    with pytest.raises(MicroscopeError, match="no metric"):
        p.table(["l1tex__nonsense.sum"])
    assert list(p.table([THREADS]).metric) == [THREADS]


def test_lesson_03_shows_32_sectors_per_request_for_the_column_copy_beside_two_gpus():
    shown = lesson_cell("03_coalescing", "beside_recorded")
    assert shown.value(LD_PER_REQUEST) == 32
    assert shown.value(LD_PER_REQUEST, H100) == 32 and shown.value(LD_PER_REQUEST, H200) == 32
    html = shown._repr_html_()
    assert H100 in html and "not this machine" in html and "counted in the simulator on this machine" in html


def test_lesson_04_shows_the_unpadded_tiles_32_way_conflict():
    shown = lesson_cell("04_shared_memory", "beside_recorded")
    assert shown.value(LDS_WAYS) == 32 == shown.value(LDS_WAYS, H100) == shown.value(LDS_WAYS, H200)


def test_lesson_04a_shows_the_strided_index_rungs_conflicts_as_ncu_measured_them():
    shown = lesson_cell("04a_reductions", "reduce_strided_index B=256")
    assert shown.value(LDS_WAYS) == pytest.approx(3.8) == shown.value(LDS_WAYS, H100)
    assert shown.value(LDS_WAYS) > 1  # the lesson's point: a conflicted rung


def test_lesson_04a_shows_one_atomic_instruction_per_warp_where_the_source_asks_for_16():
    shown = lesson_cell("04a_reductions", "from gpucourse.lessons.reductions import kernels",
                        "from gpucourse.measure import ncu", '"count_above_per_lane", rows=')
    atomics = "smsp__sass_inst_executed_op_global_atom.sum + smsp__sass_inst_executed_op_global_red.sum"
    assert shown.value(atomics) == 1 == shown.value(atomics, H100) == shown.value(atomics, H200)
    # the source's lane updates (half the lanes pass): no ncu counter, n/a in the recordings
    assert shown.value("(no ncu counter) global atomic updates by lanes") == 16
    assert shown.value("(no ncu counter) global atomic updates by lanes", H100) is None


def test_lesson_02_shows_one_divergent_branch_per_warp_and_idle_lanes():
    shown = lesson_cell("02_divergence", "beside_recorded")
    assert shown.value(DIVERGENT) == 1 == shown.value(DIVERGENT, H200)
    assert shown.value(DIVERGENT, H100) is None  # not in that recording's metrics: shown as n/a
    assert shown.value(THREADS) < 32 and shown.value(THREADS, H100) < 32


def test_lesson_00a_reads_three_metrics_of_the_learners_saxpy():
    table = lesson_cell("00a_first_kernels", "saxpy_profile = ", '.table("first look")')
    assert dict(zip(table.metric, table.microscope, strict=True)) == {
        LD_PER_REQUEST: 4, THREADS: 32, "sm__maximum_warps_per_active_cycle_pct": 100}
