"""Lesson 02 "Warp divergence": host runners, microscope traces, GPU sweeps and their recording registration."""

from __future__ import annotations

import functools
import json
import math
import os
import subprocess
import sys
import threading

import numpy as np
import pandas as pd
from numba import cuda  # importing gpucourse has already chosen the mode (simulator or GPU)

from gpucourse import validate
from gpucourse.errors import InvalidConfig, NoGPU
from gpucourse.hardware import WARP_SIZE
from gpucourse.lessons.divergence.kernels import (
    SIG_PREDICATED,
    SIG_TWO_PATHS,
    predicated,
    two_paths,
    two_paths_remapped,
)
from gpucourse.lessons.divergence.model import (
    _PTX_MEMORY,
    BLOCK_THREADS,
    BODY_COSTS,
    MICROSCOPE_BODY,
    MICROSCOPE_THREADS,
    PLACEMENTS,
    PtxResult,
    _cache_dir,
    _cache_key,
    _host_inputs,
    _kernel_source,
    _remember,
    _sparse_data,
    blocks_for,
    check_body,
    check_fraction,
    check_placement,
    check_threads,
    claims_table,
    flag_test,
    lane_flags,
    model_relative_time,
    path_b_body,
    reference_two_paths,
    sorted_order,
    trace_flags,
    warp_table,
)
from gpucourse.measure import harness, reference, runtime
from gpucourse.measure.compat import CHILD_PRELUDE
from gpucourse.measure.harness import measure

SWEEP_FRACTIONS = (0.0, 1 / 32, 1 / 8, 1 / 4, 1 / 2, 3 / 4, 7 / 8, 31 / 32, 1.0)
GPU_THREADS = 1 << 24  # enough that even a short body runs far longer than a launch's overhead
SPARSE_BODIES = (1, 4, 16, 64, 256, 1024)
SPARSE_DENSITIES = (1 / 32, 1 / 4)


def run_two_paths(flags, x=None, body_a: int = 8, body_b: int = 8, block: int = BLOCK_THREADS) -> np.ndarray:
    """Launch ``two_paths`` once (GPU or simulator) and return ``out`` as a NumPy array."""
    flags, x, n, body_a, body_b = _host_inputs(flags, x, body_a, body_b)
    block = validate.block(block)[0]
    out = np.full(n, np.nan, dtype=np.float32)
    two_paths[blocks_for(n, block), block](flags, x, out, body_a, body_b)
    return out


def run_sorted(flags, x=None, body_a: int = 8, body_b: int = 8, block: int = BLOCK_THREADS) -> np.ndarray:
    """``two_paths_remapped`` over ``sorted_order``: the same answer, one path per warp (but one)."""
    flags, x, n, body_a, body_b = _host_inputs(flags, x, body_a, body_b)
    block = validate.block(block)[0]
    out = np.full(n, np.nan, dtype=np.float32)
    order = sorted_order(flags)
    two_paths_remapped[blocks_for(n, block), block](order, flags, x, out, body_a, body_b)
    return out


# --- PTX: what did the compiler make of the branch? ------------------------------------------

PTX_CC = (9, 0)
# Runs in a child process without NUMBA_ENABLE_CUDASIM, so numba.cuda is the real target; the
# numba-cuda[cu13] wheels bring NVVM, so this needs no GPU and no driver.
_PTX_SCRIPT = r"""
import json, math, sys
import numpy as np
from numba import cuda
jobs = json.loads(sys.stdin.read())
results = []
for job in jobs:
    ns = {"cuda": cuda, "np": np, "math": math}
    exec(compile(job["source"], "<kernel " + job["name"] + ">", "exec"), ns)
    fn = ns[job["name"]]
    ptx, _ = cuda.compile_ptx(getattr(fn, "py_func", fn), job["signature"], cc=tuple(job["cc"]))
    results.append(ptx)
sys.stdout.write(json.dumps(results))
"""
_PTX_SCRIPT = CHILD_PRELUDE + _PTX_SCRIPT  # numba-cuda 0.30 on NumPy 2.5 (measure/compat.py)


