"""Lesson 02 "Warp divergence": the hardware model, counted quantities, and the checks and helpers the runners share."""

from __future__ import annotations

import functools
import hashlib
import inspect
import json
import os
import re
import textwrap
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

import numpy as np
import pandas as pd

from gpucourse import validate
from gpucourse.errors import InvalidConfig, WrongResult
from gpucourse.hardware import WARP_SIZE
from gpucourse.lessons.divergence.kernels import two_paths, two_paths_remapped
from gpucourse.measure import reference, runtime

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
MODEL_FRACTIONS = tuple(k / 32 for k in range(33))
BLOCK_THREADS = 256
MAX_GPU_THREADS = 1 << 28
MODEL_THREADS = 1 << 15  # 1,024 warps: plenty for the model's averages
MAX_SIM_THREADS = 8192  # the simulator runs ~7,000 threads per second
MAX_BODY = 1 << 16

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


def sorted_order(flags, xp=np):
    """Element indices with every path-A element first (a stable partition): then warps agree.
    ``xp`` is NumPy (host arrays) or CuPy (GPU arrays; its argsort is always stable)."""
    keys = 1 - xp.asarray(flags, dtype=xp.int8)
    order = xp.argsort(keys, kind="stable") if xp is np else xp.argsort(keys)
    return order.astype(xp.int64)


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


def _sparse_data(n_threads: int, density: float, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Data with zeros at random places: (flags = non-zero, x)."""
    flags = lane_flags(n_threads, density, "random", seed)
    x = np.random.default_rng(seed + 1).random(flags.size, dtype=np.float32) * flags
    return flags, x.astype(np.float32)


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


def _gpu_ratio(body_a: int, body_b: int, placement: str, fraction: float, measured=None) -> str:
    """The GPU's time at (placement, fraction) ÷ every lane on path A: measured now by ``measured(body_a, body_b)``
    (the fraction chart's live curve, on a GPU), else from the course's recording."""
    if measured is not None:
        data, where = measured(body_a, body_b), "measured now"
    else:
        data, rec = _recorded_curve(body_a, body_b)
        if data is None:
            return "no recording yet"
        where = rec.device
    row = data[(data.placement == placement) & np.isclose(data.fraction, fraction)]
    if not len(row):
        return "not measured" if measured is not None else "not in the recording"
    return f"{float(row.relative_time.iloc[0]):.2f}× ({where})"


GPU_RECORDED_COLUMN = "GPU: recorded time (×)"
GPU_MEASURED_COLUMN = "GPU: time measured now (×)"


def claims_table(body_a: int = 128, measured=None) -> pd.DataFrame:
    """The source texts' claims: what the model predicts, what the microscope counts (exactly), and
    the GPU's ratio: measured now where ``measured(body_a, body_b)`` gives a curve (a GPU: the fraction
    chart's live data, gpu-mode review G19), else recorded where a recording exists. Times are ÷ every
    lane on path A."""
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
    column = GPU_MEASURED_COLUMN if measured is not None else GPU_RECORDED_COLUMN
    rows = []
    for claim, setup, flags, body_b, gpu in cases:
        report = trace_flags(flags, 16, round(16 * body_b / body_a), block=32)  # same ratio, fewer FMAs
        rows.append({
            "claim": claim, "setup": setup,
            "model: time (×)": round(model_relative_time(flags, body_a, body_b), 3),
            "microscope: SIMT efficiency of the bodies": round(body_efficiency(report), 3),
            "microscope: paths per warp": report.paths(),
            column: _gpu_ratio(body_a, gpu[2], gpu[0], gpu[1], measured) if gpu else "—",
        })
    return pd.DataFrame(rows)
