"""Lesson 02 "Warp divergence": what a data-dependent branch costs when both sides are real work.

* ``lane_flags(n, fraction, placement)``: which threads take path A — a fraction of the lanes,
  placed ``interleaved`` inside every warp, ``clustered`` in whole warps, ``sorted`` (all A first)
  or ``random`` (unsorted sparse data).
* The model (``warp_costs``, ``model_relative_time``, ``model_simt_efficiency``): a warp pays for
  every path any of its lanes takes; its lanes that are not on the path it is issuing sit masked.
* Kernels: ``two_paths`` (a branch whose two bodies are loops of FMAs the compiler must keep),
  ``two_paths_remapped`` (the same work, thread t handles element ``order[t]``) and
  ``predicated`` (a trivial branch the compiler turns into a select: it shows no gap).
* ``ptx_of`` / ``flag_test``: compile a kernel to PTX (without a GPU, in a child process) and
  find what the compiler made of the ``if`` on the loaded flag: a branch, a select or predication.
* Figures: ``warp_timeline_figure`` (the concept), ``fraction_figure`` (time vs fraction, one
  curve per placement, model beside measurement), ``simt_figure`` / ``lanes_picture`` (the
  microscope), ``predicated_figure`` and ``sort_pays_figure`` (the sparse-data story).
"""

from __future__ import annotations

import functools
import hashlib
import html
import inspect
import json
import math
import os
import re
import subprocess
import sys
import textwrap
import threading
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from numba import cuda  # importing gpucourse has already chosen the mode (simulator or GPU)

from gpucourse import validate
from gpucourse.errors import InvalidConfig, NoGPU, WrongResult
from gpucourse.hardware import WARP_SIZE
from gpucourse.measure import reference, runtime
from gpucourse.measure.harness import measure
from gpucourse.viz import charts

PLACEMENTS = ("interleaved", "clustered", "sorted", "random")
PLACEMENT_TEXT = {
    "interleaved": "the same share of lanes in every warp, spread across it",
    "clustered": "whole warps on A, spread through the array",
    "sorted": "every A element first, then every B (one warp may be mixed)",
    "random": "each element on A by chance, like unsorted sparse data",
}
# Path B's body as a share of path A's: the same work, a cheap sixteenth, or an empty else.
PATH_B = {"same": 1.0, "cheap": 1 / 16, "none": 0.0}
BODY_COSTS = (16, 128, 1024)  # FMA iterations of path A in the recorded sweep
SWEEP_FRACTIONS = (0.0, 1 / 32, 1 / 8, 1 / 4, 1 / 2, 3 / 4, 7 / 8, 31 / 32, 1.0)
MODEL_FRACTIONS = tuple(k / 32 for k in range(33))
BLOCK_THREADS = 256
GPU_THREADS = 1 << 24  # enough that even a short body runs far longer than a launch's overhead
MAX_GPU_THREADS = 1 << 28
MODEL_THREADS = 1 << 15  # 1,024 warps: plenty for the model's averages
MAX_SIM_THREADS = 8192  # the simulator runs ~7,000 threads per second
MAX_BODY = 1 << 16
SPARSE_BODIES = (1, 4, 16, 64, 256, 1024)
SPARSE_DENSITIES = (1 / 32, 1 / 4)

SIG_TWO_PATHS = "void(uint8[::1], float32[::1], float32[::1], int64, int64)"
SIG_REMAPPED = "void(int64[::1], uint8[::1], float32[::1], float32[::1], int64, int64)"
SIG_PREDICATED = "void(uint8[::1], float32[::1], float32[::1])"

# The kernels' arithmetic, for the NumPy reference. Path A: v ← 0.999 v + 0.001; path B:
# v ← 0.998 v + 0.004: one FMA each, both converge, and each loop count is its own run-time
# argument, so the compiler can neither drop nor merge the two loops.
A_MUL, A_ADD = np.float32(0.999), np.float32(0.001)
B_MUL, B_ADD = np.float32(0.998), np.float32(0.004)


# --- input checks (each raises InvalidConfig before anything launches) -----------------------


def check_fraction(fraction) -> float:
    return validate.number("fraction of lanes on path A", fraction, minimum=0.0, maximum=1.0)


def check_placement(placement) -> str:
    return validate.choice("placement", placement, PLACEMENTS)


def check_body(name: str, body, minimum: int = 0) -> int:
    return validate.integer(name, body, minimum=minimum, maximum=MAX_BODY)


def check_threads(n_threads, *, launching: bool = False) -> int:
    """A whole number of warps; where something will run, small enough for the simulator or the GPU."""
    n = validate.integer("number of threads", n_threads, minimum=WARP_SIZE, maximum=MAX_GPU_THREADS)
    if n % WARP_SIZE:
        raise InvalidConfig(f"number of threads must be a multiple of {WARP_SIZE} (whole warps), got {n}")
    if launching and not runtime.is_gpu() and n > MAX_SIM_THREADS:
        raise InvalidConfig(
            f"the simulator runs at most {MAX_SIM_THREADS} threads here (about 7,000 per second); got {n}"
        )
    if launching and runtime.is_gpu():
        validate.fits_in_memory(n * (1 + 4 + 4 + 8), runtime.free_memory_bytes(), "the flags, data and order")
    return n


def path_b_body(body_a: int, path_b: str) -> int:
    """Path B's FMA count for a choice of ``PATH_B``: the same as A, a sixteenth, or none."""
    validate.choice("path B", path_b, PATH_B)
    return int(round(body_a * PATH_B[path_b]))


# --- which lanes take path A ------------------------------------------------------------------