def _compile_in_child(jobs: list[dict], timeout_s: float) -> list[str]:
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    python = os.environ.get("GPUCOURSE_PTX_PYTHON", sys.executable)
    done = subprocess.run([python, "-c", _PTX_SCRIPT], input=json.dumps(jobs), capture_output=True, text=True,
                          env=env, timeout=timeout_s)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no error message"])[-1]
        raise RuntimeError(last)
    return json.loads(done.stdout)


def ptx_of_many(kernels: list[tuple[object, str]], cc=PTX_CC, timeout_s: float = 120.0) -> list[PtxResult]:
    """PTX of each ``(kernel, signature)``, compiled together in one child process and cached.

    The kernel's source is compiled on its own with ``cuda``, ``np`` and ``math`` in scope. When
    the compiler cannot run here, each result says why (``available`` False) instead of failing.
    """
    prepared = []
    for kernel, signature in kernels:
        if not isinstance(signature, str) or "(" not in signature:
            raise InvalidConfig(f"signature must be a string such as 'void(float32[::1])', got {signature!r}")
        name, source = _kernel_source(kernel)
        prepared.append((name, source, signature, _cache_key(name, source, signature, cc)))
    for *_, key in prepared:
        path = _cache_dir() / f"{key}.ptx"
        if key not in _PTX_MEMORY and path.exists():
            _PTX_MEMORY[key] = path.read_text()
    todo = [p for p in prepared if p[3] not in _PTX_MEMORY]
    reason = ""
    if todo:
        jobs = [{"name": n, "source": s, "signature": sig, "cc": list(cc)} for n, s, sig, _ in todo]
        try:
            texts = _compile_in_child(jobs, timeout_s)
        except (OSError, RuntimeError, ValueError, subprocess.TimeoutExpired) as exc:
            reason = f"the CUDA compiler could not run in a child process ({exc})"
        else:
            for (*_, key), text in zip(todo, texts, strict=True):
                _remember(key, text)
    return [PtxResult(name, sig, True, _PTX_MEMORY[key]) if key in _PTX_MEMORY
            else PtxResult(name, sig, False, reason=reason) for name, _, sig, key in prepared]


def ptx_of(kernel, signature: str, cc=PTX_CC) -> PtxResult:
    """The PTX the compiler makes of ``kernel`` for ``signature`` (cc 9.0), or why it cannot here."""
    return ptx_of_many([(kernel, signature)], cc)[0]


_EVIDENCE: list = []
_EVIDENCE_LOCK = threading.Lock()


def _evidence_results() -> tuple[PtxResult, ...]:
    with _EVIDENCE_LOCK:
        if not _EVIDENCE:
            _EVIDENCE.append(tuple(ptx_of_many([(two_paths, SIG_TWO_PATHS), (predicated, SIG_PREDICATED)])))
        return _EVIDENCE[0]


def prefetch_ptx() -> None:
    """Start compiling the lesson's two kernels to PTX in the background (a few seconds without a
    GPU); ``show_ptx`` and ``ptx_evidence`` wait for it."""
    threading.Thread(target=_evidence_results, daemon=True, name="gpucourse-ptx").start()


def ptx_evidence() -> pd.DataFrame:
    """For the real-work and the trivial kernel: what their flag test compiled to, read from the PTX."""
    rows = []
    for result in _evidence_results():
        test = flag_test(result.ptx) if result.available else None
        rows.append({
            "kernel": result.name, "available": result.available,
            "flag test compiles to": test.kind if test else f"PTX not available: {result.reason}",
            "conditional branches (all)": test.conditional_branches if test else None,
            "selp": test.selects if test else None,
        })
    return pd.DataFrame(rows)


# --- measurement (GPU) --------------------------------------------------------------------------


def _sample_check(out, flags, x, body_a, body_b, samples: int = 2048) -> bool:
    """Compare a random sample of outputs with the NumPy reference (the full reference is slow)."""
    idx = np.random.default_rng(1).choice(flags.size, size=min(samples, flags.size), replace=False)
    got = np.asarray(out.copy_to_host() if hasattr(out, "copy_to_host") else out)[idx]
    want = reference_two_paths(flags[idx], x[idx], body_a, body_b)
    return bool(np.allclose(got, want, rtol=1e-4, atol=1e-5))


