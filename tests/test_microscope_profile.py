"""The microscope's report in Nsight Compute's words, on kernels the course does not ship (1-D, 2-D, shared
memory, divergence, atomics), every count worked out by hand in the comments."""

import numpy as np
import pytest
from numba import cuda, float32, float64

import gpucourse  # noqa: F401  (the mode first)
from gpucourse import microscope
from gpucourse.microscope import ncu_metrics
from gpucourse.microscope.errors import MicroscopeError
from gpucourse.microscope.nsight import LINE_COLUMNS

LD_REQUESTS = "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum"
LD_SECTORS = "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum"
LD_PER_REQUEST = "l1tex__average_t_sectors_per_request_pipe_lsu_mem_global_op_ld.ratio"
ST_REQUESTS = "l1tex__t_requests_pipe_lsu_mem_global_op_st.sum"
ST_SECTORS = "l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum"
LDS = "smsp__sass_inst_executed_op_shared_ld.sum"
LDS_WAVEFRONTS = "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum"
LDS_CONFLICTS = "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum"
STS_WAVEFRONTS = "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum"
STS_CONFLICTS = "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum"
THREADS_PER_INST = "smsp__thread_inst_executed_per_inst_executed.ratio"
UNIFORM = "smsp__sass_average_branch_targets_threads_uniform.pct"
DIVERGENT = "smsp__sass_branch_targets_threads_divergent.sum"
ATOMICS = "smsp__sass_inst_executed_op_global_atom.sum + smsp__sass_inst_executed_op_global_red.sum"
ATOMIC_UPDATES = "(no ncu counter) global atomic updates by lanes"
OCCUPANCY = "sm__maximum_warps_per_active_cycle_pct"
LIMITER = "(smallest launch__occupancy_limit_*)"


@cuda.jit
def gather(out, a, index):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = a[index[i]]


@cuda.jit
def add_2d(a, b, out):
    row, col = cuda.grid(2)
    if row < out.shape[0] and col < out.shape[1]:
        out[row, col] = a[row, col] + b[row, col]


@cuda.jit
def shared_stride(out):
    words = cuda.shared.array(64, float32)
    wide = cuda.shared.array(32, float64)
    t = cuda.threadIdx.x
    words[t] = t
    words[t + 32] = t
    wide[t] = t
    cuda.syncthreads()
    out[t] = words[2 * t] + wide[t]


@cuda.jit
def odd_lanes_loop(out):
    i = cuda.grid(1)
    v = 0.0
    if i % 2:
        for _ in range(3):
            v += 1.0
    out[i] = v


@cuda.jit
def every_fourth(count):
    i = cuda.grid(1)
    if i % 4 == 0:
        cuda.atomic.add(count, 0, 1)


def test_a_1d_gather_counts_requests_and_sectors():
    # 64 threads = 2 warps; a[index[i]] with index = 8·i: each warp's 32 lanes hit 32 different sectors.
    out, a = np.zeros(64, np.float32), np.arange(512, dtype=np.float32)
    p = microscope.profile(gather, 2, 32, out, a, (8 * np.arange(64)).astype(np.int64))
    # Loads per warp: index[i] (32 int64 = 256 B = 8 sectors) and a[8i] (32 sectors); stores 4 sectors.
    assert p.value(LD_REQUESTS) == 4 and p.value(LD_SECTORS) == 2 * (8 + 32)
    assert p.value(LD_PER_REQUEST) == 20.0
    assert p.per_warp(LD_SECTORS) == 40 and p.per_warp(LD_PER_REQUEST) == 20.0  # ratios stay as they are
    assert p.value(ST_REQUESTS) == 2 and p.value(ST_SECTORS) == 8
    assert np.array_equal(out, a[::8][:64])  # it still computes
    # Per source line, in the Source page's columns: the gather line holds every global access.
    lines = p.lines().set_index("source")
    gather_line = lines.loc["out[i] = a[index[i]]"]
    assert gather_line["Global Requests"] == 6 and gather_line["L2 Theoretical Sectors Global"] == 88
    # Ideal: 8 + 4 + 4 sectors per warp; a[8i] wastes 28 of its 32.
    assert gather_line["L2 Theoretical Sectors Global Excessive"] == 2 * 28
    assert list(p.lines().columns[-len(LINE_COLUMNS):]) == list(LINE_COLUMNS)


