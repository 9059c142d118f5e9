"""Lesson 08's experiments: host runners, GPU sweeps (registered for recording), profile counters.

Runs in both modes: ``unfused_chain`` / ``fused_chain_run`` (the chain's kernels; in the simulator
they check results, nothing is timed), ``profile_counts`` (torch.profiler operator counts, on the
CPU or the GPU). GPU only, each registered with ``make record``:

* ``copy_sweep``: host→device GB/s against size, pageable vs pinned (the harness: events, median);
* ``overlap_events``: chunks of copy → kernel → copy on one or several streams, every operation
  bracketed by events; the timeline is drawn from the events' times;
* ``launch_sweep``: a chain of small torch operations launched eagerly vs replayed as a CUDA graph
  (events around host-issued calls: the host's dispatch time is included on purpose);
* ``sync_sweep``: a small training-like step with and without ``.item()`` each step;
* ``fusion_sweep``: the unfused chain vs the fused kernel, counted bytes vs time;
* ``l2_sweep``: a copy's GB/s against its working set, around this device's L2 size.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
import time
from collections import Counter

import numpy as np
import pandas as pd

from gpucourse import validate
from gpucourse.errors import NoGPU
from gpucourse.lessons.feeding import kernels, model, syncs
from gpucourse.measure import reference, runtime
from gpucourse.measure.harness import measure

BLOCK = 256


def _grid(n: int) -> int:
    return (n + BLOCK - 1) // BLOCK


def chain_reference(x: np.ndarray, bias: np.ndarray) -> np.ndarray:
    """The chain in NumPy (float64): what both versions must compute."""
    t = np.maximum(2.0 * x.astype(np.float64) + bias.astype(np.float64), 0.0)
    return t * t + 1.0


def chain_inputs(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    n = validate.integer("n", n, minimum=1, maximum=1 << 28)
    rng = np.random.default_rng(seed)
    return rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)


def unfused_chain(x, bias, out=None, temps=None):
    """Five launches, one per operation; every intermediate goes to memory and back."""
    n = x.size
    if temps is None:
        temps = [cuda_like(x) for _ in range(2)]
    out = cuda_like(x) if out is None else out
    t1, t2 = temps
    g = _grid(n)
    kernels.scale[g, BLOCK](x, t1, kernels.TWO)
    kernels.add[g, BLOCK](t1, bias, t2)
    kernels.relu[g, BLOCK](t2, t1)
    kernels.square[g, BLOCK](t1, t2)
    kernels.add_scalar[g, BLOCK](t2, out, kernels.ONE)
    return out


def fused_chain_run(x, bias, out=None):
    """One launch: the fused kernel."""
    out = cuda_like(x) if out is None else out
    kernels.fused_chain[_grid(x.size), BLOCK](x, bias, out)
    return out


def cuda_like(x):
    """An uninitialised array like ``x`` where ``x`` lives (device array on a GPU, NumPy in the simulator)."""
    if hasattr(x, "__cuda_array_interface__") and runtime.is_gpu():
        return runtime.cuda.device_array(x.shape, dtype=x.dtype)
    return np.full(x.shape, np.nan, dtype=x.dtype)


def chain_check(n: int = 1024, seed: int = 0) -> pd.DataFrame:
    """Both versions on the same input (simulator or GPU): launches, counted bytes, correctness."""
    x, bias = chain_inputs(n, seed)
    ref = chain_reference(x, bias)
    rows = []
    for fused, run in ((False, unfused_chain), (True, fused_chain_run)):
        if runtime.is_gpu():
            dx, db = runtime.cuda.to_device(x), runtime.cuda.to_device(bias)
            got = run(dx, db).copy_to_host()
        else:
            got = run(x, bias)
        rows.append({"version": "fused" if fused else "unfused", "n": n, "launches": model.chain_launches(fused),
                     "counted_bytes": model.chain_bytes(n, 4, fused),
                     "correct": bool(np.allclose(got, ref, rtol=1e-5, atol=1e-5))})
    return pd.DataFrame(rows)


# --- GPU sweeps ---------------------------------------------------------------------------------


def _need_gpu(what: str) -> None:
    if not runtime.is_gpu():
        raise NoGPU(f"{what} times a GPU; without one the lesson draws a recording or the model")


COPY_SIZES = tuple(1 << p for p in range(12, 29, 2))  # 4 KiB … 256 MiB


def copy_sweep(sizes=COPY_SIZES) -> pd.DataFrame:
    """Host→device GB/s by size, from pageable (NumPy) and pinned (page-locked) host memory."""
    _need_gpu("copy_sweep")
    cuda = runtime.cuda
    rows = []
    for nbytes in sizes:
        nbytes = validate.integer("size", nbytes, minimum=4, maximum=1 << 31)
        n = nbytes // 4
        dev = cuda.device_array(n, dtype=np.float32)
        pageable = np.random.default_rng(0).standard_normal(n).astype(np.float32)
        pinned = cuda.pinned_array(n, dtype=np.float32)
        pinned[:] = pageable
        for kind, host in (("pageable", pageable), ("pinned", pinned)):
            m = _measure_h2d(dev, host, f"H2D {kind} {n * 4} B")
            rows.append({"bytes": n * 4, "memory": kind, "median_ms": m.median_ms, "gbps": m.gbps,
                         "n_samples": m.n_samples})
    return pd.DataFrame(rows)


def _measure_h2d(dev, host, label: str):
    return measure(lambda: dev.copy_to_device(host), check=lambda: bool(np.array_equal(dev.copy_to_host(), host)),
                   bytes_moved=host.nbytes, label=label)


@reference.register_sweep("feeding.copy", lesson="08_feeding", columns=("bytes", "memory", "median_ms", "gbps"),
                          description="host-to-device copy GB/s by size, pageable vs pinned host memory")
def _copy_recording() -> pd.DataFrame:
    return copy_sweep()


def overlap_events(total_bytes: int = 64 << 20, chunks: int = 4, streams: int = 2) -> pd.DataFrame:
    """Copy in → kernel → copy out in chunks on ``streams`` streams from pinned memory; each operation
    between two events. Rows as ``model.timeline`` (µs from the first event)."""
    _need_gpu("overlap_events")
    cuda = runtime.cuda
    chunks = validate.integer("chunks", chunks, minimum=1, maximum=32)
    streams = validate.integer("streams", streams, minimum=1, maximum=8)
    n = validate.integer("total_bytes", total_bytes, minimum=4 * chunks, maximum=1 << 31) // 4 // chunks
    host_in = cuda.pinned_array((chunks, n), dtype=np.float32)
    host_in[:] = 1.0
    host_out = cuda.pinned_array((chunks, n), dtype=np.float32)
    dev = [cuda.device_array(n, dtype=np.float32) for _ in range(chunks)]
    ss = [cuda.stream() for _ in range(streams)]
    for _ in range(2):  # the first round compiles and warms; the second is recorded
        origin = cuda.event(timing=True)
        origin.record(ss[0])
        cuda.synchronize()
        marks = []
        for c in range(chunks):
            s = ss[c % streams]
            for engine, name in ((model.H2D, f"H2D chunk {c}"), (model.SMS, f"kernel chunk {c}"),
                                 (model.D2H, f"D2H chunk {c}")):
                start, stop = cuda.event(timing=True), cuda.event(timing=True)
                start.record(s)
                if engine == model.H2D:
                    dev[c].copy_to_device(host_in[c], stream=s)
                elif engine == model.SMS:
                    for _ in range(20):
                        kernels.add_one[_grid(n), BLOCK, s](dev[c])
                else:
                    dev[c].copy_to_host(host_out[c], stream=s)
                stop.record(s)
                marks.append((engine, name, c % streams, start, stop))
        cuda.synchronize()
    if not np.allclose(host_out, 21.0):
        raise RuntimeError("the overlap experiment computed a wrong result")
    rows = [{"engine": e, "name": name, "kind": "copy" if e != model.SMS else "kernel", "stream": s,
             "start_us": 1e3 * cuda.event_elapsed_time(origin, a), "end_us": 1e3 * cuda.event_elapsed_time(origin, b)}
            for e, name, s, a, b in marks]
    return pd.DataFrame(rows)


@reference.register_sweep("feeding.overlap", lesson="08_feeding",
                          columns=("streams", "engine", "name", "kind", "stream", "start_us", "end_us"),
                          description="event timeline of 4 chunks of copy-kernel-copy on 1 and on 2 streams")
def _overlap_recording() -> pd.DataFrame:
    return pd.concat([overlap_events(streams=s).assign(streams=s) for s in (1, 2)], ignore_index=True)


def _torch_events_ms(fn, repeat: int, samples: int = 10) -> float:
    """Median ms per call of ``repeat`` host-issued calls between two torch events (dispatch included)."""
    import torch

    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(samples):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(repeat):
            fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) / repeat)
    return float(np.median(times))


def launch_sweep(chain_lengths=(1, 4, 16, 64), n: int = 1024) -> pd.DataFrame:
    """µs per kernel for a chain of tiny in-place adds: launched eagerly vs replayed as a CUDA graph."""
    _need_gpu("launch_sweep")
    import torch

    rows = []
    for count in chain_lengths:
        count = validate.integer("chain length", count, minimum=1, maximum=1000)
        x = torch.zeros(n, device="cuda")

        def chain(x=x, count=count):
            for _ in range(count):
                x.add_(1.0)

        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):  # warm up on a side stream, as torch's documentation asks
            chain()
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            chain()
        x.zero_()
        graph.replay()
        torch.cuda.synchronize()
        if not bool((x == count).all()):
            raise RuntimeError("the graph replay computed a wrong result")
        for way, fn in (("eager launches", chain), ("CUDA graph replay", graph.replay)):
            rows.append({"kernels": count, "way": way, "us_per_kernel": 1e3 * _torch_events_ms(fn, 20) / count})
    return pd.DataFrame(rows)


@reference.register_sweep("feeding.launch", lesson="08_feeding", columns=("kernels", "way", "us_per_kernel"),
                          description="µs per tiny kernel, eager torch launches vs CUDA graph replay")
def _launch_recording() -> pd.DataFrame:
    return launch_sweep()


def sync_sweep(steps: int = 50, width: int = 512) -> pd.DataFrame:
    """ms per step of a small step (matmul + 6 elementwise ops) with and without ``loss.item()`` each step."""
    _need_gpu("sync_sweep")
    import torch

    w = torch.randn(width, width, device="cuda") / width**0.5
    x = torch.randn(256, width, device="cuda")
    rows = []
    for way in ("no sync in the loop", ".item() every step"):
        def run(way=way):
            total = torch.zeros((), device="cuda")
            for _ in range(steps):
                y = torch.tanh(x @ w) * 0.5 + 0.1
                loss = (y * y).mean()
                if way == ".item() every step":
                    total += loss.item()
                else:
                    total += loss
            return total

        run()
        torch.cuda.synchronize()
        samples = []
        for _ in range(10):
            t0 = time.perf_counter()
            run()
            torch.cuda.synchronize()
            samples.append((time.perf_counter() - t0) * 1e3 / steps)
        rows.append({"way": way, "ms_per_step": float(np.median(samples))})
    return pd.DataFrame(rows)


@reference.register_sweep("feeding.sync", lesson="08_feeding", columns=("way", "ms_per_step"),
                          description="ms per small step with and without loss.item() every step")
def _sync_recording() -> pd.DataFrame:
    return sync_sweep()


FUSION_SIZES = tuple(1 << p for p in range(12, 27, 2))


def fusion_sweep(sizes=FUSION_SIZES) -> pd.DataFrame:
    """The chain unfused (five launches) and fused (one), by size: counted bytes, harness time, GB/s."""
    _need_gpu("fusion_sweep")
    cuda = runtime.cuda
    rows = []
    for n in sizes:
        x, bias = chain_inputs(int(n))
        ref = chain_reference(x, bias)
        dx, db = cuda.to_device(x), cuda.to_device(bias)
        out = cuda.device_array(int(n), dtype=np.float32)
        temps = [cuda.device_array(int(n), dtype=np.float32) for _ in range(2)]
        for fused in (False, True):
            counted = model.chain_bytes(int(n), 4, fused)
            m = _measure_chain(fused, dx, db, out, temps, ref, counted)
            rows.append({"n": int(n), "version": "fused" if fused else "unfused", "counted_bytes": counted,
                         "median_ms": m.median_ms, "gbps": m.gbps})
    return pd.DataFrame(rows)


def _measure_chain(fused, dx, db, out, temps, ref, counted):
    def run():
        return fused_chain_run(dx, db, out) if fused else unfused_chain(dx, db, out, temps)

    return measure(run, check=lambda: np.allclose(out.copy_to_host(), ref, rtol=1e-5, atol=1e-5),
                   bytes_moved=counted, footprint_bytes=(3 if fused else 5) * dx.size * 4,
                   label=f"chain {'fused' if fused else 'unfused'} n={dx.size}")


@reference.register_sweep("feeding.fusion", lesson="08_feeding",
                          columns=("n", "version", "counted_bytes", "median_ms", "gbps"),
                          description="elementwise chain, five kernels vs one fused kernel: counted bytes and time")
def _fusion_recording() -> pd.DataFrame:
    return fusion_sweep()


L2_SWEEP_BYTES_PER_LAUNCH_IN_L2S = 16  # each launch copies at least 16× the L2: long enough to time the L2


def l2_sweep(points_per_octave: int = 2) -> pd.DataFrame:
    """GB/s of a warm copy against its working set (read + write buffers), from L2/16 to 16× the L2.

    Each launch goes over the working set ``passes`` times, so that it moves at least 16× the L2's
    bytes: a single pass over a quarter of an H100's L2 (13 MB) took a few µs, mostly launch and
    drain, and measured 1.1 TB/s "L2" against 2.3 TB/s from DRAM (data/reference/nvidia-h100-80gb-hbm3/
    first-contact/probe.jsonl, step l2_ratio)."""
    _need_gpu("l2_sweep")
    cuda = runtime.cuda
    l2 = runtime.device().l2_bytes or model.H100_L2_BYTES
    rows = []
    for ws in sorted({int(l2 * 2 ** (k / points_per_octave)) // 256 * 256
                      for k in range(-4 * points_per_octave, 4 * points_per_octave + 1)}):
        n = ws // 8  # two float32 buffers
        passes = max(1, math.ceil(L2_SWEEP_BYTES_PER_LAUNCH_IN_L2S * l2 / (8 * n)))
        src = cuda.to_device(np.arange(n, dtype=np.float32))
        dst = cuda.device_array(n, dtype=np.float32)
        blocks = min(_grid(n), 4 * (runtime.device().sm_count or 132) * 8)
        m = measure(lambda src=src, dst=dst, blocks=blocks, passes=passes:
                    kernels.sweep_copy[blocks, BLOCK](src, dst, passes),
                    check=lambda src=src, dst=dst: bool(np.array_equal(dst.copy_to_host(), src.copy_to_host())),
                    bytes_moved=8 * n * passes, footprint_bytes=8 * n, cache="warm", label=f"copy, working set {ws} B")
        rows.append({"working_set_bytes": 8 * n, "l2_bytes": l2, "gbps": m.gbps, "memory_level": m.memory_level,
                     "passes": passes})
    return pd.DataFrame(rows)


@reference.register_sweep("feeding.l2", lesson="08_feeding",
                          columns=("working_set_bytes", "l2_bytes", "gbps", "memory_level"),
                          description="warm copy GB/s against working set, around the device's L2 size")
def _l2_recording() -> pd.DataFrame:
    return l2_sweep()


# --- profiling (torch.profiler), on the CPU or the GPU ------------------------------------------

MATMUL_OPS = ("aten::addmm", "aten::mm", "aten::matmul", "aten::bmm")
ELEMENTWISE_OPS = ("aten::mul", "aten::add", "aten::pow", "aten::tanh", "aten::sub", "aten::div",
                   "aten::gelu", "aten::relu")


def profile_ops(fn, *args, **kwargs) -> list:
    """The profiler's events of one call of ``fn`` (CPU activity, shapes recorded)."""
    return _profile(fn, *args, **kwargs)[0]