def flags_key(flags: np.ndarray) -> bytes:
    """A digest of a flags array: equal arrays (every placement at fraction 0 or 1) give equal keys."""
    import hashlib

    return hashlib.blake2b(np.ascontiguousarray(flags).tobytes(), digest_size=16).digest()


def measure_fraction_curve(body_a: int, body_b: int, *, placements=PLACEMENTS, fractions=SWEEP_FRACTIONS,
                           n_threads: int = GPU_THREADS, kernel: str = "two_paths",
                           min_total_ms: float = 500.0, progress=None, launches: dict | None = None) -> pd.DataFrame:
    """On a GPU: time of ``kernel`` at each fraction and placement (one run), and relative to fraction 1.

    A launch is measured once per distinct flags array (``launches``, keyed by ``flags_key``; pass one dict to
    share it across calls with the same kernel and bodies): at fraction 0 and 1 every placement puts every lane
    on one path, so one launch serves them all (issue 48), and its rows say which placement it was measured as
    (``launch_shared_with``; empty where the row is its own launch)."""
    body_a, body_b = check_body("path A cost", body_a, minimum=1), check_body("path B cost", body_b)
    validate.choice("kernel", kernel, ("two_paths", "predicated"))
    placements = [check_placement(p) for p in placements]
    fractions = [check_fraction(f) for f in fractions]
    if 1.0 not in fractions:
        raise InvalidConfig("fractions must include 1.0: times are reported relative to it")
    _needs_gpu("timing the divergence sweep")
    n = check_threads(n_threads, launching=True)
    x = np.random.default_rng(2).random(n, dtype=np.float32)
    d_x, d_out = cuda.to_device(x), cuda.device_array(n, dtype=np.float32)
    blocks = blocks_for(n)
    points = [(p, f) for p in placements for f in fractions]
    rows, launches = [], {} if launches is None else launches
    for step, (placement, f) in enumerate(points):
        flags = lane_flags(n, f, placement)
        key = flags_key(flags)
        if key in launches:  # the same kernel on the same flags: measured already
            rows.append({**launches[key], "placement": placement, "fraction": f,
                         "launch_shared_with": launches[key]["launch_shared_with"] or launches[key]["placement"]})
            if progress:
                progress((step + 1) / len(points))
            continue
        d_flags = cuda.to_device(flags)
        if kernel == "two_paths":
            def run(d_flags=d_flags):
                two_paths[blocks, BLOCK_THREADS](d_flags, d_x, d_out, body_a, body_b)

            def check(flags=flags):
                return _sample_check(d_out, flags, x, body_a, body_b)
        else:
            def run(d_flags=d_flags):
                predicated[blocks, BLOCK_THREADS](d_flags, d_x, d_out)

            def check(flags=flags):
                want = np.where(flags.astype(bool), x * np.float32(0.5), x + np.float32(1.0))
                return bool(np.allclose(d_out.copy_to_host(), want))
        on_a = int(flags.sum())
        m = measure(run, check=check, label=f"{kernel} {placement} f={f:.3f}", min_total_ms=min_total_ms,
                    flops=2 * (on_a * body_a + (n - on_a) * body_b) if kernel == "two_paths" else None)
        model = model_relative_time(flags, body_a, body_b) if kernel == "two_paths" else 1.0
        rows.append({
            "kernel": kernel, "placement": placement, "fraction": f, "actual_fraction": on_a / n,
            "body_a": body_a, "body_b": body_b, "n_threads": n, "median_ms": m.median_ms, "iqr_ms": m.iqr_ms,
            "min_ms": m.min_ms, "n_samples": m.n_samples, "model_relative_time": model, "launch_shared_with": "",
        })
        launches[key] = rows[-1]
        if progress:
            progress((step + 1) / len(points))
    frame = pd.DataFrame(rows)
    frame["relative_time"] = frame.median_ms / frame[frame.fraction == 1.0].median_ms.median()
    return frame