def test_a_2d_kernel_counts_two_rows_per_warp():
    # cuda.grid(2) is (x, y) and x is the fastest index: here x is the row, so a warp of a 16×16 block
    # walks down a column: 16 rows × 2 neighbouring columns (one sector per row).
    n = 32
    a, b, out = (np.arange(n * n, dtype=np.float32).reshape(n, n), np.ones((n, n), np.float32),
                 np.zeros((n, n), np.float32))
    p = microscope.profile(add_2d, (2, 2), (16, 16), a, b, out)
    assert p.warps == 32 and p.blocks == 4
    # Each request: 16 rows (16 sectors) × 2 neighbouring columns in one sector per row = 16 sectors.
    assert p.value(LD_REQUESTS) == 64 and p.value(LD_PER_REQUEST) == 16.0
    assert p.value(ST_REQUESTS) == 32 and p.value(ST_SECTORS) == 32 * 16
    assert np.array_equal(out, a + b)


def test_shared_memory_wavefronts_conflicts_and_wide_elements():
    out = np.zeros(32, np.float32)
    p = microscope.profile(shared_stride, 1, 32, out)
    # Stores: words[t], words[t + 32] (1 wavefront each), wide[t] (float64: two 128-byte phases, each
    # conflict-free: 2 wavefronts, ideal 2). Loads: words[2t] hits banks 0, 2, …, 30 twice: 2-way (2
    # wavefronts, 1 conflict); wide[t] 2 wavefronts, 0 conflicts.
    assert p.value(STS_WAVEFRONTS) == 1 + 1 + 2 and p.value(STS_CONFLICTS) == 0
    assert p.value(LDS) == 2 and p.value(LDS_WAVEFRONTS) == 2 + 2 and p.value(LDS_CONFLICTS) == 1
    assert p.value("launch__shared_mem_per_block_static") == 64 * 4 + 32 * 8
    line = p.lines().set_index("source").loc["out[t] = words[2 * t] + wide[t]"]
    assert line["L1 Wavefronts Shared"] == 4 and line["L1 Wavefronts Shared Excessive"] == 1


def test_divergence_in_threads_per_instruction_and_branch_uniformity():
    out = np.zeros(64, np.float32)
    p = microscope.profile(odd_lanes_loop, 2, 32, out)
    assert list(out[:4]) == [0, 3, 0, 3]
    # Per warp: 4 full lines (i =, v =, if, out[i] =) and the loop's 4 tests and 3 bodies with 16 lanes:
    # (4·32 + 7·16) / 11 lanes per issue.
    assert p.value(THREADS_PER_INST) == pytest.approx((4 * 32 + 7 * 16) / 11)
    # Branch lines: the if (splits every warp) and the loop test (its 16 lanes go one way each time).
    assert p.value(DIVERGENT) == 2
    assert p.value(UNIFORM) == pytest.approx(100 * 4 / 5)


def test_a_uniform_kernel_is_full_and_has_no_branch_to_split():
    out, a = np.zeros(64, np.float32), np.arange(64, dtype=np.float32)
    p = microscope.profile(gather, 2, 32, out, a, np.arange(64))
    assert p.value(THREADS_PER_INST) == 32.0 and p.value(DIVERGENT) == 0
    assert p.value(UNIFORM) is None and "no branch" in p.table().set_index("metric").loc[UNIFORM, "note"]


def test_atomics_one_instruction_per_warp_one_update_per_lane():
    count = np.zeros(1, np.int64)
    p = microscope.profile(every_fourth, 2, 64, count)
    assert count[0] == 32
    assert p.value(ATOMICS) == 4  # 4 warps, one instruction each
    assert p.value(ATOMIC_UPDATES) == 32  # 8 lanes in each