def _spread(count: int, slots: int) -> np.ndarray:
    """``count`` of ``slots`` marked, evenly spaced, as a bool array."""
    k = np.arange(slots)
    return ((k + 1) * count // slots) > (k * count // slots)


def lane_flags(n_threads: int, fraction: float, placement: str, seed: int = 0) -> np.ndarray:
    """1 where thread i takes path A, else 0 (uint8), for ``n_threads`` threads.

    interleaved: round(32·f) lanes of every warp, spread across it; clustered: round(W·f) of the
    W warps entirely on A, spread through the array; sorted: the first round(n·f) threads;
    random: each thread independently with probability f (seeded).
    """
    n = check_threads(n_threads)
    f = check_fraction(fraction)
    placement = check_placement(placement)
    warps = n // WARP_SIZE
    if placement == "interleaved":
        flags = np.tile(_spread(round(f * WARP_SIZE), WARP_SIZE), warps)
    elif placement == "clustered":
        flags = np.repeat(_spread(round(f * warps), warps), WARP_SIZE)
    elif placement == "sorted":
        flags = np.arange(n) < round(f * n)
    else:
        flags = np.random.default_rng(seed).random(n) < f
    return flags.astype(np.uint8)


# --- the model: a warp pays for every path any of its lanes takes ------------------------------


def _lanes_on_a(flags) -> np.ndarray:
    flags = np.asarray(flags).astype(bool).ravel()
    if flags.size == 0 or flags.size % WARP_SIZE:
        raise InvalidConfig(f"flags must cover whole warps (a multiple of {WARP_SIZE}), got {flags.size}")
    return flags.reshape(-1, WARP_SIZE).sum(axis=1)


def warp_table(flags) -> pd.DataFrame:
    """Per warp: lanes on A, lanes on B, and how many paths the warp must issue (1 or 2)."""
    lanes_a = _lanes_on_a(flags)
    lanes_b = WARP_SIZE - lanes_a
    return pd.DataFrame({
        "warp": np.arange(lanes_a.size), "lanes_a": lanes_a, "lanes_b": lanes_b,
        "paths": (lanes_a > 0).astype(int) + (lanes_b > 0).astype(int),
    })


def warp_costs(flags, body_a: int, body_b: int) -> np.ndarray:
    """Issue slots of the branchy section per warp: body_a if any lane is on A, plus body_b if any on B."""
    body_a, body_b = check_body("path A cost", body_a), check_body("path B cost", body_b)
    lanes_a = _lanes_on_a(flags)
    return body_a * (lanes_a > 0) + body_b * (lanes_a < WARP_SIZE)


def model_relative_time(flags, body_a: int, body_b: int) -> float:
    """Predicted time of the branchy section ÷ its time when every lane takes path A."""
    body_a = check_body("path A cost", body_a, minimum=1)
    costs = warp_costs(flags, body_a, body_b)
    return float(costs.sum() / (costs.size * body_a))


def model_simt_efficiency(flags, body_a: int, body_b: int) -> float:
    """Active lanes ÷ (32 × issue slots) over the branchy section: 1.0 when every warp agrees
    (NaN when neither body issues anything)."""
    costs = warp_costs(flags, body_a, body_b)
    lanes_a = _lanes_on_a(flags)
    useful = (lanes_a * body_a + (WARP_SIZE - lanes_a) * body_b).sum()
    return float(useful / (WARP_SIZE * costs.sum())) if costs.sum() else float("nan")


@functools.lru_cache(maxsize=32)
def _model_curves(body_a, body_b, n_threads, fractions, placements, seed) -> pd.DataFrame:
    rows = []
    for placement in placements:
        for f in fractions:
            flags = lane_flags(n_threads, f, placement, seed)
            rows.append({
                "placement": placement, "fraction": f, "actual_fraction": float(flags.mean()),
                "relative_time": model_relative_time(flags, body_a, body_b),
                "simt_efficiency": model_simt_efficiency(flags, body_a, body_b),
            })
    return pd.DataFrame(rows)


def model_curves(body_a: int, body_b: int, n_threads: int = MODEL_THREADS, fractions=MODEL_FRACTIONS,
                 placements=PLACEMENTS, seed: int = 0) -> pd.DataFrame:
    """The model's relative time and SIMT efficiency for each placement and fraction."""
    body_a, body_b = check_body("path A cost", body_a, minimum=1), check_body("path B cost", body_b)
    fractions = tuple(check_fraction(f) for f in fractions)
    placements = tuple(check_placement(p) for p in placements)
    return _model_curves(body_a, body_b, check_threads(n_threads), fractions, placements, seed).copy()


# --- kernels -------------------------------------------------------------------------------------


@cuda.jit
def two_paths(flags, x, out, body_a, body_b):
    i = cuda.grid(1)
    if i < out.size:
        v = x[i]
        if flags[i]:
            for _ in range(body_a):  # path A: real work, kept as a branch
                v = v * np.float32(0.999) + np.float32(0.001)
        else:
            for _ in range(body_b):  # path B: different real work
                v = v * np.float32(0.998) + np.float32(0.004)
        out[i] = v


@cuda.jit
def two_paths_remapped(order, flags, x, out, body_a, body_b):
    t = cuda.grid(1)
    if t < order.size:
        i = order[t]  # thread t works on element order[t]: in sorted order, warps agree
        v = x[i]
        if flags[i]:
            for _ in range(body_a):
                v = v * np.float32(0.999) + np.float32(0.001)
        else:
            for _ in range(body_b):
                v = v * np.float32(0.998) + np.float32(0.004)
        out[i] = v


@cuda.jit
def predicated(flags, x, out):
    i = cuda.grid(1)
    if i < out.size:
        v = x[i]
        if flags[i]:  # one instruction per side: the compiler computes both and selects
            v = v * np.float32(0.5)
        else:
            v = v + np.float32(1.0)
        out[i] = v


def reference_two_paths(flags, x, body_a: int, body_b: int) -> np.ndarray:
    """NumPy reference of ``two_paths`` (float32, without fused multiply-add)."""
    on_a = np.asarray(flags).astype(bool)
    v = np.array(x, dtype=np.float32, copy=True)
    a, b = v[on_a], v[~on_a]
    for _ in range(body_a):
        a = a * A_MUL + A_ADD
    for _ in range(body_b):
        b = b * B_MUL + B_ADD
    v[on_a], v[~on_a] = a, b
    return v


def blocks_for(n: int, block: int = BLOCK_THREADS) -> int:
    return (n + block - 1) // block


def _host_inputs(flags, x, body_a, body_b):
    flags = np.ascontiguousarray(flags, dtype=np.uint8)
    n = check_threads(flags.size, launching=True)
    body_a, body_b = check_body("path A cost", body_a), check_body("path B cost", body_b)
    x = np.linspace(0, 1, n, dtype=np.float32) if x is None else np.ascontiguousarray(x, dtype=np.float32)
    if x.shape != flags.shape:
        raise InvalidConfig(f"x must have one value per flag ({flags.size}), got shape {x.shape}")
    return flags, x, n, body_a, body_b


def run_two_paths(flags, x=None, body_a: int = 8, body_b: int = 8, block: int = BLOCK_THREADS) -> np.ndarray:
    """Launch ``two_paths`` once (GPU or simulator) and return ``out`` as a NumPy array."""
    flags, x, n, body_a, body_b = _host_inputs(flags, x, body_a, body_b)
    block = validate.block(block)[0]
    out = np.full(n, np.nan, dtype=np.float32)
    two_paths[blocks_for(n, block), block](flags, x, out, body_a, body_b)
    return out


def sorted_order(flags, xp=np):
    """Element indices with every path-A element first (a stable partition): then warps agree.
    ``xp`` is NumPy (host arrays) or CuPy (GPU arrays; its argsort is always stable)."""
    keys = 1 - xp.asarray(flags, dtype=xp.int8)
    order = xp.argsort(keys, kind="stable") if xp is np else xp.argsort(keys)
    return order.astype(xp.int64)


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


@dataclass
class PtxResult:
    """PTX text of one kernel, or why it could not be made here."""

    name: str
    signature: str
    available: bool
    ptx: str = ""
    reason: str = ""

    def __repr__(self) -> str:
        if not self.available:
            return f"PTX of {self.name}: not available here ({self.reason})"
        return f"PTX of {self.name} {self.signature}: {len(self.ptx.splitlines())} lines"


def _kernel_source(kernel) -> tuple[str, str]:
    fn = getattr(kernel, "py_func", None) or getattr(kernel, "fn", None) or kernel
    if not callable(fn) or not hasattr(fn, "__code__"):
        raise InvalidConfig(f"ptx_of needs a @cuda.jit kernel or a Python function, got {kernel!r}")
    try:
        source = textwrap.dedent(inspect.getsource(fn))
    except (OSError, TypeError) as exc:
        raise InvalidConfig(f"the source of {fn.__name__} cannot be read ({exc})") from None
    return fn.__name__, source


def kernel_source(kernel) -> str:
    """The Python source of a kernel, as written (what the notebook shows is what CI ran)."""
    return _kernel_source(kernel)[1]


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "gpucourse" / "ptx"


def _cache_key(name: str, source: str, signature: str, cc) -> str:
    try:
        version = metadata.version("numba-cuda")
    except metadata.PackageNotFoundError:
        version = "unknown"
    text = json.dumps([name, source, signature, list(cc), version])
    return hashlib.sha256(text.encode()).hexdigest()[:24]


_PTX_MEMORY: dict[str, str] = {}


def _compile_in_child(jobs: list[dict], timeout_s: float) -> list[str]:
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    python = os.environ.get("GPUCOURSE_PTX_PYTHON", sys.executable)
    done = subprocess.run([python, "-c", _PTX_SCRIPT], input=json.dumps(jobs), capture_output=True, text=True,
                          env=env, timeout=timeout_s)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no error message"])[-1]
        raise RuntimeError(last)
    return json.loads(done.stdout)


def _remember(key: str, text: str) -> None:
    _PTX_MEMORY[key] = text
    try:
        folder = _cache_dir()
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f"{key}.{os.getpid()}.tmp"
        tmp.write_text(text)
        tmp.replace(folder / f"{key}.ptx")
    except OSError:
        pass  # a read-only home only costs a recompile next time


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


_INSTRUCTION = re.compile(r"^\s*(@!?%\w+\s+)?([a-z][\w.]*)\s*(.*?);?\s*$")
_FLAG_TEST_MEANING = {
    "branch": "a real branch: the warp jumps, and lanes that disagree run one path after the other",
    "select": "no branch: every lane computes both sides and `selp` picks one (predication)",
    "predicated": "no branch: the instructions carry the predicate, each lane keeps its own result",
    "not found": "the flag test could not be found in this PTX",
}


@dataclass
class FlagTest:
    """What the compiler made of ``if flags[i]:`` — found by following the loaded flag into a setp."""

    kind: str  # "branch", "select", "predicated" or "not found"
    predicate: str = ""
    lines: list[tuple[int, str]] = field(default_factory=list)  # (line number, text) worth showing
    conditional_branches: int = 0  # every `@%p bra` in the kernel (bounds check and loops included)
    selects: int = 0

    def summary(self) -> str:
        return f"`if flags[i]` → {self.predicate or '?'}: {_FLAG_TEST_MEANING[self.kind]}"


def flag_test(ptx: str, load: str = "ld.global.u8") -> FlagTest:
    """Follow the first ``load`` (the flag) through the registers into its ``setp``, then find the
    predicate's uses: ``@%p bra`` (a branch), ``selp`` (a select) or predicated instructions."""
    lines = ptx.splitlines()
    tainted: set[str] = set()
    shown: list[tuple[int, str]] = []
    predicate, start = "", 0
    for number, text in enumerate(lines, 1):
        match = _INSTRUCTION.match(text)
        if not match:
            continue
        opcode, operands = match.group(2), [o.strip() for o in match.group(3).split(",")]
        if not tainted:
            if opcode.startswith(load):
                tainted.add(operands[0])
                shown.append((number, text.strip()))
            continue
        sources = " ".join(operands[1:])
        if any(re.search(re.escape(reg) + r"\b", sources) for reg in tainted):
            shown.append((number, text.strip()))
            if opcode.startswith("setp"):
                predicate, start = operands[0].split("|")[0], number
                break
            tainted.add(operands[0])
    conditional = sum(1 for t in lines if re.search(r"@!?%p\w*\s+bra", t))
    selects = sum(1 for t in lines if t.strip().startswith("selp"))
    if not predicate:
        return FlagTest("not found", conditional_branches=conditional, selects=selects)
    pattern = re.escape(predicate) + r"\b"
    kind = ""
    for number, text in enumerate(lines[start:], start + 1):
        stripped = text.strip()
        if re.match(r"@!?" + pattern + r"\s+bra", stripped):
            found = "branch"
        elif stripped.startswith("selp") and re.search(pattern, stripped):
            found = "select"
        elif re.match(r"@!?" + pattern, stripped):
            found = "predicated"
        else:
            continue
        kind = kind or found
        shown.append((number, stripped))
        if len(shown) >= 6:
            break
    return FlagTest(kind or "not found", predicate, shown, conditional, selects)


class PtxView:
    """The PTX around the flag test, with the lines that matter marked (what the notebook shows)."""

    def __init__(self, result: PtxResult, context: int = 2, load: str = "ld.global.u8"):
        self.result = result
        self.test = flag_test(result.ptx, load) if result.available else FlagTest("not found")
        self.context = context

    def excerpt(self) -> list[tuple[int, str, bool]]:
        if not self.result.available or not self.test.lines:
            return []
        lines = self.result.ptx.splitlines()
        marked = {n for n, _ in self.test.lines}
        near = {k for n in marked for k in range(n - self.context, n + self.context + 1)}
        keep = sorted(k for k in near if 1 <= k <= len(lines))
        return [(k, lines[k - 1].strip(), k in marked) for k in keep]

    def _rows(self, mark_line) -> list[str]:
        rows, last = [], None
        for number, line, mark in self.excerpt():
            if last is not None and number > last + 1:
                rows.append("        …")
            rows.append(mark_line(number, line, mark))
            last = number
        return rows

    def text(self) -> str:
        if not self.result.available:
            return f"PTX of {self.result.name}: not available here — {self.result.reason}"
        head = f"PTX of {self.result.name} (cc {PTX_CC[0]}.{PTX_CC[1]}): {self.test.summary()}"
        rows = self._rows(lambda n, line, mark: f"{'►' if mark else ' '} {n:4d}  {line}")
        return "\n".join([head, *rows])

    __repr__ = text

    def _repr_html_(self) -> str:
        name = html.escape(self.result.name)
        if not self.result.available:
            return f"<p><b>PTX of {name}</b>: not available here — {html.escape(self.result.reason)}</p>"

        def mark_line(number, line, mark):
            text = f"{number:4d}  {html.escape(line)}"
            return f"<b style='background:#F0E442;color:#000'>► {text}</b>" if mark else f"  {text}"

        rows = "\n".join(self._rows(mark_line))
        return f"<p><b>PTX of {name}</b>: {html.escape(self.test.summary())}</p><pre>{rows}</pre>"


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


def show_ptx(kernel: str = "two_paths") -> PtxView:
    """The PTX of ``two_paths`` or ``predicated`` around its flag test, the deciding lines marked."""
    validate.choice("kernel", kernel, ("two_paths", "predicated"))
    real, trivial = _evidence_results()
    return PtxView(real if kernel == "two_paths" else trivial)


# --- measurement (GPU) --------------------------------------------------------------------------


def _sample_check(out, flags, x, body_a, body_b, samples: int = 2048) -> bool:
    """Compare a random sample of outputs with the NumPy reference (the full reference is slow)."""
    idx = np.random.default_rng(1).choice(flags.size, size=min(samples, flags.size), replace=False)
    got = np.asarray(out.copy_to_host() if hasattr(out, "copy_to_host") else out)[idx]
    want = reference_two_paths(flags[idx], x[idx], body_a, body_b)
    return bool(np.allclose(got, want, rtol=1e-4, atol=1e-5))


def measure_fraction_curve(body_a: int, body_b: int, *, placements=PLACEMENTS, fractions=SWEEP_FRACTIONS,
                           n_threads: int = GPU_THREADS, kernel: str = "two_paths",
                           min_total_ms: float = 500.0, progress=None) -> pd.DataFrame:
    """On a GPU: time of ``kernel`` at each fraction and placement (one run), and relative to fraction 1."""
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
    rows = []
    for step, (placement, f) in enumerate(points):
        flags = lane_flags(n, f, placement)
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
            "min_ms": m.min_ms, "n_samples": m.n_samples, "model_relative_time": model,
        })
        if progress:
            progress((step + 1) / len(points))
    frame = pd.DataFrame(rows)
    frame["relative_time"] = frame.median_ms / frame[frame.fraction == 1.0].median_ms.median()
    return frame


