"""Launch validation, misuse errors, size limits, cost, pictures, and tracing in both modes."""

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import plotly.graph_objects as go
import pytest
from numba import cuda, float32

from gpucourse import microscope
from gpucourse.measure import runtime

ROOT = Path(__file__).resolve().parents[1]


@cuda.jit
def copy(out, a):
    i = cuda.grid(1)
    if i < a.size:
        out[i] = a[i]


@cuda.jit(device=True)
def twice(x):
    return 2 * x


@cuda.jit
def uses_device_function(out, a):
    i = cuda.grid(1)
    out[i] = twice(a[i])


@cuda.jit
def huge_static_shared(out):
    s = cuda.shared.array(16384, float32)  # 64 KiB
    s[cuda.threadIdx.x] = 1.0
    out[0] = s[0]


@cuda.jit
def dynamic_shared_reverse(out):
    s = cuda.shared.array(0, float32)
    t = cuda.threadIdx.x
    s[t] = t
    cuda.syncthreads()
    out[t] = s[cuda.blockDim.x - 1 - t]


@cuda.jit
def returns_before_barrier(out, n):
    i = cuda.threadIdx.x
    if i >= n:
        return
    cuda.syncthreads()
    out[i] = 1.0


@cuda.jit
def barrier_in_both_branches(out):
    i = cuda.threadIdx.x
    if i < 16:
        cuda.syncthreads()
    else:
        cuda.syncthreads()
    out[i] = 1.0


@cuda.jit
def out_of_bounds(out):
    out[cuda.threadIdx.x + 100] = 1.0


@cuda.jit
def spins(out):
    s = 0
    for k in range(100000):
        s += k
    out[0] = s


def _one_line(exc) -> str:
    text = str(exc)
    assert "\n" not in text and text
    return text


@pytest.mark.parametrize(
    ("grid", "block", "message"),
    [
        (1, 1025, "at most 1024 threads per block"),
        (1, (32, 33), "at most 1024 threads per block"),
        (1, (1, 1, 65), "blockdim.z = 65"),
        ((1, 70000), 32, "griddim.y = 70000"),
        (0, 32, "griddim.x = 0"),
        (1, 2.5, "positive integer"),
    ],
)
def test_launches_the_hardware_rejects_fail_before_running(grid, block, message):
    out = np.zeros(64, np.float32)
    with pytest.raises(microscope.LaunchConfigError, match=message) as info:
        microscope.trace(copy, grid, block, out, np.ones(64, np.float32))
    assert isinstance(info.value, ValueError) and (out == 0).all()
    _one_line(info.value)


def test_shared_memory_limits_follow_the_architecture():
    with pytest.raises(microscope.LaunchConfigError, match="at most 49152 bytes"):
        microscope.trace(huge_static_shared, 1, 32, np.zeros(1, np.float32))
    out = np.zeros(32, np.float32)
    with pytest.raises(microscope.LaunchConfigError, match="dynamic_shared_bytes"):
        microscope.trace(dynamic_shared_reverse, 1, 32, out)
    with pytest.raises(microscope.LaunchConfigError, match="opt-in"):
        microscope.trace(dynamic_shared_reverse, 1, 32, out, dynamic_shared_bytes=64 * 1024)
    microscope.trace(dynamic_shared_reverse, 1, 32, out, dynamic_shared_bytes=64 * 1024, shared_opt_in=True)
    assert list(out[:3]) == [31, 30, 29]
    with pytest.raises(microscope.LaunchConfigError, match="232448 bytes"):  # 227 KiB on cc 9.0
        microscope.trace(dynamic_shared_reverse, 1, 32, out, dynamic_shared_bytes=228 * 1024, shared_opt_in=True)
    with pytest.raises(microscope.LaunchConfigError, match="cc 7.5"):  # 64 KiB there
        microscope.trace(dynamic_shared_reverse, 1, 32, out, dynamic_shared_bytes=65 * 1024, shared_opt_in=True,
                         cc=(7, 5))  # fmt: skip
    microscope.check_shared_memory(48 * 1024, 0)
    assert microscope.validate_launch(4, (16, 16)) == ((4, 1, 1), (16, 16, 1))


def test_syncthreads_reached_by_part_of_a_block_is_an_error():
    out = np.zeros(64)
    with pytest.raises(microscope.BarrierError, match="40 of the block's 64 threads wait in syncthreads") as info:
        microscope.trace(returns_before_barrier, 1, 64, out, 40)
    _one_line(info.value)
    microscope.trace(returns_before_barrier, 1, 64, out, 64)  # every thread reaches it: fine
    with pytest.raises(microscope.BarrierError, match="different places"):
        microscope.trace(barrier_in_both_branches, 1, 32, out)


