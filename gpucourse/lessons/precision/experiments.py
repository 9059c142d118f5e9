"""Lesson 07 "Mixed precision and tensor cores":
host runners, microscope traces, GPU sweeps and their recording registration."""

from __future__ import annotations

import functools

import pandas as pd

from gpucourse import validate
from gpucourse.errors import InvalidConfig, NoGPU
from gpucourse.lessons.precision import formats
from gpucourse.lessons.precision.model import (
    _TF32,
    MATMUL_DTYPES,
    _bytes_per_element,
    _matmul_fn,
    _torch_dtype,
    unsupported_dtypes,
)
from gpucourse.measure import gpuinfo, reference, runtime, torch_precision
from gpucourse.measure.harness import measure

LESSON = "07_precision"
SWEEP_SIZES = (1024, 2048, 4096, 8192)
VOCABS = (50257, 50304)  # GPT-2's vocabulary, and the same padded to a multiple of 64
VOCAB_TOKENS, VOCAB_HIDDEN = 8192, 768  # a batch of 8 × 1024 tokens through GPT-2 small's LM head


def fp8_supported() -> bool:
    """FP8 tensor cores: compute capability ≥ 8.9 (Ada, Hopper) and a scaled matmul in torch."""
    import torch

    return runtime.is_gpu() and runtime.device().compute_capability >= (8, 9) and torch_precision.has_scaled_mm(torch)


def _check_shape(m: int, n: int, k: int, dtype: str, device: str) -> tuple[int, int, int]:
    m, n, k = (validate.integer(name, v, minimum=1, maximum=1 << 17)
               for name, v in (("m", m), ("n", n), ("k", k)))
    if dtype == "fp8_e4m3" and (n % 16 or k % 16):
        raise InvalidConfig(f"fp8 matmuls (scaled_mm) need n and k divisible by 16; n={n}, k={k}")
    nbytes = (m * k + k * n) * _bytes_per_element(dtype) + m * n * 4
    validate.fits_in_memory(nbytes, runtime.free_memory_bytes() if device == "cuda" else None, "the matrices")
    return m, n, k


def measure_matmul(dtype: str, m: int, n: int | None = None, k: int | None = None, *, seed: int = 0):
    """Time ``torch.matmul`` (or scaled_mm for fp8) of (m×k)@(k×n) on the GPU with the harness.

    Inputs are random normal (never zeros: on zeros the GPU draws less power and can hold higher clocks;
    Horace He, "Strangely, Matrix Multiplications on GPUs Run Faster When Given 'Predictable' Data!", 2024);
    TFLOP/s from the counted 2·m·n·k. In simulator mode the harness returns measured=False.
    """
    import torch

    dtype = validate.choice("dtype", dtype, MATMUL_DTYPES)
    n, k = n or m, k or m
    if not runtime.is_gpu():
        return measure(lambda: None, label=f"{dtype} matmul {m}×{n}×{k}")  # not measured, says why
    if dtype == "fp8_e4m3" and not fp8_supported():
        raise NoGPU(f"fp8 tensor cores need compute capability ≥ 8.9; {runtime.device().name} has "
                    f"{runtime.device().compute_capability}")
    m, n, k = _check_shape(m, n, k, dtype, "cuda")
    gen = torch.Generator(device="cuda").manual_seed(seed)
    work_dtype = torch.bfloat16 if dtype == "fp8_e4m3" else _torch_dtype(dtype)
    a = torch.randn(m, k, device="cuda", generator=gen).to(work_dtype)
    b = torch.randn(k, n, device="cuda", generator=gen).to(work_dtype)
    with _TF32(dtype == "tf32"):
        run = _matmul_fn(dtype, a, b)
        out = {}

        def timed():
            out["c"] = run()

        def check():
            c = out["c"][:64, :64].double()
            ref = a[:64].double() @ b[:, :64].double()
            return bool(torch.isfinite(c).all()) and float((c - ref).norm() / ref.norm()) < 0.2

        result = measure(timed, label=f"{dtype} matmul {m}×{n}×{k}", check=check, flops=2 * m * n * k)
    return result


def matmul_sweep(sizes=SWEEP_SIZES, dtypes=MATMUL_DTYPES) -> pd.DataFrame:
    """TFLOP/s of square n³ matmuls by dtype and size (GPU only), each row with the SM clock and power draw
    sampled just before and after it (``gpuinfo.around``: NVML's clocks.sm and power.draw)."""
    if not runtime.is_gpu():
        raise NoGPU("the matmul sweep times tensor cores and needs a GPU; charts use the recording instead")
    rows = []
    missing = unsupported_dtypes(runtime.device().compute_capability)
    for dtype in dtypes:
        if dtype in missing or (dtype == "fp8_e4m3" and not fp8_supported()):
            continue  # labelled on the chart (unsupported_dtypes), never timed at another format's speed
        for n in sizes:
            m, board = gpuinfo.around(lambda dtype=dtype, n=n: measure_matmul(dtype, n))
            rows.append({"dtype": dtype, "n": n, "tflops": m.tflops, "median_ms": m.median_ms,
                         "iqr_ms": m.iqr_ms, "min_ms": m.min_ms, "n_samples": m.n_samples, **board})
    return pd.DataFrame(rows)