def _profile(fn, *args, **kwargs) -> tuple[list, Counter]:
    """The profiler's events of one call of ``fn``, and the host syncs its own code asked for
    (``syncs.spy``: counted in both modes)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU]
    if torch.cuda.is_available():
        activities.append(ProfilerActivity.CUDA)
    with _native_stderr_muted():  # the profiler's C++ side logs "profiler_start/stop" lines to fd 2
        with profile(activities=activities, record_shapes=True) as prof, syncs.spy() as spied:
            fn(*args, **kwargs)
    return list(prof.events()), spied


@contextlib.contextmanager
def _native_stderr_muted():
    """Send file descriptor 2 to /dev/null while the profiler starts and stops: its native log lines
    would land on stderr, which nbgrader counts as a failed test cell. Python's own stderr is kept."""
    sys.stderr.flush()
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(devnull)
        os.close(saved)


def profile_counts(fn, *args, **kwargs) -> Counter:
    """How many times each operator ran during one call of ``fn`` (torch.profiler's events: operators,
    and on a GPU the runtime's calls), plus the host syncs its own code asked for, under
    ``host sync: …`` names (``syncs.spy``; counted on the CPU too)."""
    events, spied = _profile(fn, *args, **kwargs)
    return Counter(e.name for e in events) + spied