def test_misuse_gives_one_line_errors():
    out, a = np.zeros(64, np.float32), np.ones(64, np.float32)
    cases = [
        (lambda: microscope.trace(copy.py_func, 1, 32, out, a), "not a CUDA kernel"),
        (lambda: microscope.trace(twice, 1, 32, out), "device function"),
        (lambda: microscope.trace(copy, 1, 32, out), r"takes 2 argument\(s\) \(out, a\)"),
        (lambda: microscope.trace(copy, 1, 32, out, a, a), "was given 3"),
        (lambda: microscope.trace(copy, 1, 32, out, [1.0] * 64), "argument a is a list"),
        (lambda: microscope.trace(copy, 1, 32, out, {"a": 1}), "a kernel takes NumPy arrays"),
        (lambda: microscope.trace(copy, 1, 32, out, np.array([None] * 64)), "dtype object"),
        (lambda: microscope.trace(copy, 1, 32, out, a, schedule="fifo"), "schedule must be"),
        (lambda: microscope.trace(copy, 1, 32, out, a, cc=(6, 1)), "cc must be one of"),
    ]
    for call, message in cases:
        with pytest.raises(microscope.MicroscopeError, match=message) as info:
            call()
        assert isinstance(info.value, ValueError)
        _one_line(info.value)


def test_simulator_device_arrays_are_accepted_and_written_back():
    d_out = cuda.to_device(np.zeros(64, np.float32)) if runtime.MODE == "sim" else np.zeros(64, np.float32)
    a = np.arange(64, dtype=np.float32)
    microscope.trace(copy, 2, 32, d_out, a)
    host = d_out.copy_to_host() if hasattr(d_out, "copy_to_host") else d_out
    assert np.array_equal(host, a)


def test_kernel_errors_name_the_thread_and_the_line():
    with pytest.raises(IndexError, match=r"thread \(0, 0, 0\) of block \(0, 0, 0\), line \d+ \(out\[cuda.threadIdx"):
        microscope.trace(out_of_bounds, 1, 32, np.zeros(32))


def test_size_limit_stops_before_running(monkeypatch):
    from gpucourse.microscope import launch as launch_module

    def no_grid(*args, **kwargs):
        raise AssertionError("a grid of threads was built for a launch that is too large")

    monkeypatch.setattr(launch_module, "make_grid", no_grid)  # counted: no thread is ever created
    out = np.zeros(100 * 1024, np.float32)
    with pytest.raises(microscope.TraceTooLarge, match="at most 4,096") as info:
        microscope.trace(copy, 100, 1024, out, np.ones_like(out))
    assert (out == 0).all()
    monkeypatch.undo()
    _one_line(info.value)
    with pytest.raises(microscope.TraceTooLarge, match="more than 1,000 source lines"):
        microscope.trace(spins, 1, 1, np.zeros(1, np.int64), max_lines=1000)


def _best_cpu_s(run, repeats=3) -> float:
    """The least CPU time of a few runs: a busy machine only ever adds time to a run."""
    times = []
    for _ in range(repeats):
        start = time.process_time()
        run()
        times.append(time.process_time() - start)
    return min(times)


def test_tracing_4_blocks_of_256_costs_less_than_twice_the_plain_simulator():
    a = np.arange(1024, dtype=np.float32)
    out = np.zeros_like(a)
    report = microscope.trace(copy, 4, 256, out, a)
    assert np.array_equal(out, a) and report.sectors_per_request() == 4
    if runtime.MODE == "sim":  # a ratio against a second run in this process, never an absolute time
        copy[1, 32](out, a)  # warm up (first-call costs are not what we compare)
        traced = _best_cpu_s(lambda: microscope.trace(copy, 4, 256, out, a))
        plain = _best_cpu_s(lambda: copy[4, 256](out, a))
        assert traced < 2 * plain, f"traced {traced:.2f} s vs plain simulator {plain:.2f} s"


def test_device_function_lines_are_traced_with_their_call_site():
    a = np.arange(64, dtype=np.float32)
    out = np.zeros_like(a)
    report = microscope.trace(uses_device_function, 2, 32, out, a)
    assert np.array_equal(out, 2 * a)
    rows = report.branches()
    inner = rows[rows.function == "twice"]
    assert list(inner.source) == ["return 2 * x"] and inner.via.iloc[0] != ""
    assert report.simt_efficiency() == 1.0


