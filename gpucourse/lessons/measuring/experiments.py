"""Lesson 00 "Start here: measuring GPU code":
host runners, microscope traces, GPU sweeps and their recording registration."""

from __future__ import annotations

import threading
import time

import numpy as np
import pandas as pd
from numba import cuda  # after gpucourse.measure.runtime (imported by the package) chose the mode

from gpucourse import validate
from gpucourse.lessons.measuring.kernels import _spin_kernel
from gpucourse.measure import reference, runtime
from gpucourse.measure.harness import measure

# One dependent fp32 FMA per iteration: 4 cycles of latency each would make ~2 ms at ~2 GHz, but an H200
# took 11 ms (data/reference/nvidia-h200/quick/measuring.async_pitfall.csv): the loop costs more than its FMA.
SPIN_ITERATIONS = 1_000_000
SPIN_BLOCKS, SPIN_THREADS = 132, 256  # one block per SM of an H100/H200 SXM, 8 warps each


def async_pitfall(iterations: int = SPIN_ITERATIONS) -> pd.DataFrame:
    """On a GPU: one kernel timed by the launch's wall clock, wall clock + sync, and events."""
    iterations = validate.integer("iterations", iterations, minimum=1, maximum=10**8)
    if not runtime.is_gpu():
        raise validate.InvalidConfig("async_pitfall times a GPU; in simulator mode use async_analogy()")
    spin = _spin_kernel()
    launch = spin[SPIN_BLOCKS, SPIN_THREADS]
    out = cuda.device_array(SPIN_BLOCKS * SPIN_THREADS, dtype=np.float32)
    launch(out, iterations)  # compile
    cuda.synchronize()
    rows = []
    for _ in range(5):
        t0 = time.perf_counter()
        launch(out, iterations)
        launch_ms = (time.perf_counter() - t0) * 1e3
        cuda.synchronize()
        t0 = time.perf_counter()
        launch(out, iterations)
        cuda.synchronize()
        synced_ms = (time.perf_counter() - t0) * 1e3
        rows += [{"method": "wall clock, launch only", "ms": launch_ms},
                 {"method": "wall clock + synchronize", "ms": synced_ms}]
    m = measure(lambda: launch(out, iterations), label="spin kernel")
    rows += [{"method": "device events (harness median)", "ms": s} for s in m.samples_ms]
    return pd.DataFrame(rows)


@reference.register_sweep(
    "measuring.async_pitfall", lesson="00_measuring", columns=("method", "ms"),
    description="one kernel timed by launch wall clock, wall clock + sync, and events",
)
def _async_sweep() -> pd.DataFrame:
    return async_pitfall()


def async_analogy(work_ms: float = 200.0) -> pd.DataFrame:
    """The trap without a GPU: 'launch' work on a background thread and time it like a kernel."""
    work_ms = validate.number("work_ms", work_ms, minimum=1, maximum=5000)
    done = threading.Event()

    def work():
        time.sleep(work_ms / 1e3)  # stands in for the GPU running the kernel
        done.set()

    t0 = time.perf_counter()
    threading.Thread(target=work, daemon=True).start()  # like a kernel launch: returns at once
    launch_ms = (time.perf_counter() - t0) * 1e3
    done.wait()  # like cuda.synchronize()
    synced_ms = (time.perf_counter() - t0) * 1e3
    return pd.DataFrame([{"method": "wall clock, launch only", "ms": launch_ms},
                         {"method": "wall clock + wait", "ms": synced_ms}])


# --- ceilings and the roofline ------------------------------------------------------------------


ROOF_PRECISIONS = ("bf16", "fp16", "fp32")
_PROBE_DTYPE = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}


def tensor_precision(cc) -> tuple[str, str]:
    """(the tensor-core format the roofline draws for compute capability ``cc``, why): bf16 from Ampere
    (cc 8.0) on; fp16 before, because Turing's tensor cores take fp16 but not bf16 (Turing whitepaper;
    a bf16 matmul there runs on the CUDA cores, far below the fp16 tensor-core roof)."""
    cc = tuple(cc)
    if cc >= (8, 0):
        return "bf16", f"cc {cc[0]}.{cc[1]} has bf16 tensor cores (Ampere and later)"
    return "fp16", (f"cc {cc[0]}.{cc[1]} has no bf16 tensor cores (they came with Ampere, cc 8.0): a bf16 matmul "
                    "would run on the CUDA cores, so the roof uses fp16, the tensor-core format this GPU has")


def roof_precisions() -> tuple[list[str], str]:
    """(the roofline's precision choices, tensor format first; why that format): this GPU's on a GPU,
    the reference H200's (bf16) without one."""
    if runtime.is_gpu():
        first, why = tensor_precision(runtime.device().compute_capability)
    else:
        first, why = "bf16", "no GPU here: the charts show an H200 (cc 9.0), whose tensor cores take bf16"
    return [first, "fp32"], why


def ceilings(precisions=None) -> pd.DataFrame:
    """This GPU's measured ceilings beside the datasheet (GPU only): the copy bandwidth and the library
    matmul of each requested precision (default: fp32 and this GPU's tensor format), nothing else.
    Without torch the matmul rows are not measured (NaN; ``probe.TORCH_MISSING`` says why) and the
    copy row still is."""
    from gpucourse.measure import ceilings as probe

    info = runtime.device()
    if precisions is None:
        precisions = ("fp32", tensor_precision(info.compute_capability)[0])
    precisions = [validate.choice("precision", p, list(ROOF_PRECISIONS)) for p in precisions]
    sheet = runtime.datasheet_tflops(info.name)
    rows = [{"quantity": "copy bandwidth", "unit": "GB/s", "measured": probe.copy_gbps(),
             "datasheet": info.datasheet_bandwidth_gbps}]
    for precision in dict.fromkeys(precisions):
        rows.append({"quantity": f"{precision} matmul", "unit": "TFLOP/s",
                     "measured": probe.matmul_tflops(_PROBE_DTYPE[precision]), "datasheet": sheet.get(precision)})
    for row in rows:
        row["measured"] = float("nan") if row["measured"] is None else row["measured"]
    return pd.DataFrame(rows)


@reference.register_sweep(
    "measuring.ceilings", lesson="00_measuring", columns=("quantity", "unit", "measured", "datasheet"),
    description="device-to-device copy GB/s and fp32 and bf16 (fp16 before cc 8.0) library matmul TFLOP/s vs "
                "the datasheet",
)
def _ceilings_sweep() -> pd.DataFrame:
    return ceilings()