@reference.register_sweep(
    "precision.matmul", lesson=LESSON, columns=("dtype", "n", "tflops", "median_ms"),
    description="torch matmul TFLOP/s of n×n×n by dtype (fp32 TF32 off, tf32, fp16, bf16, fp8 scaled_mm)",
)
def _matmul_sweep() -> pd.DataFrame:
    return matmul_sweep()


def vocab_shape_sweep(vocabs=VOCABS, dtypes=("bf16", "fp16"), tokens: int = VOCAB_TOKENS,
                      hidden: int = VOCAB_HIDDEN) -> pd.DataFrame:
    """The LM head's matmuls with vocabulary V: forward (tokens×hidden)@(hidden×V) and the
    data-gradient (tokens×V)@(V×hidden), for V = 50257 and 50304 (GPU only)."""
    if not runtime.is_gpu():
        raise NoGPU("the vocabulary-shape measurement times tensor cores and needs a GPU")
    rows = []
    for dtype in dtypes:
        for vocab in vocabs:
            for name, (m, n, k) in (("forward: N = vocab", (tokens, vocab, hidden)),
                                    ("input gradient: K = vocab", (tokens, hidden, vocab))):
                meas, board = gpuinfo.around(lambda dtype=dtype, m=m, n=n, k=k: measure_matmul(dtype, m, n, k))
                rows.append({"dtype": dtype, "vocab": vocab, "pass": name, "m": m, "n": n, "k": k,
                             "tflops": meas.tflops, "median_ms": meas.median_ms, "iqr_ms": meas.iqr_ms,
                             "n_samples": meas.n_samples, **board})
    return pd.DataFrame(rows)


@reference.register_sweep(
    "precision.vocab_shape", lesson=LESSON, columns=("dtype", "vocab", "pass", "tflops", "median_ms"),
    description="GPT-2 LM-head matmuls (8192 tokens, hidden 768) with vocabulary 50257 vs 50304",
)
def _vocab_sweep() -> pd.DataFrame:
    return vocab_shape_sweep()


def relative_errors(n: int = 512, dtypes=MATMUL_DTYPES, seed: int = 0, device: str = "cpu") -> pd.DataFrame:
    """‖C − C_fp64‖_F / ‖C_fp64‖_F of an n³ matmul of random normal fp32 inputs, per dtype.

    On 'cuda' every dtype runs for real on tensor cores. On 'cpu' fp32, fp16, bf16 and fp8
    (scaled_mm) run for real; tf32 is emulated (inputs rounded to 10 mantissa bits,
    fp32 accumulation), because CPUs have no TF32 mode.
    """
    import torch

    device = validate.choice("device", device, ["cpu", "cuda"])
    if device == "cuda" and not runtime.is_gpu():
        raise NoGPU("device='cuda' needs a GPU; use device='cpu' (the accuracy is real there too)")
    n = validate.integer("n", n, minimum=16, maximum=16384 if device == "cuda" else 4096)
    dtypes = [validate.choice("dtype", d, MATMUL_DTYPES) for d in dtypes]
    _check_shape(n, n, n, "fp32", device)
    gen = torch.Generator(device=device).manual_seed(seed)
    a = torch.randn(n, n, device=device, generator=gen)
    b = torch.randn(n, n, device=device, generator=gen)
    ref = a.double() @ b.double()
    rows = []
    for dtype in dtypes:
        how = "tensor cores" if device == "cuda" and dtype != "fp32" else device.upper()
        if dtype == "tf32" and device == "cpu":
            a_in = torch.from_numpy(formats.to_tf32(a.numpy()))
            b_in = torch.from_numpy(formats.to_tf32(b.numpy()))
            c = a_in @ b_in
            how = "CPU, emulated: inputs rounded to TF32, fp32 accumulation"
        elif dtype == "fp8_e4m3":
            if device == "cuda" and not fp8_supported():
                continue
            c = _matmul_fn(dtype, a, b)()
            how = ("tensor cores" if device == "cuda" else "CPU") + ", per-tensor scaled, bf16 output"
        else:
            with _TF32(dtype == "tf32"):
                c = torch.matmul(a.to(_torch_dtype(dtype)), b.to(_torch_dtype(dtype)))
                if device == "cuda":
                    torch.cuda.synchronize()
        error = float((c.double() - ref).norm() / ref.norm())
        rows.append({"dtype": dtype, "n": n, "relative_error": error, "how": how,
                     "unit_roundoff": formats.get_format(dtype).unit_roundoff})
    return pd.DataFrame(rows)


@functools.cache
def _measured_sweep() -> pd.DataFrame:
    """The GPU sweep, measured once per session (a widget redraw must not re-time it)."""
    return matmul_sweep()


@functools.cache
def _measured_vocab() -> pd.DataFrame:
    """The vocabulary-shape timings, measured once per session: the table, the chart and the read-back of
    lesson 07 quote the same numbers (each call used to time the matmuls again)."""
    return vocab_shape_sweep()