def test_pictures_are_titled_labelled_and_colour_blind_safe():
    a = np.arange(64 * 33, dtype=np.float32)
    out = np.zeros(64, np.float32)
    report = microscope.trace(strided_copy_for_pictures, 2, 32, out, a)
    sectors = report.picture_sectors(array="a", block=1, warp=0)
    assert isinstance(sectors, go.Figure)
    assert "32 sectors" in sectors.layout.title.text
    tile = microscope.trace(column_read_for_pictures, 1, 32, np.zeros(32, np.float32))
    banks = tile.picture_banks(op="load")
    assert "32-way" in banks.layout.title.text
    for fig in (sectors, banks, report.picture_lanes()):
        assert fig.layout.title.text
        assert fig.layout.xaxis.title.text and fig.layout.yaxis.title.text
        for trace in fig.data:
            colours = trace.marker.color if trace.marker.color is not None else trace.textfont.color
            colours = [colours] if isinstance(colours, str) else list(colours)
            assert set(colours) <= set(microscope.OKABE_ITO)
            assert len(trace.hovertext) == len(trace.x) and trace.name  # words, not colour alone
    with pytest.raises(microscope.MicroscopeError, match="no traced line matches"):
        report.sectors_per_request(line="no such code")


@cuda.jit
def strided_copy_for_pictures(out, a):
    i = cuda.grid(1)
    out[i] = a[i * 33]


@cuda.jit
def column_read_for_pictures(out):
    tile = cuda.shared.array((32, 32), float32)
    t = cuda.threadIdx.x
    tile[0, t] = t
    cuda.syncthreads()
    out[t] = tile[t, 0]


def test_gpu_mode_traces_real_cuda_kernels_in_the_in_process_simulator():
    # The real numba.cuda target (as on a GPU machine; decorating needs no GPU) with a device function.
    script = textwrap.dedent(
        """
        import os
        os.environ.pop("NUMBA_ENABLE_CUDASIM", None)
        import numpy as np
        from numba import cuda
        os.environ["NUMBA_ENABLE_CUDASIM"] = "1"; os.environ["GPUCOURSE_MODE"] = "sim"  # let gpucourse import
        from gpucourse import microscope

        @cuda.jit(device=True)
        def twice(x):
            return 2 * x

        @cuda.jit
        def kernel(out, a):
            i = cuda.grid(1)
            v = a[i] + cuda.shfl_down_sync(0xFFFFFFFF, a[i], 1)
            out[i] = twice(v)

        assert type(kernel).__name__ == "CUDADispatcher"
        a = np.arange(64, dtype=np.float32)
        out = np.zeros_like(a)
        report = microscope.trace(kernel, 2, 32, out, a)
        expected = 2 * (a + np.where(np.arange(64) % 32 == 31, a, np.roll(a, -1)))
        assert np.array_equal(out, expected), out
        assert report.sectors_per_request(array="a") == 4
        assert type(kernel.py_func.__globals__["twice"]).__name__ == "CUDADispatcher"  # restored
        print("ok")
        """
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]


def test_the_how_to_in_the_package_docstring_runs():
    text = microscope.__doc__
    code = textwrap.dedent(text.split("How to trace your own kernel::")[1].split("Keep launches small")[0])
    namespace = {}
    exec(compile(code, "<microscope how-to>", "exec"), namespace)  # noqa: S102 - our own docstring
    assert namespace["report"].sectors_per_request(array="a") == 8
    assert namespace["p"].value("l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum") == 32
    assert namespace["bins"].sum() < 512 and namespace["racy"].race_count() > 0


class _GPUArrayStandIn:
    """Quacks like a numba device array of the real target (GPU mode): copied to host and back."""

    def __init__(self, host):
        self._host = host
        self.__cuda_array_interface__ = {"shape": host.shape, "typestr": host.dtype.str, "version": 3}

    def copy_to_host(self):
        return self._host.copy()

    def copy_to_device(self, array):
        self._host[...] = array


def test_gpu_device_arrays_are_traced_through_a_host_copy_and_written_back():
    a = np.arange(64, dtype=np.float32)
    device_out = _GPUArrayStandIn(np.zeros(64, np.float32))
    report = microscope.trace(copy, 2, 32, device_out, _GPUArrayStandIn(a))
    assert np.array_equal(device_out._host, a)
    assert report.sectors_per_request(array="out") == 4