def matmul_shapes_and_dtypes(events) -> list[dict]:
    """For every matmul event: its input shapes and dtypes, as the profiler recorded them."""
    rows = []
    for e in events:
        if e.name in MATMUL_OPS:
            shapes = [tuple(s) for s in e.input_shapes if s]
            rows.append({"op": e.name, "shapes": shapes,
                         "dtypes": [d for d in getattr(e, "input_dtypes", []) if d and d != "Scalar"]})
    return rows


def time_per_step_ms(runs: dict, steps: int) -> pd.DataFrame | None:
    """On a GPU: ms per step of each ``runs[name]()`` (a call that runs ``steps`` training steps), timed
    with torch's CUDA events after one warm-up call, median of 5, with the speed-up over the first row
    and over the row above (when each row adds one fix to the one above, the gain of that fix).
    None without a GPU (nothing is timed)."""
    import torch

    steps = validate.integer("steps", steps, minimum=1)
    if not torch.cuda.is_available():
        return None
    rows = []
    for name, run in runs.items():
        run()
        torch.cuda.synchronize()
        samples = []
        for _ in range(5):
            start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            run()
            stop.record()
            torch.cuda.synchronize()
            samples.append(start.elapsed_time(stop) / steps)
        rows.append({"loop": name, "ms_per_step": float(np.median(samples))})
    table = pd.DataFrame(rows)
    table["speed_up"] = table.ms_per_step.iloc[0] / table.ms_per_step
    table["speed_up_over_row_above"] = (table.ms_per_step.shift(1) / table.ms_per_step).fillna(1.0)
    table.attrs["source"] = charts_source()
    return table