@reference.register_sweep(
    "divergence.fraction", lesson="02_divergence",
    columns=("kernel", "placement", "fraction", "body_a", "body_b", "median_ms", "relative_time"),
    description="two_paths: time vs fraction of lanes on path A per placement (path A 16/128/1024 FMAs, "
                "path B the same or 1/16); the trivially predicated kernel",
)
def _fraction_sweep() -> pd.DataFrame:
    frames = [measure_fraction_curve(body_a, path_b_body(body_a, path_b))
              for body_a in BODY_COSTS for path_b in ("same", "cheap")]
    frames.append(measure_fraction_curve(1, 1, kernel="predicated", placements=("interleaved", "clustered")))
    return pd.concat(frames, ignore_index=True)


def _recorded_curve(body_a: int, body_b: int, kernel: str = "two_paths"):
    rec = reference.load("divergence.fraction")
    if rec is None:
        return None, None
    d = rec.data
    if kernel == "two_paths":
        d = d[(d.kernel == kernel) & (d.body_a == body_a) & (d.body_b == body_b)]
    else:
        d = d[d.kernel == kernel]
    return (d if len(d) else None), rec


@functools.lru_cache(maxsize=16)
def _live_curve(body_a: int, body_b: int) -> pd.DataFrame:
    return measure_fraction_curve(body_a, body_b, min_total_ms=30.0)