@reference.register_sweep(
    "divergence.fraction", lesson="02_divergence",
    columns=("kernel", "placement", "fraction", "body_a", "body_b", "median_ms", "relative_time"),
    description="two_paths: time vs fraction of lanes on path A per placement (path A 16/128/1024 FMAs, "
                "path B the same or 1/16); the trivially predicated kernel. At fraction 0 and 1 every placement "
                "has the same flags: one launch, its row repeated per placement (launch_shared_with names it)",
)
def _fraction_sweep() -> pd.DataFrame:
    frames = [_two_paths_curves(body_a, path_b_body(body_a, path_b))
              for body_a in BODY_COSTS for path_b in ("same", "cheap")]
    frames.append(measure_fraction_curve(1, 1, kernel="predicated", placements=("interleaved", "clustered"),
                                         fractions=predicated_fractions()))
    return pd.concat(frames, ignore_index=True)


# Fewer points where the recorded spread allows (issue 48): a curve is recorded at its ends and middle only where its
# recorded points lie within FLAT_WITHIN_IQR × their largest relative IQR of one another, i.e. it is flat at the
# resolution the harness has. On the H200 (quick/divergence.fraction.csv) the predicated kernel's six points are at
# most 0.19 % apart with relative IQRs up to 0.21 %: flat; so is two_paths clustered with equal bodies (whole warps
# on one path or the other, each as long: 0.02 % apart); every other two_paths curve's points differ by far more
# than their spread (interleaved, equal bodies: 95 % at f = 1/2; IQR ≤ 0.08 %), so they keep all of SWEEP_FRACTIONS.
# f = 1/2 is where an interleaved branch would diverge in every warp: the witness the chart's claim needs.
FLAT_WITHIN_IQR = 2.0
PREDICATED_FRACTIONS = (0.0, 0.5, 1.0)
FLAT_TWO_PATHS = ("clustered",)  # the placements whose two_paths curve is flat when path B costs what path A does


def _default(name: str):
    """``measure_fraction_curve``'s default ``name`` now (a plan may patch it)."""
    import inspect

    return inspect.signature(measure_fraction_curve).parameters[name].default


def _two_paths_curves(body_a: int, body_b: int) -> pd.DataFrame:
    """two_paths at every placement: a flat curve (FLAT_TWO_PATHS, equal bodies) at its ends and middle only, the
    others at every fraction; each time relative to fraction 1 over all of them, as one call would give."""
    placements = tuple(_default("placements"))
    flat = [p for p in placements if p in FLAT_TWO_PATHS] if body_a == body_b else []
    rest = [p for p in placements if p not in flat]
    launches: dict = {}  # one launch per distinct flags across both calls (the ends: every placement alike)
    frames = [measure_fraction_curve(body_a, body_b, placements=rest, launches=launches)] if rest else []
    if flat:
        frames.append(measure_fraction_curve(body_a, body_b, placements=flat, fractions=predicated_fractions(),
                                             launches=launches))
    frame = pd.concat(frames, ignore_index=True)
    frame["relative_time"] = frame.median_ms / frame[frame.fraction == 1.0].median_ms.median()
    return frame


def predicated_fractions() -> tuple[float, ...]:
    """The fractions the sweep records the predicated kernel at: the sweep's own (its default, which a plan may
    shrink) that are the ends or the middle."""
    default = _default("fractions")
    return tuple(f for f in default if f in PREDICATED_FRACTIONS) or tuple(default)


def flat_within_spread(rows: pd.DataFrame, factor: float = FLAT_WITHIN_IQR) -> bool:
    """Whether recorded points (``relative_time``, ``median_ms``, ``iqr_ms``) lie within ``factor`` × their largest
    relative IQR of one another: the rule that lets a curve be recorded at fewer points."""
    spread = float((rows.iqr_ms / rows.median_ms).max())
    return float(rows.relative_time.max() - rows.relative_time.min()) <= factor * spread


@functools.lru_cache(maxsize=16)
def _live_curve(body_a: int, body_b: int) -> pd.DataFrame:
    return measure_fraction_curve(body_a, body_b, min_total_ms=harness.LIVE_MIN_TOTAL_MS)


def claims(body_a: int = 128) -> pd.DataFrame:
    """The folklore table (``model.claims_table``); on a GPU its GPU column holds the ratios measured now, from
    the same live curves as the fraction chart (cached: the chart's own points are not measured again)."""
    return claims_table(body_a, measured=_live_curve if runtime.is_gpu() else None)