def test_occupancy_from_the_calculator_with_and_without_registers():
    out = np.zeros(256, np.float32)
    args = (out, np.arange(256, dtype=np.float32), np.arange(256))
    unknown = microscope.profile(gather, 1, 256, *args)
    assert unknown.value("launch__registers_per_thread") is None
    assert unknown.value("launch__occupancy_limit_registers") is None
    assert unknown.value(OCCUPANCY) == 100.0 and unknown.value(LIMITER) == "warps"
    assert "registers per thread not given" in unknown.table().set_index("metric").loc[OCCUPANCY, "note"]
    # 64 registers × 32 lanes = 2,048 per warp; 16,384 per sub-partition → 8 warps each, 32 per SM: 4 blocks.
    known = unknown.report.profile(registers_per_thread=64)
    assert known.value("launch__occupancy_limit_registers") == 4
    assert known.value(OCCUPANCY) == 50.0 and known.value(LIMITER) == "registers"
    # The driver's 32 KB carve-out: 1 KB reserved per block → 32 blocks, the SM's own block limit too.
    small = microscope.profile(gather, 1, 256, *args, registers_per_thread=16, shared_config_bytes=32 * 1024)
    assert small.value("launch__occupancy_limit_shared_mem") == 32


def test_bad_options_say_what_is_allowed():
    out = np.zeros(32, np.float32)
    with pytest.raises(MicroscopeError, match="registers_per_thread"):
        microscope.profile(odd_lanes_loop, 1, 32, out, registers_per_thread=300)
    with pytest.raises(MicroscopeError, match="carve-out"):
        microscope.profile(odd_lanes_loop, 1, 32, out, shared_config_bytes=1000)
    p = microscope.profile(odd_lanes_loop, 1, 32, out)
    with pytest.raises(MicroscopeError, match="l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum"):
        p.value("sectors")


def test_it_renders_as_text_and_as_a_notebook_table():
    out = np.zeros(32, np.float32)
    p = microscope.profile(shared_stride, 1, 32, out)
    text = repr(p)
    assert text.startswith("shared_stride: grid (1, 1, 1), block (32, 1, 1)")
    for metric in ncu_metrics.METRICS:
        assert metric.name in text
    assert "Memory Workload Analysis: shared memory" in text
    html = p._repr_html_()
    assert html.count("<tr") == len(ncu_metrics.METRICS) + 1 + len({m.section for m in ncu_metrics.METRICS})
    assert "<code>l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum</code>" in html
    assert html.count(' title="') == len(ncu_metrics.METRICS)  # each row's note, escaped, on hover
    table = p.table()
    assert list(table.columns) == ["section", "metric", "label", "microscope", "unit", "exactness", "note"]
    assert len(table) == len(ncu_metrics.METRICS)


def test_every_metric_says_how_exact_it_is_and_cites_its_source():
    names = [m.name for m in ncu_metrics.METRICS]
    assert len(names) == len(set(names))
    for m in ncu_metrics.METRICS:
        assert m.exactness in ncu_metrics.EXACTNESS, m.name
        assert len(m.note) > 30, m.name
        assert m.docs and all("https://" in source for source in m.sources()), m.name
    wanted = ncu_metrics.ncu_metric_names()
    assert len(wanted) == len(set(wanted))
    assert "smsp__sass_inst_executed_op_global_red.sum" in wanted and not any(n.startswith("(") for n in wanted)
    notes = microscope.profile(odd_lanes_loop, 1, 32, np.zeros(32, np.float32)).notes()
    assert notes.count("source: ") == sum(len(m.docs) for m in ncu_metrics.METRICS)


def test_the_microscopes_profile_is_the_function_whatever_was_imported_before():
    # the module of that name once replaced the function on the package (a learner's import got the module)
    import importlib
    import inspect

    for part in ("launch", "nsight", "report", "pictures"):
        importlib.import_module(f"gpucourse.microscope.{part}")
    from gpucourse.microscope import Profile, profile

    assert inspect.isfunction(profile) and profile is microscope.profile and inspect.isclass(Profile)
    assert profile.__module__ == "gpucourse.microscope.launch"