def _needs_gpu(what: str) -> None:
    if not runtime.is_gpu():
        raise NoGPU(f"{what} needs a GPU and this is the simulator; the charts show recorded data instead")


def _sparse_data(n_threads: int, density: float, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Data with zeros at random places: (flags = non-zero, x)."""
    flags = lane_flags(n_threads, density, "random", seed)
    x = np.random.default_rng(seed + 1).random(flags.size, dtype=np.float32) * flags
    return flags, x.astype(np.float32)


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


# --- figures -----------------------------------------------------------------------------------

_STATE_COLOURS = {0: "#DDDDDD", 1: charts.PALETTE[0], 2: charts.PALETTE[1]}


def _room_for_two_legend_rows(fig: go.Figure) -> go.Figure:
    """More room above the plot, where the course's layout puts the legend, for two rows of it."""
    fig.update_layout(height=(fig.layout.height or 420) + 40, margin={"t": 140})
    return fig


def _source_or_none(data, rec, missing: str) -> str:
    if data is not None:
        return charts.source_caption("recorded", rec.caption())
    return charts.source_caption(
        "none", f"no GPU here and no recording of this sweep yet (`make record` on a GPU makes one); "
                f"{missing}")


def warp_timeline_figure(fraction: float = 0.5, placement: str = "interleaved", body_a: int = 4,
                         body_b: int = 4, warps: int = 2) -> go.Figure:
    """The concept: each warp issues path A (if any lane wants it) then path B; other lanes sit masked."""
    f, placement = check_fraction(fraction), check_placement(placement)
    body_a, body_b = check_body("path A cost", body_a, minimum=1), check_body("path B cost", body_b)
    warps = validate.integer("warps", warps, minimum=1, maximum=8)
    if body_a + body_b > 64:
        raise InvalidConfig(f"the picture draws at most 64 issue slots per warp; got {body_a} + {body_b}")
    flags = lane_flags(warps * WARP_SIZE, f, placement).astype(bool).reshape(warps, WARP_SIZE)
    slots = body_a + body_b
    z = np.full((warps * WARP_SIZE, slots), np.nan)  # NaN: the warp has finished
    used = []
    for w in range(warps):
        col = 0
        for on_path, body, state in ((flags[w], body_a, 1), (~flags[w], body_b, 2)):
            if on_path.any() and body:
                z[w * WARP_SIZE:(w + 1) * WARP_SIZE, col:col + body] = np.where(on_path, state, 0)[:, None]
                col += body
        used.append(col)
    busy = 100 * np.sum(z > 0) / (WARP_SIZE * sum(used))
    span = f"{min(used)}" if min(used) == max(used) else f"{min(used)}–{max(used)}"
    fig = charts.figure(
        f"{placement.capitalize()}, {f:.0%} of lanes on A: {span} issue slots per warp, "
        f"{busy:.0f} % of lanes busy",
        "issue slot (time →)", "warp · lane",
        charts.source_caption("model", f"a warp issues each path any of its lanes takes, one after the other "
                                       f"(path A {body_a} slots, path B {body_b})"),
        height=220 + 8 * warps * WARP_SIZE // 2,
    )
    labels = np.array(["masked (idle)", "path A", "path B"], dtype=object)
    text = np.where(np.isnan(z), "finished", labels[np.nan_to_num(z).astype(int)])
    fig.add_heatmap(
        z=z, x=list(range(slots)), y=[f"w{w}·{lane:02d}" for w in range(warps) for lane in range(WARP_SIZE)],
        colorscale=[[0, _STATE_COLOURS[0]], [0.5, _STATE_COLOURS[1]], [1, _STATE_COLOURS[2]]],
        zmin=0, zmax=2, showscale=False, xgap=1, customdata=text, name="lane state",
        hovertemplate="%{y}, slot %{x}: %{customdata}<extra></extra>",
    )
    # each entry its own symbol, and A and B named by when they run (A first): not colour alone
    for state, label, symbol in ((1, "path A (active, issued first)", "square"),
                                 (2, "path B (active, issued after A)", "diamond"),
                                 (0, "masked lane (idle)", "circle")):
        fig.add_scatter(x=[None], y=[None], mode="markers", name=label,
                        marker={"symbol": symbol, "size": 12, "color": _STATE_COLOURS[state],
                                "line": {"color": "#000", "width": 1}})
    for w in range(1, warps):
        fig.add_hline(y=w * WARP_SIZE - 0.5, line_color="#000", line_width=2)
    fig.update_yaxes(autorange="reversed", dtick=8)
    return fig


def fraction_figure(fraction: float = 0.5, placement: str = "interleaved", body_cost: int = 128,
                    path_b: str = "same", progress=None) -> go.Figure:
    """Time vs fraction of lanes on path A, one curve per placement — measured (GPU) or recorded —
    each beside its model; the chosen fraction and placement are marked."""
    f, placement = check_fraction(fraction), check_placement(placement)
    body_a = check_body("body cost", body_cost, minimum=1)
    body_b = path_b_body(body_a, path_b)
    if runtime.is_gpu():
        data = _live_curve(body_a, body_b)
        source = charts.source_caption("measured", f"{runtime.device().name}, {GPU_THREADS:,} threads, "
                                                   f"quick samples (≥ 30 ms of GPU time per point)")
        kind = "measured"
    else:
        if body_a not in BODY_COSTS:
            raise InvalidConfig(f"body cost must be one of {BODY_COSTS} without a GPU (the recorded sweep); "
                                f"got {body_a}")
        data, rec = _recorded_curve(body_a, body_b)
        source, kind = _source_or_none(data, rec, "the dotted lines are the model"), "recorded"
    b_text = {"same": "the same work", "cheap": f"{body_b} FMAs", "none": "nothing"}[path_b]
    fig = charts.figure(f"Time vs lanes on path A (path A {body_a} FMAs; path B {b_text})",
                        "fraction of lanes on path A", "time ÷ time with every lane on A (×)", source)
    model = model_curves(body_a, body_b)
    for index, name in enumerate(PLACEMENTS):
        opacity = 1.0 if name == placement else 0.4
        m = model[model.placement == name]
        charts.line(fig, m.fraction, m.relative_time, f"model: {name}", index, dash="dot", opacity=opacity)
        if data is not None:
            d = data[data.placement == name].sort_values("fraction")
            charts.line(fig, d.fraction, d.relative_time, f"{kind}: {name}", index, dash="solid",
                        opacity=opacity)
    predicted = model_relative_time(lane_flags(MODEL_THREADS, f, placement), body_a, body_b)
    note = f"{placement}, f = {f:.3g}: model {predicted:.2f}×"
    if data is not None:
        d = data[data.placement == placement]
        nearest = d.iloc[(d.fraction - f).abs().argsort()[:1]]
        at, ratio = float(nearest.fraction.iloc[0]), float(nearest.relative_time.iloc[0])
        note += f"; {kind} at f = {at:.3g}: {ratio:.2f}×"
    else:
        charts.no_data(fig, "No GPU timing to show: the dotted lines are the model")
    fig.add_vline(x=f, line_dash="dash", line_color="#000", opacity=0.5)
    fig.update_layout(title_text=f"{fig.layout.title.text}<br><sup>{html.escape(note)}</sup>")
    fig.update_yaxes(rangemode="tozero")
    return _room_for_two_legend_rows(fig)


def predicated_figure() -> go.Figure:
    """The trivial branch: interleaved vs clustered lanes at each fraction (measured or recorded)."""
    if runtime.is_gpu():
        data = measure_fraction_curve(1, 1, kernel="predicated", placements=("interleaved", "clustered"),
                                      min_total_ms=30.0)
        source = charts.source_caption("measured", f"{runtime.device().name}, {GPU_THREADS:,} threads")
    else:
        data, rec = _recorded_curve(1, 1, kernel="predicated")
        source = _source_or_none(data, rec, "the dotted line is what the PTX predicts (no branch, no gap)")
    fig = charts.figure("A trivial branch compiled to a select: no divergence gap expected",
                        "fraction of lanes on path A", "time ÷ time with every lane on A (×)", source)
    ones = [1.0] * len(SWEEP_FRACTIONS)
    charts.line(fig, SWEEP_FRACTIONS, ones, "model: no branch, so no gap", 2, dash="dot")
    if data is not None:
        for index, name in enumerate(("interleaved", "clustered")):
            d = data[data.placement == name].sort_values("fraction")
            charts.line(fig, d.fraction, d.relative_time, name, index, dash="solid")
    else:
        charts.no_data(fig, "No GPU timing to show")
    fig.update_yaxes(rangemode="tozero")
    return fig


def sort_pays_figure(density: float = 1 / 32) -> go.Figure:
    """Speed-up of sorting (or compacting) first, preprocessing included, vs path A's cost."""
    if runtime.is_gpu():
        density = validate.number("density", density, minimum=1 / 1024, maximum=1.0)
        data = measure_sort_pays(density, min_total_ms=50.0)
        source = charts.source_caption("measured", f"{runtime.device().name}, {GPU_THREADS:,} elements")
    else:
        density = validate.choice("density", density, SPARSE_DENSITIES)
        rec = reference.load("divergence.sort_pays")
        data = None if rec is None else rec.data[np.isclose(rec.data.density, density)]
        data = data if data is not None and len(data) else None
        source = _source_or_none(data, rec, "the dotted line is a model upper bound (branch bodies only)")
    fig = charts.figure(f"Sparse data, {density:.3g} non-zero: speed-up from sorting first",
                        "path A cost (FMA iterations)", "unsorted time ÷ time with the fix (×)", source)
    flags = lane_flags(MODEL_THREADS, density, "random")
    ideal = (warp_table(flags).lanes_a > 0).sum() / max(1, math.ceil(flags.sum() / WARP_SIZE))
    charts.line(fig, SPARSE_BODIES, [ideal] * len(SPARSE_BODIES),
                "model upper bound: branch bodies only (approached when path A dominates)", 2, dash="dot")
    charts.line(fig, SPARSE_BODIES, [1.0] * len(SPARSE_BODIES),
                "break-even (1×): below it the fix costs more than it saves", 7, dash="dash")
    if data is not None:
        charts.line(fig, data.body_a, data.sort_speedup, "sort, then run (argsort + remapped kernel)", 0)
        charts.line(fig, data.body_a, data.compact_speedup, "compact, then run (non-zeros only)", 1)
    else:
        charts.no_data(fig, "No GPU timing to show: the sort's own cost can only be measured")
    fig.update_layout(showlegend=True)
    fig.update_xaxes(type="log")
    fig.update_yaxes(type="log")
    return _room_for_two_legend_rows(fig)


# --- the microscope ------------------------------------------------------------------------------

MICROSCOPE_THREADS = 256
MICROSCOPE_BODY = 4
BODY_LINES = "v = v * np.float32"  # source text shared by the two loop bodies of two_paths


def trace_flags(flags, body_a: int = MICROSCOPE_BODY, body_b: int = MICROSCOPE_BODY, block: int = 64,
                remapped: bool = False):
    """The microscope's report of one small launch of ``two_paths`` (or, with ``remapped``, of
    ``two_paths_remapped`` over ``sorted_order``) on these flags; the result is checked too."""
    from gpucourse.microscope import trace

    flags, x, n, body_a, body_b = _host_inputs(flags, None, body_a, body_b)
    if n > 1024:
        raise InvalidConfig(f"trace at most 1024 threads of this kernel here (the counts per warp do not "
                            f"depend on the size); got {n}")
    block = validate.block(block)[0]
    out = np.full(n, np.nan, dtype=np.float32)
    if remapped:
        order = sorted_order(flags)
        report = trace(two_paths_remapped, blocks_for(n, block), block, order, flags, x, out, body_a, body_b)
    else:
        report = trace(two_paths, blocks_for(n, block), block, flags, x, out, body_a, body_b)
    if not np.allclose(out, reference_two_paths(flags, x, body_a, body_b), rtol=1e-4, atol=1e-5):
        raise WrongResult("two_paths gave a wrong result under the microscope")
    return report


def trace_two_paths(fraction: float, placement: str, body_a: int = MICROSCOPE_BODY,
                    body_b: int = MICROSCOPE_BODY, n_threads: int = MICROSCOPE_THREADS):
    """The microscope's report of a small ``two_paths`` launch with this fraction and placement."""
    return trace_flags(lane_flags(n_threads, fraction, placement), body_a, body_b)


def body_efficiency(report) -> float:
    """The microscope's SIMT efficiency over the two loop bodies of ``two_paths`` (NaN if neither ran)."""
    try:
        return float(report.simt_efficiency(line=BODY_LINES))
    except InvalidConfig:
        return float("nan")


def simt_table(fraction: float = 0.5, body_a: int = MICROSCOPE_BODY, body_b: int = MICROSCOPE_BODY,
               n_threads: int = MICROSCOPE_THREADS) -> pd.DataFrame:
    """Per placement: SIMT efficiency counted by the microscope (whole kernel; loop bodies); model."""
    rows = []
    for placement in PLACEMENTS:
        flags = lane_flags(n_threads, fraction, placement)
        report = trace_flags(flags, body_a, body_b)
        rows.append({
            "placement": placement, "counted_kernel": float(report.simt_efficiency()),
            "counted_bodies": body_efficiency(report),
            "model_bodies": model_simt_efficiency(flags, body_a, body_b),
            "max_paths_per_warp": report.paths(),
        })
    return pd.DataFrame(rows)


def simt_figure(fraction: float = 0.5, path_b: str = "same") -> go.Figure:
    """SIMT efficiency of the branch bodies per placement, counted by the microscope, beside the model."""
    f = check_fraction(fraction)
    body_b = {"same": MICROSCOPE_BODY, "cheap": 1, "none": 0}[validate.choice("path B", path_b, PATH_B)]
    table = simt_table(f, MICROSCOPE_BODY, body_b)
    fig = charts.figure(
        f"SIMT efficiency of the loop bodies, {f:.3g} of lanes on A ({MICROSCOPE_THREADS} threads)",
        "placement", "SIMT efficiency (active lanes ÷ 32)", charts.source_caption(
            "counted", f"one launch of two_paths, path A {MICROSCOPE_BODY} FMAs, path B {body_b}; "
                       f"hatched bars: the model"))
    fig.add_bar(x=list(table.placement), y=list(table.counted_bodies), name="counted by the microscope",
                marker={"color": charts.PALETTE[0]}, text=[f"{v:.2f}" if v == v else "" for v in table.counted_bodies],
                textposition="outside")
    for placement, value in zip(table.placement, table.counted_bodies, strict=True):
        if value != value:  # NaN: e.g. 1/32 of 8 warps rounds to no whole warp on A, and B is empty
            fig.add_annotation(x=placement, y=0.05, text="no lane ran a body", showarrow=False)
    fig.add_bar(x=list(table.placement), y=list(table.model_bodies), name="model",
                marker={"color": charts.PALETTE[1], "pattern": {"shape": "/"}})
    fig.update_layout(barmode="group")
    fig.update_yaxes(range=[0, 1.05])
    return fig


def lanes_picture(fraction: float = 0.5, placement: str = "interleaved", warp: int = 0):
    """The microscope's active-lane picture of one warp of a small ``two_paths`` launch."""
    warp = validate.integer("warp", warp, minimum=0, maximum=MICROSCOPE_THREADS // WARP_SIZE - 1)
    report = trace_two_paths(fraction, placement, body_a=2, body_b=2)
    return report.picture_lanes(warp=warp % 2, block=warp // 2)


def sparse_table(n_threads: int = 1024, density: float = 1 / 32, body: int = 8,
                 seed: int = 10) -> pd.DataFrame:
    """Sparse data (path A on the non-zeros, nothing on the zeros) under the microscope, as written
    and sorted first: SIMT efficiency and warp-issues of the loop bodies, warps that issue path A."""
    body = check_body("path A cost", body, minimum=1)
    flags = lane_flags(n_threads, density, "random", seed)
    rows = []
    versions = (("as written", False, flags), ("sorted first", True, flags[sorted_order(flags)]))
    for version, remapped, arranged in versions:
        report = trace_flags(flags, body, 0, remapped=remapped)
        branches = report.branches()
        body_rows = branches[branches.source.str.contains(BODY_LINES, regex=False)]
        rows.append({
            "version": version, "non-zeros": int(flags.sum()), "warps": flags.size // WARP_SIZE,
            "warps issuing path A": int((_lanes_on_a(arranged) > 0).sum()),
            "body issues (counted)": int(body_rows.issues.sum()),
            "SIMT efficiency of the bodies (counted)": round(body_efficiency(report), 3),
        })
    return pd.DataFrame(rows)


# --- the folklore, tested ----------------------------------------------------------------------


def _recorded_ratio(body_a: int, body_b: int, placement: str, fraction: float) -> str:
    data, rec = _recorded_curve(body_a, body_b)
    if data is None:
        return "no recording yet"
    row = data[(data.placement == placement) & np.isclose(data.fraction, fraction)]
    return f"{float(row.relative_time.iloc[0]):.2f}× ({rec.device})" if len(row) else "not in the recording"


def claims(body_a: int = 128) -> pd.DataFrame:
    """The source texts' claims: what the model predicts, what the microscope counts (exactly), and
    the recorded GPU ratio where a recording exists. Times are ÷ every lane on path A."""
    body_a = validate.choice("body cost", body_a, BODY_COSTS)
    first_half = (np.arange(64) % WARP_SIZE < 16).astype(np.uint8)  # threadIdx.x < 16 in 32-thread blocks
    lanes_28 = (np.arange(64) % WARP_SIZE < 28).astype(np.uint8)  # 28 lanes one way, 4 the other
    cheap = path_b_body(body_a, "cheap")
    cases = [
        ("`if (threadIdx.x < 16)` halves throughput", "else does the same work", first_half, body_a,
         ("interleaved", 0.5, body_a)),
        ("(the same, with an empty else)", "16 lanes work, 16 wait", first_half, 0, None),
        ("28 of 32 lanes on one path still costs 2×", "both paths the same work", lanes_28, body_a,
         ("interleaved", 7 / 8, body_a)),
        ("(the same, the 4 lanes' path cheap)", f"path B {cheap} FMAs", lanes_28, cheap,
         ("interleaved", 7 / 8, cheap)),
    ]
    rows = []
    for claim, setup, flags, body_b, recorded in cases:
        report = trace_flags(flags, 16, round(16 * body_b / body_a), block=32)  # same ratio, fewer FMAs
        rows.append({
            "claim": claim, "setup": setup,
            "model: time (×)": round(model_relative_time(flags, body_a, body_b), 3),
            "microscope: SIMT efficiency of the bodies": round(body_efficiency(report), 3),
            "microscope: paths per warp": report.paths(),
            "GPU: recorded time (×)": _recorded_ratio(body_a, recorded[2], recorded[0], recorded[1])
            if recorded else "—",
        })
    return pd.DataFrame(rows)


# --- widgets (the notebook displays these) ---------------------------------------------------


def _fraction_slider(value: float = 0.5):
    import ipywidgets as w

    return w.FloatSlider(value=value, min=0.0, max=1.0, step=1 / 32, description="on path A",
                         readout_format=".3f", continuous_update=False)


def _placement_dropdown(value: str = "interleaved"):
    import ipywidgets as w

    return w.Dropdown(options=list(PLACEMENTS), value=value, description="placement")


def timeline_chart(threaded: bool = True):
    """Fraction and placement → the issue-slot picture of two warps."""
    from gpucourse.viz.widgets import LiveChart

    return LiveChart({"fraction": _fraction_slider(), "placement": _placement_dropdown()},
                     compute=warp_timeline_figure, threaded=threaded,
                     description="Each row is a lane, each column one issue slot; grey lanes are masked.")


def fraction_chart(threaded: bool = True):
    """Fraction, placement, path A's cost and path B's → time vs fraction, model beside measurement."""
    import ipywidgets as w

    from gpucourse.viz.widgets import LiveChart

    return LiveChart(
        {
            "fraction": _fraction_slider(),
            "placement": _placement_dropdown(),
            "body_cost": w.SelectionSlider(options=list(BODY_COSTS), value=128, description="path A FMAs",
                                           continuous_update=False),
            "path_b": w.Dropdown(options=list(PATH_B), value="same", description="path B"),
        },
        compute=fraction_figure, threaded=threaded,
        description="Time of the two-path kernel vs the share of lanes on path A; one curve per placement.",
    )


def simt_chart(threaded: bool = True):
    """Fraction and path B → SIMT efficiency per placement, counted by the microscope and modelled."""
    import ipywidgets as w

    from gpucourse.viz.widgets import LiveChart

    return LiveChart({"fraction": _fraction_slider(),
                      "path_b": w.Dropdown(options=list(PATH_B), value="same", description="path B")},
                     compute=simt_figure, threaded=threaded,
                     description="The microscope runs two_paths once per placement and counts active lanes.")


def lanes_chart(threaded: bool = True):
    """Fraction, placement and warp → the microscope's active-lane picture of that warp."""
    import ipywidgets as w

    from gpucourse.viz.widgets import LiveChart

    return LiveChart({"fraction": _fraction_slider(), "placement": _placement_dropdown(),
                      "warp": w.BoundedIntText(value=0, min=0, max=MICROSCOPE_THREADS // WARP_SIZE - 1,
                                               description="warp")},
                     compute=lanes_picture, threaded=threaded,
                     description="Each line one warp executed (rows, in order) and which lanes took part.")