def charts_source() -> str:
    return f"measured now on {runtime.device().name} with CUDA events (median of 5)"


# line → (what it runs, what it does on a GPU)
HIDDEN_SYNC_LINES = {
    "loss.item()": "waits for the stream, then copies 4 bytes back",
    "float(loss)": "the same as .item()",
    "if loss > 0:": "the same: Python needs a bool now",
    "print(loss)": "reads several values to choose a format (finite? min, max): one wait each",
    "loss.tolist()": "a device-to-host aten::_to_copy: cudaMemcpyAsync + cudaStreamSynchronize",
    "loss.cpu()": "the same device-to-host copy and wait",
    "batch.to(device)": "host → device: cudaMemcpyAsync + cudaStreamSynchronize (the host waits)",
    "pinned.to(device, non_blocking=True)": "from pinned memory: queued, the host goes on",
    "torch.cuda.synchronize()": "cudaDeviceSynchronize: waits for every stream",
}


def hidden_sync_table(device: str | None = None) -> pd.DataFrame:
    """Each line of HIDDEN_SYNC_LINES run once under the profiler and the spy, on ``device`` (the GPU
    where there is one): how many ``aten::_local_scalar_dense`` the profiler records and how many host
    syncs the spy counts; on a GPU also the runtime's waits the profile records (RUNTIME_SYNC_EVENTS)."""
    import io

    import torch

    device = device or ("cuda" if torch.cuda.is_available() else "cpu")

    loss, batch = torch.tensor(0.25, device=device), torch.randn(64, 256)
    pinned = batch.pin_memory() if torch.cuda.is_available() else batch
    actions = {"loss.item()": lambda: loss.item(), "float(loss)": lambda: float(loss),
               "if loss > 0:": lambda: bool(loss > 0), "print(loss)": lambda: print(loss),
               "loss.tolist()": lambda: loss.tolist(), "loss.cpu()": lambda: loss.cpu(),
               "batch.to(device)": lambda: batch.to(device),
               "pinned.to(device, non_blocking=True)": lambda: pinned.to(device, non_blocking=True),
               "torch.cuda.synchronize()": lambda: torch.cuda.synchronize()}
    rows = []
    for line, action in actions.items():
        with contextlib.redirect_stdout(io.StringIO()):  # print(loss)'s own output
            counts = profile_counts(action)
        row = {"line": line, "aten::_local_scalar_dense": counts["aten::_local_scalar_dense"],
               "host syncs (spy)": sum(n for k, n in counts.items() if k.startswith(syncs.SPY_PREFIX))}
        if device != "cpu":
            row["runtime waits (GPU profile)"] = sum(counts[name] for name in syncs.RUNTIME_SYNC_EVENTS)
        rows.append({**row, "on a GPU": HIDDEN_SYNC_LINES[line]})
    return pd.DataFrame(rows)
