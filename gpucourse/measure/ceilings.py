"""The device's measured ceilings: what a large copy and a large library matmul really reach.

Charts draw these as the "physical limit" lines beside the datasheet figure. Measured once
per device and driver, cached in ~/.cache/gpucourse/ceilings.json (delete it to re-measure).
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

from gpucourse.errors import NoGPU
from gpucourse.measure import runtime

CACHE_PATH = Path(os.environ.get("GPUCOURSE_CACHE", Path.home() / ".cache" / "gpucourse")) / "ceilings.json"
COPY_BYTES = 1 << 30  # 1 GiB each way: far beyond any L2
MATMUL_N = 8192


def _cache_key() -> str:
    info = runtime.device()
    return f"{info.slug}|driver {info.driver_version}"


def _load() -> dict:
    try:
        return json.loads(CACHE_PATH.read_text())
    except (OSError, ValueError):
        return {}


_FRESH: list[set[str]] = []  # inside fresh(): the ceilings already measured again


@contextlib.contextmanager
def fresh():
    """Inside the block each ceiling is measured again the first time it is asked for: a recording
    never carries a ceiling cached on another day, under another load or stack (``make record``).
    Nested blocks share the outer one's (gpu-report records sweep by sweep: measured once per report)."""
    if _FRESH:
        yield
        return
    _FRESH.append(set())
    try:
        yield
    finally:
        _FRESH.pop()


# A report's fresh ceilings, handed to its child processes (the GPU tier's pytest): JSON {device key: {name: value}}.
# The tier then compares with the very ceiling the report measured and records, never a cached one (issue 48, P4).
HANDED_ON_ENV = "GPUCOURSE_FRESH_CEILINGS"


def _handed_on(name: str) -> float | None:
    try:
        table = json.loads(os.environ.get(HANDED_ON_ENV) or "{}")
    except ValueError:
        return None
    value = table.get(_cache_key(), {}).get(name) if isinstance(table, dict) else None
    return float(value) if isinstance(value, (int, float)) else None


def hand_on() -> dict[str, str]:
    """The environment a child process needs to use this process's copy ceiling (inside ``fresh()``: measured
    now, once): ``{HANDED_ON_ENV: ...}``, keyed by device and driver so another GPU never takes it."""
    return {HANDED_ON_ENV: json.dumps({_cache_key(): {"copy_gbps": copy_gbps()}})}


def _cached(name: str, measure_fn, refresh: bool) -> float:
    if not runtime.is_gpu():
        raise NoGPU("ceilings are measured on a GPU; in simulator mode charts use recorded ceilings")
    handed = None if refresh else _handed_on(name)
    if handed is not None:
        return handed
    cache = _load()
    entry = cache.setdefault(_cache_key(), {})
    if _FRESH and name not in _FRESH[-1]:
        refresh = True
        _FRESH[-1].add(name)
    if refresh or name not in entry:
        entry[name] = measure_fn()
        CACHE_PATH.parent.mkdir(parents=True, exist_ok=True)
        CACHE_PATH.write_text(json.dumps(cache, indent=2))
    return float(entry[name])


def measure_copy_gbps(nbytes: int = COPY_BYTES, *, min_total_ms: float = 500.0) -> float:
    """Device-to-device copy bandwidth, counting bytes read plus bytes written."""
    import cupy

    from gpucourse.measure.harness import measure

    nbytes = min(nbytes, runtime.free_memory_bytes() // 4)
    src = cupy.random.random(nbytes // 4, dtype=cupy.float32)
    dst = cupy.empty_like(src)

    def run():
        cupy.cuda.runtime.memcpyAsync(dst.data.ptr, src.data.ptr, src.nbytes, 3, 0)  # 3: device→device

    m = measure(run, label="device-to-device copy", check=lambda: bool((dst[:1024] == src[:1024]).all()),
                bytes_moved=2 * src.nbytes, min_total_ms=min_total_ms)
    return m.gbps


def measure_matmul_tflops(dtype: str = "float32", n: int = MATMUL_N) -> float:
    """A large library (cuBLAS through torch) matmul on random data; fp32 with TF32 off."""
    import torch

    from gpucourse.measure.harness import measure
    from gpucourse.measure.torch_precision import matmul_tf32

    torch_dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[dtype]

    with matmul_tf32(False):
        a = torch.randn(n, n, device="cuda", dtype=torch_dtype)
        b = torch.randn(n, n, device="cuda", dtype=torch_dtype)
        c = torch.empty(n, n, device="cuda", dtype=torch_dtype)
        m = measure(lambda: torch.matmul(a, b, out=c), label=f"{dtype} matmul {n}³",
                    check=lambda: bool(torch.isfinite(c[:8, :8]).all()), flops=2 * n**3)
    return m.tflops


TORCH_MISSING = ("the library matmul ceiling was not measured: it is timed through torch (cuBLAS), "
                 "and torch is not installed here")


def torch_available() -> bool:
    """Whether torch imports here (a site's CUDA stack may have CuPy and numba-cuda but no torch)."""
    try:
        import torch  # noqa: F401
    except ImportError:
        return False
    return True


def copy_gbps(refresh: bool = False) -> float:
    return _cached("copy_gbps", measure_copy_gbps, refresh)


def matmul_tflops(dtype: str = "float32", refresh: bool = False) -> float | None:
    """The library matmul ceiling in TFLOP/s; None on a GPU whose stack has no torch (``TORCH_MISSING``):
    callers skip that row with the note instead of failing the whole table or chart."""
    if runtime.is_gpu() and not torch_available():
        return None
    return _cached(f"matmul_{dtype}_tflops", lambda: measure_matmul_tflops(dtype), refresh)