def _needs_gpu(what: str) -> None:
    if not runtime.is_gpu():
        raise NoGPU(f"{what} needs a GPU and this is the simulator; the charts show recorded data instead")


def measure_sort_pays(density: float, bodies=SPARSE_BODIES, n_threads: int = GPU_THREADS,
                      min_total_ms: float = 500.0, progress=None) -> pd.DataFrame:
    """On a GPU, sparse data (path A on the non-zeros, nothing on the zeros): the unsorted kernel vs
    sort + remapped kernel vs compact (the non-zeros' indices) + kernel over them — sorting included."""
    density = validate.number("density of non-zeros", density, minimum=0.0, maximum=1.0)
    bodies = [check_body("path A cost", b, minimum=1) for b in bodies]
    _needs_gpu("timing the sort-first sweep")
    import cupy

    n = check_threads(n_threads, launching=True)
    flags, x = _sparse_data(n, density)
    d_flags, d_x, d_out = cupy.asarray(flags), cupy.asarray(x), cupy.empty(n, dtype=cupy.float32)
    nb_flags, nb_x, nb_out = cuda.as_cuda_array(d_flags), cuda.as_cuda_array(d_x), cuda.as_cuda_array(d_out)
    warps = warp_table(flags)
    model = float((warps.lanes_a > 0).sum() / max(1, math.ceil(flags.sum() / WARP_SIZE)))
    rows = []
    for step, body in enumerate(bodies):
        def unsorted(body=body):
            two_paths[blocks_for(n), BLOCK_THREADS](nb_flags, nb_x, nb_out, body, 0)

        def sort_then_run(body=body):
            order = cuda.as_cuda_array(sorted_order(d_flags, cupy))
            two_paths_remapped[blocks_for(n), BLOCK_THREADS](order, nb_flags, nb_x, nb_out, body, 0)

        def compact_then_run(body=body):
            order = cupy.flatnonzero(d_flags)  # only the non-zeros; the zeros keep x (path B is empty)
            d_out[...] = d_x
            if order.size:
                grid, nb_order = blocks_for(int(order.size)), cuda.as_cuda_array(order)
                two_paths_remapped[grid, BLOCK_THREADS](nb_order, nb_flags, nb_x, nb_out, body, 0)

        def check(body=body):
            return _sample_check(cupy.asnumpy(d_out), flags, x, body, 0)

        row = {"density": density, "body_a": body, "n_threads": n, "model_speedup": model}
        for name, fn in (("unsorted", unsorted), ("sort", sort_then_run), ("compact", compact_then_run)):
            d_out.fill(np.nan)
            row[f"{name}_ms"] = measure(fn, check=check, label=f"{name} body={body}",
                                        min_total_ms=min_total_ms).median_ms
        rows.append(row)
        if progress:
            progress((step + 1) / len(bodies))
    frame = pd.DataFrame(rows)
    frame["sort_speedup"] = frame.unsorted_ms / frame.sort_ms
    frame["compact_speedup"] = frame.unsorted_ms / frame.compact_ms
    return frame


@reference.register_sweep(
    "divergence.sort_pays", lesson="02_divergence",
    columns=("density", "body_a", "unsorted_ms", "sort_ms", "compact_ms", "sort_speedup", "compact_speedup"),
    description="sparse data (random non-zeros, density 1/32 and 1/4): unsorted branchy kernel vs sort + "
                "remapped kernel vs compact + kernel, path A 1 to 1024 FMAs, preprocessing included",
)
def _sort_pays_sweep() -> pd.DataFrame:
    return pd.concat([measure_sort_pays(d) for d in SPARSE_DENSITIES], ignore_index=True)


def trace_two_paths(fraction: float, placement: str, body_a: int = MICROSCOPE_BODY,
                    body_b: int = MICROSCOPE_BODY, n_threads: int = MICROSCOPE_THREADS):
    """The microscope's report of a small ``two_paths`` launch with this fraction and placement."""
    return trace_flags(lane_flags(n_threads, fraction, placement), body_a, body_b)
