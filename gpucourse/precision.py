"""Lesson 07 "Mixed precision and tensor cores": range, precision, accumulation, loss scaling, speed.

* Classic demos: ``classic_demos()`` runs fp16's three famous surprises for real (NumPy).
* Accumulation: Numba CUDA kernels that sum float16 inputs in fp16, in fp32, and with Kahan's
  compensation (in fp16 and in fp32): ``accumulate(x, method)``; NumPy references that do the
  same arithmetic in the same order: ``reference_accumulate``; ``accumulation_errors`` and
  ``accumulation_figure`` (error vs n), ``running_sum_figure`` (the fp16 sum that sticks).
* Range and loss scaling: ``train_tiny_model(recipe)`` trains a tiny MLP with torch on the CPU
  with every tensor stored in fp32, fp16 or bf16 (rounded exactly; arithmetic in fp32 as on
  tensor cores); its gradients underflow in fp16, a ``torch.amp.GradScaler`` fixes it, bf16
  needs none. ``loss_curves_figure``; ``gradient_histogram_figure`` (log2 bins against each
  format's range).
* Tensor cores: ``measure_matmul`` / ``matmul_sweep`` (GPU, registered as
  ``precision.matmul``), ``vocab_shape_sweep`` (N = 50304 vs 50257, ``precision.vocab_shape``),
  ``relative_errors`` (real on the CPU or GPU), ``throughput_figure`` / ``ceiling_figure``
  (measured on a GPU, else recorded, else said so; datasheet lines labelled "datasheet").
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from numba import cuda  # gpucourse/__init__ ran first and chose the mode: the GPU or the simulator
from numba.types import float16, float32

from gpucourse import formats, validate
from gpucourse.errors import InvalidConfig, NoGPU
from gpucourse.measure import reference, runtime
from gpucourse.measure.harness import measure
from gpucourse.viz import charts

LESSON = "07_precision"
METHODS = ("fp16", "fp16_kahan", "fp32", "fp32_kahan")
METHOD_LABELS = {
    "fp16": "fp16 accumulator",
    "fp16_kahan": "fp16 accumulator + Kahan",
    "fp32": "fp16 inputs, fp32 accumulator",
    "fp32_kahan": "fp16 inputs, fp32 accumulator + Kahan",
}
DATA_KINDS = ("uniform", "normal", "constant")
SIM_MAX_ELEMENTS = 1 << 18  # the simulator adds ~100k numbers a second: keep a run to seconds
THREADS_PER_BLOCK = 32

# Dense datasheet peaks come from runtime.datasheet_tflops (H100/H200 SXM names only; NVIDIA's
# H100/H200 datasheets); this lesson calls its fp8 format "fp8_e4m3".
DATASHEET_FALLBACK_DEVICE = "NVIDIA H200"  # the datasheet shown when there is neither a GPU nor a recording
MATMUL_DTYPES = ("fp32", "tf32", "fp16", "bf16", "fp8_e4m3")
MATMUL_LABELS = {
    "fp32": "FP32 (TF32 off: CUDA cores)", "tf32": "TF32 (fp32 inputs, tensor cores)",
    "fp16": "FP16", "bf16": "BF16", "fp8_e4m3": "FP8 E4M3 (torch._scaled_mm)",
}
SWEEP_SIZES = (1024, 2048, 4096, 8192)
VOCABS = (50257, 50304)  # GPT-2's vocabulary, and the same padded to a multiple of 64
VOCAB_TOKENS, VOCAB_HIDDEN = 8192, 768  # a batch of 8 × 1024 tokens through GPT-2 small's LM head


# --- the classic demos ----------------------------------------------------------------------------


def running_sum_plateau(value: float = 0.1, fmt: str = "fp16", max_terms: int = 100_000) -> tuple[float, int]:
    """Add ``value`` (stored in ``fmt``) to a running sum in ``fmt`` until it stops changing.

    Returns (the sum where it sticks, the number of additions it took to get there).
    """
    value = validate.number("value", value, minimum=0.0)
    max_terms = validate.integer("max_terms", max_terms, minimum=1, maximum=10**7)
    dtype = {"fp16": np.float16, "fp32": np.float32}[validate.choice("fmt", fmt, ["fp16", "fp32"])]
    step, total = dtype(value), dtype(0.0)
    for count in range(1, max_terms + 1):
        new = dtype(total + step)
        if new == total:
            return float(total), count - 1
        total = new
    return float(total), max_terms


def classic_demos() -> pd.DataFrame:
    """fp16's famous surprises, computed now with NumPy's IEEE binary16 (and binary32 beside it)."""
    with np.errstate(over="ignore", under="ignore"):
        square16 = np.float16(300) * np.float16(300)
        square32 = np.float32(300) * np.float32(300)
        tiny16, tiny32 = np.float16(1e-8), np.float32(1e-8)
    stuck16, additions = running_sum_plateau(0.1, "fp16")
    total32 = np.float32(0.0)
    for _ in range(additions):  # the same number of additions, in fp32
        total32 = np.float32(total32 + np.float32(0.1))
    rows = [
        {"expression": "300 * 300", "fp32": float(square32), "fp16": float(square16),
         "what happened": "90000 > 65504, fp16's largest finite value: overflow to inf"},
        {"expression": "1e-8", "fp32": float(tiny32), "fp16": float(tiny16),
         "what happened": "below half of fp16's smallest subnormal 2^-24 ≈ 5.96e-8: underflow to 0"},
        {"expression": f"0.1 + 0.1 + … ({additions} times)", "fp32": float(total32),
         "fp16": stuck16,
         "what happened": f"sticks at {stuck16:g} after {additions} additions: from 256 up, fp16's spacing "
                          "is 0.25 and 0.1 < 0.125 rounds away"},
    ]
    return pd.DataFrame(rows)


# --- accumulation kernels (one thread per row; the running sum is saved at checkpoints) -----------


@cuda.jit
def sum_fp16_kernel(x, checkpoints, out):
    row = cuda.grid(1)
    if row < x.shape[0]:
        total = float16(0.0)
        k = 0
        for j in range(x.shape[1]):
            total = total + x[row, j]  # fp16 + fp16, rounded to fp16 every step
            if k < checkpoints.shape[0] and j + 1 == checkpoints[k]:
                out[row, k] = float32(total)
                k += 1


@cuda.jit
def sum_fp32_kernel(x, checkpoints, out):
    row = cuda.grid(1)
    if row < x.shape[0]:
        total = float32(0.0)
        k = 0
        for j in range(x.shape[1]):
            total += float32(x[row, j])  # fp16 input widened exactly, sum kept in fp32
            if k < checkpoints.shape[0] and j + 1 == checkpoints[k]:
                out[row, k] = total
                k += 1


@cuda.jit
def sum_kahan_fp16_kernel(x, checkpoints, out):
    row = cuda.grid(1)
    if row < x.shape[0]:
        total = float16(0.0)
        compensation = float16(0.0)  # the low-order part that the last addition lost
        k = 0
        for j in range(x.shape[1]):
            y = x[row, j] - compensation
            t = total + y
            compensation = (t - total) - y  # algebraically 0; in fp16 exactly what rounding dropped
            total = t
            if k < checkpoints.shape[0] and j + 1 == checkpoints[k]:
                out[row, k] = float32(total)
                k += 1


@cuda.jit
def sum_kahan_fp32_kernel(x, checkpoints, out):
    row = cuda.grid(1)
    if row < x.shape[0]:
        total = float32(0.0)
        compensation = float32(0.0)
        k = 0
        for j in range(x.shape[1]):
            y = float32(x[row, j]) - compensation
            t = total + y
            compensation = (t - total) - y
            total = t
            if k < checkpoints.shape[0] and j + 1 == checkpoints[k]:
                out[row, k] = total
                k += 1


KERNELS = {
    "fp16": sum_fp16_kernel, "fp32": sum_fp32_kernel,
    "fp16_kahan": sum_kahan_fp16_kernel, "fp32_kahan": sum_kahan_fp32_kernel,
}


def _as_rows(x) -> np.ndarray:
    array = np.asarray(x)
    if array.dtype != np.float16:
        raise InvalidConfig(f"x must be a float16 array (every method reads fp16 inputs), got {array.dtype}")
    if array.ndim == 1:
        array = array[None, :]
    if array.ndim != 2 or array.shape[0] < 1 or array.shape[1] < 1:
        raise InvalidConfig(f"x must be a non-empty 1-D or 2-D (rows × n) array, got shape {array.shape}")
    return np.ascontiguousarray(array)


def _checkpoints(checkpoints, n: int) -> np.ndarray:
    if checkpoints is None:
        return np.array([n], dtype=np.int64)
    points = [validate.integer("checkpoint", c, minimum=1, maximum=n) for c in checkpoints]
    if not points or sorted(set(points)) != points:
        raise InvalidConfig(f"checkpoints must be increasing term counts from 1 to {n}, got {checkpoints!r}")
    return np.array(points, dtype=np.int64)


def accumulate(x, method: str = "fp32", checkpoints=None) -> np.ndarray:
    """Sum each row of float16 ``x`` with the Numba kernel of ``method`` (GPU or simulator).

    Returns float64 (rows × len(checkpoints)): the running sum after each checkpoint's number of
    terms (default: one column, the whole row).
    """
    method = validate.choice("method", method, METHODS)
    rows = _as_rows(x)
    points = _checkpoints(checkpoints, rows.shape[1])
    if not runtime.is_gpu() and rows.size > SIM_MAX_ELEMENTS:
        raise InvalidConfig(f"the simulator sums about 10^5 numbers a second: at most {SIM_MAX_ELEMENTS} "
                            f"elements (rows × n) in simulator mode, got {rows.size}")
    out_bytes = rows.shape[0] * len(points) * 4
    validate.fits_in_memory(rows.nbytes + out_bytes, runtime.free_memory_bytes(), "x and out")
    out = np.full((rows.shape[0], len(points)), np.nan, dtype=np.float32)  # poisoned: unwritten shows as NaN
    blocks = math.ceil(rows.shape[0] / THREADS_PER_BLOCK)
    KERNELS[method][blocks, THREADS_PER_BLOCK](rows, points, out)
    return out.astype(np.float64)


def reference_accumulate(x, method: str = "fp32", checkpoints=None) -> np.ndarray:
    """NumPy doing the kernels' arithmetic in the same order (bit-identical results)."""
    method = validate.choice("method", method, METHODS)
    rows = _as_rows(x)
    points = _checkpoints(checkpoints, rows.shape[1])
    dtype = np.float16 if method.startswith("fp16") else np.float32
    data = rows.astype(dtype)  # fp16 → fp32 is exact
    total = np.zeros(rows.shape[0], dtype=dtype)
    compensation = np.zeros(rows.shape[0], dtype=dtype)
    out, k = np.empty((rows.shape[0], len(points))), 0
    kahan = method.endswith("kahan")
    for j in range(rows.shape[1]):
        if kahan:
            y = data[:, j] - compensation
            t = total + y
            compensation = (t - total) - y
            total = t
        else:
            total = total + data[:, j]
        if k < len(points) and j + 1 == points[k]:
            out[:, k] = total
            k += 1
    return out


def exact_sums(x, checkpoints=None) -> tuple[np.ndarray, np.ndarray]:
    """The exact running sums (math.fsum of the fp16 values) and Σ|x| at each checkpoint."""
    rows = _as_rows(x).astype(np.float64)
    points = _checkpoints(checkpoints, rows.shape[1])
    exact = np.array([[math.fsum(r[:p]) for p in points] for r in rows])
    absolute = np.array([[math.fsum(np.abs(r[:p])) for p in points] for r in rows])
    return exact, absolute


def make_data(kind: str, rows: int, n: int, seed: int = 0) -> np.ndarray:
    """float16 inputs: 'uniform' in [0, 1), 'normal' (mean 0, sd 1) or 'constant' 0.1."""
    kind = validate.choice("data", kind, DATA_KINDS)
    rows = validate.integer("rows", rows, minimum=1, maximum=1 << 16)
    n = validate.integer("n", n, minimum=1, maximum=1 << 24)
    rng = np.random.default_rng(validate.integer("seed", seed, minimum=0))
    if kind == "uniform":
        return rng.random((rows, n)).astype(np.float16)
    if kind == "normal":
        return rng.standard_normal((rows, n)).astype(np.float16)
    return np.full((rows, n), 0.1, dtype=np.float16)


def accumulation_errors(data: str = "uniform", max_n: int = 4096, rows: int = 4, seed: int = 0,
                        methods=METHODS, engine: str = "kernel") -> pd.DataFrame:
    """Error of each method vs the number of terms n (powers of two up to ``max_n``).

    error = |computed − exact| / Σ|x_i| (relative error for positive data; stays meaningful when
    a zero-mean sum cancels). ``engine``: 'kernel' (Numba) or 'numpy' (the reference).
    """
    max_n = validate.integer("max_n", max_n, minimum=2, maximum=1 << 20)
    engine = validate.choice("engine", engine, ["kernel", "numpy"])
    methods = [validate.choice("method", m, METHODS) for m in methods]
    x = make_data(data, rows, max_n, seed)
    points = [2**k for k in range(1, int(math.log2(max_n)) + 1)]
    if points[-1] != max_n:
        points.append(max_n)
    exact, absolute = exact_sums(x, points)
    run = accumulate if engine == "kernel" else reference_accumulate
    frames = []
    for method in methods:
        sums = run(x, method, points)
        error = np.abs(sums - exact) / np.where(absolute == 0, 1.0, absolute)
        frames.append(pd.DataFrame({
            "method": method, "n": points, "median_error": np.median(error, axis=0),
            "max_error": np.max(error, axis=0),
        }))
    return pd.DataFrame(pd.concat(frames, ignore_index=True))


def accumulation_figure(data: str = "uniform", max_n: int = 4096, rows: int = 4, engine: str = "kernel",
                        errors: pd.DataFrame | None = None) -> go.Figure:
    """Error vs n (log-log) for each accumulation method, with each format's unit roundoff."""
    table = errors if errors is not None else accumulation_errors(data, max_n, rows, engine=engine)
    where = ("the Numba kernels in the simulator" if engine == "kernel" and not runtime.is_gpu()
             else f"the Numba kernels on {runtime.device().name}" if engine == "kernel" else "NumPy")
    fig = charts.figure(
        f"Summing n float16 values ({data}): error vs n", "n (terms summed)", "error ÷ Σ|x| (log)",
        charts.source_caption("measured", f"results (not timings) computed now by {where}; median of {rows} "
                                          "rows; exact sums by math.fsum"),
    )
    for index, method in enumerate(dict.fromkeys(table.method)):
        part = table[table.method == method]
        # Exact zeros cannot sit on a log axis: show them at 1e-12 and say so in the name.
        floor = 1e-12
        values = np.maximum(part.median_error.to_numpy(), floor)
        exact_note = " (exact where drawn at 1e-12)" if (part.median_error == 0).any() else ""
        name = METHOD_LABELS[method] + exact_note
        charts.line(fig, part.n, values, name, index)
    charts.hline(fig, formats.FORMATS["fp16"].unit_roundoff, "fp16 unit roundoff 2^-11", faint=True)
    charts.hline(fig, formats.FORMATS["fp32"].unit_roundoff, "fp32 unit roundoff 2^-24", faint=True)
    fig.update_xaxes(type="log")
    fig.update_yaxes(type="log", exponentformat="power")
    return fig


def running_sum_figure(value: float = 0.1, n: int = 4096, every: int = 32,
                       engine: str = "kernel") -> go.Figure:
    """The running sum of n copies of ``value`` (stored in fp16) under each method, vs the exact sum."""
    value = validate.number("value", value, minimum=-65504.0, maximum=65504.0)
    n = validate.integer("n", n, minimum=2, maximum=1 << 16)
    every = validate.integer("every", every, minimum=1, maximum=n)
    engine = validate.choice("engine", engine, ["kernel", "numpy"])
    x = np.full((1, n), value, dtype=np.float16)
    points = list(range(every, n + 1, every))
    if points[-1] != n:
        points.append(n)
    exact, _ = exact_sums(x, points)
    run = accumulate if engine == "kernel" else reference_accumulate
    fig = charts.figure(
        f"Running sum of {n} × {float(np.float16(value)):.6g} (the fp16 value of {value:g})",
        "terms added (count)", "running sum (unitless)",
        charts.source_caption("measured", "results (not timings) computed now by "
                              + ("the Numba kernels" if engine == "kernel" else "NumPy")),
    )
    charts.line(fig, points, exact[0], "exact", 7)
    for index, method in enumerate(METHODS):
        charts.line(fig, points, run(x, method, points)[0], METHOD_LABELS[method], index)
    return fig


# --- dot products of fp16 inputs (lab 07 evaluates the learner's kernels with these) ---------------

DOT_KINDS = ("normal", "adversarial")


def dot_inputs(kind: str, rows: int, n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """float16 pairs (a, b), rows × n. 'normal': random normal. 'adversarial': one product of 1
    followed by n − 1 products of 2^-24 — each exactly half an fp32 spacing at 1, so a plain fp32
    running sum rounds every one of them away (ties to even), while the exact sum grows."""
    kind = validate.choice("kind", kind, DOT_KINDS)
    rows = validate.integer("rows", rows, minimum=1, maximum=1 << 16)
    n = validate.integer("n", n, minimum=1, maximum=1 << 24)
    rng = np.random.default_rng(validate.integer("seed", seed, minimum=0))
    if kind == "normal":
        a = rng.standard_normal((rows, n)).astype(np.float16)
        return a, rng.standard_normal((rows, n)).astype(np.float16)
    a = np.full((rows, n), 2.0**-12, dtype=np.float16)
    a[:, 0] = 1.0
    return a, a.copy()


def exact_dots(a, b) -> np.ndarray:
    """Exact row-wise dot products of fp16 arrays (fp16 × fp16 is exact in float64; math.fsum)."""
    a64, b64 = _as_rows(a).astype(np.float64), _as_rows(b).astype(np.float64)
    return np.array([math.fsum(row) for row in a64 * b64])


def dot_errors(out, a, b) -> np.ndarray:
    """|computed − exact| / Σ|a_i b_i| per row (the normwise error of a dot product)."""
    a64, b64 = _as_rows(a).astype(np.float64), _as_rows(b).astype(np.float64)
    scale = np.array([math.fsum(row) for row in np.abs(a64 * b64)])
    out = np.asarray(out, dtype=np.float64).reshape(-1)
    return np.abs(out - exact_dots(a, b)) / np.where(scale == 0, 1.0, scale)


def dot_errors_figure(functions: dict, kind: str = "adversarial", ns=(256, 1024, 4096), rows: int = 4,
                      seed: int = 0) -> go.Figure:
    """Median error vs n of each ``functions[name](a, b)`` (row-wise dot products of fp16 inputs)."""
    ns = [validate.integer("n", n, minimum=1, maximum=1 << 16) for n in ns]
    caption = charts.source_caption("measured", "results (not timings) of the kernels, computed now; exact "
                                                "dot products by math.fsum; errors of 0 drawn at 1e-12")
    fig = charts.figure(f"Dot products of fp16 inputs ({kind}): error vs n", "n (elements per dot product)",
                        "error ÷ Σ|a·b| (log)", caption)
    for index, (name, fn) in enumerate(functions.items()):
        errors = []
        for n in ns:
            a, b = dot_inputs(kind, rows, n, seed)
            errors.append(float(np.median(dot_errors(fn(a, b), a, b))))
        charts.line(fig, ns, np.maximum(errors, 1e-12), name, index)
    charts.hline(fig, formats.FORMATS["fp32"].unit_roundoff, "fp32 unit roundoff 2^-24", faint=True)
    fig.update_xaxes(type="log")
    fig.update_yaxes(type="log", exponentformat="power")
    return fig


def kernel_source(method: str = "fp16") -> str:
    """The source of an accumulation kernel, as the lesson shows it (what the tests ran)."""
    import inspect

    kernel = KERNELS[validate.choice("method", method, METHODS)]
    return inspect.getsource(getattr(kernel, "py_func", kernel))


# --- range and loss scaling: a tiny model with fp16 / bf16 storage, trained on the CPU ------------

RECIPES = ("fp32", "fp16", "fp16+scaler", "bf16")
RECIPE_LABELS = {
    "fp32": "fp32 (reference)", "fp16": "fp16, no scaler",
    "fp16+scaler": "fp16 + GradScaler", "bf16": "bf16, no scaler",
}


@dataclass
class TinyProblem:
    """A regression whose outputs and errors are small (≈ 2^-12) and whose loss averages 65536 outputs."""

    batch: int = 4096
    inputs: int = 16
    hidden: int = 64
    outputs: int = 16
    target_scale: float = 2.0**-12
    seed: int = 0


@dataclass
class TrainingRun:
    recipe: str
    losses: list[float] = field(default_factory=list)
    underflow_fraction: list[float] = field(default_factory=list)  # of dL/dy entries that became 0
    scales: list[float] = field(default_factory=list)
    skipped_steps: int = 0

    @property
    def final_over_initial(self) -> float:
        return self.losses[-1] / self.losses[0]


def _storage(fmt: str):
    import torch

    return {"fp32": None, "fp16": torch.float16, "bf16": torch.bfloat16}[fmt]


def _make_store():
    import torch

    class Store(torch.autograd.Function):
        """Round a tensor to the storage format on the way forward, and its gradient on the way back."""

        @staticmethod
        def forward(ctx, x, dtype):
            ctx.dtype = dtype
            return x if dtype is None else x.to(dtype).to(torch.float32)

        @staticmethod
        def backward(ctx, grad):
            return (grad if ctx.dtype is None else grad.to(ctx.dtype).to(torch.float32)), None

    return Store


def _problem_tensors(problem: TinyProblem):
    import torch

    gen = torch.Generator().manual_seed(problem.seed)
    x = torch.randn(problem.batch, problem.inputs, generator=gen)
    teacher_w1 = torch.randn(problem.inputs, problem.hidden, generator=gen) / math.sqrt(problem.inputs)
    teacher_w2 = torch.randn(problem.hidden, problem.outputs, generator=gen) / math.sqrt(problem.hidden)
    target = torch.tanh(x @ teacher_w1) @ teacher_w2 * problem.target_scale
    w1 = torch.randn(problem.inputs, problem.hidden, generator=gen) / math.sqrt(problem.inputs)
    params = [w1, torch.zeros(problem.hidden), torch.zeros(problem.hidden, problem.outputs),
              torch.zeros(problem.outputs)]  # a zero-initialised last layer, as is common
    for p in params:
        p.requires_grad_(True)
    return x, target, params


def _forward(store, params, x, dtype, keep=None):
    """The MLP y = tanh(x W1 + b1) W2 + b2 with every tensor stored in ``dtype`` (None: fp32)."""
    import torch

    w1, b1, w2, b2 = (store.apply(p, dtype) for p in params)
    hidden_pre = torch.tanh(store.apply(x, dtype) @ w1 + b1)
    y_pre = store.apply(hidden_pre, dtype) @ w2 + b2
    if keep is not None:
        # Hooks before the rounding see the gradients as stored (after the format's rounding).
        y_pre.register_hook(lambda g: keep.__setitem__("dL/dy", g.detach().clone()))
        hidden_pre.register_hook(lambda g: keep.__setitem__("dL/dh", g.detach().clone()))
    return store.apply(y_pre, dtype)


class _OneThread:
    """torch on one CPU thread: a tiny model gains nothing from more, and on a busy machine the
    extra threads spin and multiply the time (measured: 17 s of CPU instead of 1 s)."""

    def __enter__(self):
        import torch

        self.old = torch.get_num_threads()
        torch.set_num_threads(1)

    def __exit__(self, *exc):
        import torch

        torch.set_num_threads(self.old)
        return False


def train_tiny_model(recipe: str = "fp16", steps: int = 60, lr: float = 4.0,
                     problem: TinyProblem | None = None, init_scale: float = 2.0**16) -> TrainingRun:
    """Train the tiny MLP with every tensor stored in the recipe's format (deterministic, ~0.2 s).

    Arithmetic is fp32 and tensors are rounded to fp16/bf16 where they are stored (weights,
    activations, activation gradients): the tensor-core contract of low-precision inputs with
    fp32 accumulation. 'fp16+scaler' multiplies the loss by a dynamic scale with
    ``torch.amp.GradScaler`` (skip the step and halve the scale on inf/NaN).
    """

    recipe = validate.choice("recipe", recipe, RECIPES)
    steps = validate.integer("steps", steps, minimum=1, maximum=5000)
    lr = validate.number("lr", lr, minimum=0.0, maximum=1e6)
    init_scale = validate.number("init_scale", init_scale, minimum=1.0, maximum=2.0**64)
    problem = problem or TinyProblem()
    with _OneThread():
        return _train(recipe, steps, lr, problem, init_scale)


def _train(recipe: str, steps: int, lr: float, problem: TinyProblem, init_scale: float) -> TrainingRun:
    import torch

    torch.manual_seed(problem.seed)
    dtype = _storage("fp32" if recipe == "fp32" else recipe.split("+")[0])
    store = _make_store()
    x, target, params = _problem_tensors(problem)
    optimizer = torch.optim.SGD(params, lr=lr)
    scaler = torch.amp.GradScaler("cpu", init_scale=init_scale, enabled=recipe == "fp16+scaler")
    run = TrainingRun(recipe)
    for _ in range(steps):
        optimizer.zero_grad(set_to_none=True)
        keep: dict = {}
        y = _forward(store, params, x, dtype, keep)
        loss = ((y - target) ** 2).mean()  # the loss stays fp32, as autocast keeps it
        scaler.scale(loss).backward()
        scale = float(scaler.get_scale()) if scaler.is_enabled() else 1.0
        with torch.no_grad():
            exact_grad = 2.0 * (y - target) / y.numel() * scale
            nonzero = exact_grad != 0
            lost = ((keep["dL/dy"] == 0) & nonzero).sum().item() / max(nonzero.sum().item(), 1)
        run.losses.append(float(loss.detach()))
        run.underflow_fraction.append(lost)
        run.scales.append(scale)
        before = [p.detach().clone() for p in params]
        scaler.step(optimizer)
        scaler.update()
        if recipe == "fp16+scaler" and all(torch.equal(b, p) for b, p in zip(before, params, strict=True)):
            run.skipped_steps += 1
    return run


def train_all(steps: int = 60, problem: TinyProblem | None = None) -> dict[str, TrainingRun]:
    return {recipe: train_tiny_model(recipe, steps, problem=problem) for recipe in RECIPES}


def loss_curves_figure(steps: int = 60, runs: dict[str, TrainingRun] | None = None) -> go.Figure:
    """Training loss (÷ its first value) per step for fp32, fp16, fp16 + scaler and bf16 storage."""
    runs = runs or train_all(steps)
    fig = charts.figure("Tiny model: training loss with fp16 and bf16 storage", "training step (index)",
                        "loss ÷ initial loss (log)",
                        charts.source_caption("measured", "trained now with torch on the CPU; fp16/bf16 "
                                                          "storage emulated by exact rounding (seed 0)"))
    for index, (recipe, run) in enumerate(runs.items()):
        charts.line(fig, range(len(run.losses)), np.array(run.losses) / run.losses[0], RECIPE_LABELS[recipe],
                    index)
    fig.update_yaxes(type="log", exponentformat="power")
    return fig


def underflow_table(runs: dict[str, TrainingRun]) -> pd.DataFrame:
    return pd.DataFrame([{
        "recipe": RECIPE_LABELS[r], "loss at end ÷ at start": run.final_over_initial,
        "dL/dy entries lost to underflow (step 0)": run.underflow_fraction[0],
        "loss scale": run.scales[-1], "skipped steps": run.skipped_steps,
    } for r, run in runs.items()])


def gradient_sample(problem: TinyProblem | None = None) -> dict[str, np.ndarray]:
    """The fp32 gradients at step 0 (before any update): activation dL/dy and weight dL/dW1, dL/dW2."""
    problem = problem or TinyProblem()
    store = _make_store()
    with _OneThread():
        x, target, params = _problem_tensors(problem)
        keep: dict = {}
        y = _forward(store, params, x, None, keep)
        ((y - target) ** 2).mean().backward()
    return {
        "activation gradients dL/dy": keep["dL/dy"].numpy().ravel(),
        "weight gradients dL/dW2": params[2].grad.numpy().ravel(),
    }


def log2_histogram(values, scale: float = 1.0, low: int = -50, high: int = 20) -> pd.DataFrame:
    """Counts of |value × scale| in bins [2^k, 2^(k+1)); zeros counted apart (k = None)."""
    magnitudes = np.abs(np.asarray(values, dtype=np.float64)) * scale
    nonzero = magnitudes[magnitudes > 0]
    exponents = np.clip(np.floor(np.log2(nonzero)), low, high).astype(int)
    counts = np.bincount(exponents - low, minlength=high - low + 1)
    frame = pd.DataFrame({"log2_bin": np.arange(low, high + 1), "count": counts})
    frame.attrs["zeros"] = int((magnitudes == 0).sum())
    return frame


def format_zones(fmt: str) -> list[tuple[str, float, float]]:
    """(zone, low log2, high log2) of magnitudes: flushed to zero, subnormal, normal, overflow."""
    f = formats.get_format(fmt)
    sub, normal, top = math.log2(f.min_subnormal), math.log2(f.min_normal), math.log2(f.max)
    return [("rounds to 0", -math.inf, sub - 1), ("subnormal: few bits", sub - 1, normal),
            ("normal range", normal, top), ("overflow" if f.has_inf else "saturates", top, math.inf)]


def underflow_share(values, fmt: str, scale: float = 1.0) -> float:
    """The share of the nonzero ``values`` × ``scale`` that become 0 when stored in ``fmt``."""
    values = np.asarray(values, dtype=np.float64) * validate.number("loss scale", scale, minimum=1e-30)
    nonzero = values[values != 0]
    return float((formats.quantize(nonzero, fmt) == 0).mean()) if len(nonzero) else 0.0


def gradient_histogram_figure(fmt: str = "fp16", log2_scale: int = 0,
                              sample: dict | None = None) -> go.Figure:
    """Histogram of gradient magnitudes (log2 bins) after a loss scale, against ``fmt``'s range."""
    f = formats.get_format(fmt)
    log2_scale = validate.integer("log2 of the loss scale", log2_scale, minimum=0, maximum=40)
    scale = 2.0**log2_scale
    sample = sample or gradient_sample()
    shares = {name: underflow_share(v, f.name, scale) for name, v in sample.items()}
    detail = "; ".join(f"{name}: {100 * s:.0f} % become 0" for name, s in shares.items())
    fig = charts.figure(
        f"Gradients × 2^{log2_scale} against the range of {f.name}", "log2 |gradient × scale|",
        "values (count)",
        charts.source_caption("measured", f"fp32 gradients of the tiny model at step 0, computed now on the "
                                          f"CPU. In {f.name}: {detail}"),
    )
    zone_colours = ["#D55E00", "#F0E442", "#009E73", "#CC79A7"]
    for (zone, low, high), colour in zip(format_zones(f.name), zone_colours, strict=True):
        low, high = max(low, -50), min(high, 21)
        if high > low:  # a zone outside the chart's range (bf16's subnormals near 2^-133) is not drawn
            fig.add_vrect(x0=low, x1=high, fillcolor=colour, opacity=0.15, line_width=0,
                          annotation_text=zone, annotation_position="top left", annotation_font_size=11)
    patterns = ["", "/", "x", "."]
    for index, (name, values) in enumerate(sample.items()):
        hist = log2_histogram(values, scale)
        fig.add_bar(x=hist.log2_bin + 0.5, y=hist["count"], name=name, width=0.9,
                    marker={"color": charts.PALETTE[index], "pattern": {"shape": patterns[index % 4]}},
                    opacity=0.85)
    fig.update_layout(barmode="overlay")
    fig.update_xaxes(range=[-50, 21], dtick=5)
    return fig


# --- tensor cores: throughput by dtype, accuracy, and the vocabulary shape ------------------------


def datasheet_tflops(device_name: str | None = None) -> dict[str, float] | None:
    """Datasheet dense TFLOP/s by dtype for the device (H100/H200 SXM), else None."""
    name = device_name if device_name is not None else _datasheet_device()[0]
    if "nvl" in name.lower() or "pcie" in name.lower():  # NVL/PCIe parts have lower figures than the SXM ones
        return None
    table = runtime.datasheet_tflops(name)
    return {("fp8_e4m3" if k == "fp8" else k): v for k, v in table.items()} or None


def _datasheet_device(rec=None) -> tuple[str, str]:
    """(device name, label) whose datasheet the charts show: this GPU, else the recording's GPU, else an
    H200 labelled as assumed."""
    if runtime.is_gpu():
        name = runtime.device().name
        return name, name.removeprefix("NVIDIA ")
    if rec is not None:
        return rec.device, rec.device.removeprefix("NVIDIA ")
    name = DATASHEET_FALLBACK_DEVICE
    return name, f"{name.removeprefix('NVIDIA ')}, assumed: no GPU or recording"


def fp8_supported() -> bool:
    """FP8 tensor cores: compute capability ≥ 8.9 (Ada, Hopper) and torch._scaled_mm."""
    import torch

    return runtime.is_gpu() and runtime.device().compute_capability >= (8, 9) and hasattr(torch, "_scaled_mm")


def _torch_dtype(dtype: str):
    import torch

    return {"fp32": torch.float32, "tf32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16,
            "fp8_e4m3": torch.float8_e4m3fn}[dtype]


def _bytes_per_element(dtype: str) -> int:
    return {"fp32": 4, "tf32": 4, "fp16": 2, "bf16": 2, "fp8_e4m3": 1}[dtype]


class _TF32:
    """Context: TF32 on or off for float32 matmuls, restored afterwards."""

    def __init__(self, enabled: bool):
        self.enabled = enabled

    def __enter__(self):
        import torch

        self.old = (torch.backends.cuda.matmul.allow_tf32, torch.get_float32_matmul_precision())
        torch.backends.cuda.matmul.allow_tf32 = self.enabled
        torch.set_float32_matmul_precision("high" if self.enabled else "highest")

    def __exit__(self, *exc):
        import torch

        torch.backends.cuda.matmul.allow_tf32, precision = self.old
        torch.set_float32_matmul_precision(precision)
        return False


def _fp8_operands(a, b):
    """Per-tensor scaled E4M3 copies of a (row-major) and b (column-major), with their inverse scales."""
    import torch

    def scaled(t):
        scale = 448.0 / t.abs().max().clamp(min=1e-12).float()
        return (t.float() * scale).to(torch.float8_e4m3fn), (1.0 / scale).reshape(())

    a8, inv_a = scaled(a)
    b8_t, inv_b = scaled(b.t().contiguous())
    return a8, b8_t.t(), inv_a, inv_b  # b8_t.t(): the column-major layout _scaled_mm wants


def _matmul_fn(dtype: str, a, b):
    """A zero-argument function computing a @ b in ``dtype`` (inputs already in that dtype)."""
    import torch

    if dtype == "fp8_e4m3":
        a8, b8, inv_a, inv_b = _fp8_operands(a, b)
        return lambda: torch._scaled_mm(a8, b8, inv_a, inv_b, out_dtype=torch.bfloat16)
    return lambda: torch.matmul(a, b)


def _check_shape(m: int, n: int, k: int, dtype: str, device: str) -> tuple[int, int, int]:
    m, n, k = (validate.integer(name, v, minimum=1, maximum=1 << 17)
               for name, v in (("m", m), ("n", n), ("k", k)))
    if dtype == "fp8_e4m3" and (n % 16 or k % 16):
        raise InvalidConfig(f"fp8 matmuls (torch._scaled_mm) need n and k divisible by 16; n={n}, k={k}")
    nbytes = (m * k + k * n) * _bytes_per_element(dtype) + m * n * 4
    validate.fits_in_memory(nbytes, runtime.free_memory_bytes() if device == "cuda" else None, "the matrices")
    return m, n, k


def measure_matmul(dtype: str, m: int, n: int | None = None, k: int | None = None, *, seed: int = 0):
    """Time ``torch.matmul`` (or ``_scaled_mm`` for fp8) of (m×k)@(k×n) on the GPU with the harness.

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
    """TFLOP/s of square n³ matmuls by dtype and size (GPU only)."""
    if not runtime.is_gpu():
        raise NoGPU("the matmul sweep times tensor cores and needs a GPU; charts use the recording instead")
    rows = []
    for dtype in dtypes:
        if dtype == "fp8_e4m3" and not fp8_supported():
            continue
        for n in sizes:
            m = measure_matmul(dtype, n)
            rows.append({"dtype": dtype, "n": n, "tflops": m.tflops, "median_ms": m.median_ms,
                         "iqr_ms": m.iqr_ms, "min_ms": m.min_ms, "n_samples": m.n_samples})
    return pd.DataFrame(rows)


@reference.register_sweep(
    "precision.matmul", lesson=LESSON, columns=("dtype", "n", "tflops", "median_ms"),
    description="torch matmul TFLOP/s of n×n×n by dtype (fp32 TF32 off, tf32, fp16, bf16, fp8 _scaled_mm)",
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
                meas = measure_matmul(dtype, m, n, k)
                rows.append({"dtype": dtype, "vocab": vocab, "pass": name, "m": m, "n": n, "k": k,
                             "tflops": meas.tflops, "median_ms": meas.median_ms, "iqr_ms": meas.iqr_ms,
                             "n_samples": meas.n_samples})
    return pd.DataFrame(rows)


@reference.register_sweep(
    "precision.vocab_shape", lesson=LESSON, columns=("dtype", "vocab", "pass", "tflops", "median_ms"),
    description="GPT-2 LM-head matmuls (8192 tokens, hidden 768) with vocabulary 50257 vs 50304",
)
def _vocab_sweep() -> pd.DataFrame:
    return vocab_shape_sweep()


def vocab_ratios(table: pd.DataFrame) -> pd.DataFrame:
    """Per dtype and pass: TFLOP/s at 50304 ÷ at 50257, and time at 50257 ÷ at 50304."""
    rows = []
    for (dtype, name), part in table.groupby(["dtype", "pass"], sort=False):
        by_vocab = part.set_index("vocab")
        if not {50257, 50304} <= set(by_vocab.index):
            continue
        rows.append({"dtype": dtype, "pass": name,
                     "tflops_ratio_50304_over_50257": by_vocab.tflops[50304] / by_vocab.tflops[50257],
                     "time_ratio_50257_over_50304": by_vocab.median_ms[50257] / by_vocab.median_ms[50304]})
    return pd.DataFrame(rows)


def relative_errors(n: int = 512, dtypes=MATMUL_DTYPES, seed: int = 0, device: str = "cpu") -> pd.DataFrame:
    """‖C − C_fp64‖_F / ‖C_fp64‖_F of an n³ matmul of random normal fp32 inputs, per dtype.

    On 'cuda' every dtype runs for real on tensor cores. On 'cpu' fp32, fp16, bf16 and fp8
    (torch._scaled_mm) run for real; tf32 is emulated (inputs rounded to 10 mantissa bits,
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


def _room_for_caption(fig: go.Figure) -> go.Figure:
    """A bottom margin that holds every line of the caption (charts.figure's fits two; a third was cut off)."""
    lines = max((a.text.count("<br>") + 1 for a in fig.layout.annotations if a.name == "source"), default=1)
    bottom = 62 + 16 * lines + 12  # the caption's offset below the plot, its lines, a little air
    if bottom > (fig.layout.margin.b or 0):
        fig.update_layout(margin={"b": bottom}, height=(fig.layout.height or 420) + 16)
    return fig


def accuracy_figure(errors: pd.DataFrame | None = None, n: int = 512) -> go.Figure:
    """Relative error of each dtype's matmul against fp64, with each input format's unit roundoff."""
    table = errors if errors is not None else relative_errors(n)
    where = "GPU" if table.how.str.contains("tensor cores").any() else "CPU"  # not "per-tensor" (CPU fp8)
    how = "; ".join(f"{d}: {h}" for d, h in zip(table.dtype, table.how, strict=True))
    fig = charts.figure(f"Matmul accuracy: relative error vs fp64 (n = {int(table.n.iloc[0])})", "dtype",
                        "‖C − C_fp64‖ / ‖C_fp64‖ (log)",
                        charts.source_caption("measured", f"computed now on the {where}, random normal "
                                                          f"inputs; {how}"))
    fig.add_bar(x=table.dtype, y=table.relative_error, name="relative error", marker_color=charts.PALETTE[0],
                text=[f"{e:.1e}" for e in table.relative_error], textposition="outside")
    fig.add_scatter(x=table.dtype, y=table.unit_roundoff, name="unit roundoff of the input format",
                    mode="markers", marker={"symbol": "line-ew-open", "size": 30, "color": "#000",
                                            "line": {"width": 2}})
    fig.update_yaxes(type="log", exponentformat="power")
    return _room_for_caption(fig)


@functools.cache
def _measured_sweep() -> pd.DataFrame:
    """The GPU sweep, measured once per session (a widget redraw must not re-time it)."""
    return matmul_sweep()


def _throughput_data() -> tuple[pd.DataFrame | None, str, tuple[str, str]]:
    """(data, caption, (device name, label) of the datasheet to show beside it)."""
    if runtime.is_gpu():
        return _measured_sweep(), charts.source_caption("measured", runtime.device().name), _datasheet_device()
    rec = reference.load("precision.matmul")
    if rec is None:
        return None, charts.source_caption(
            "none", "no GPU here and no recording of precision.matmul yet (run `make record` on a GPU); "
                    f"the datasheet figures shown are those of an {DATASHEET_FALLBACK_DEVICE} (assumed), "
                    "not measurements"), _datasheet_device()
    return rec.data, charts.source_caption("recorded", rec.caption()), _datasheet_device(rec)


def _given_device(device_name: str | None) -> tuple[str, str]:
    if device_name is None:
        return _datasheet_device()
    return device_name, device_name.removeprefix("NVIDIA ")


def throughput_figure(dtypes=MATMUL_DTYPES, datasheet: bool = True, data: pd.DataFrame | None = None,
                      source: str | None = None, device_name: str | None = None) -> go.Figure:
    """Matmul TFLOP/s vs size per dtype: measured on a GPU, else recorded, else 'no data'. The datasheet
    lines are those of the device the data came from (``device_name`` when ``data`` is given)."""
    dtypes = [validate.choice("dtype", d, MATMUL_DTYPES) for d in dtypes]
    if data is None:
        data, source, (device_name, label) = _throughput_data()
    else:
        device_name, label = _given_device(device_name)
    fig = charts.figure("Matmul throughput by dtype (n × n × n)", "n", "TFLOP/s (counted 2n³ ÷ time)",
                        source or "")
    if data is not None and len(data):
        for index, dtype in enumerate(MATMUL_DTYPES):
            part = data[data.dtype == dtype]
            if dtype in dtypes and len(part):
                charts.line(fig, part.n, part.tflops, MATMUL_LABELS[dtype], index)
    else:
        charts.no_data(fig, "No GPU measurement or recording to show (see the caption)")
    table = datasheet_tflops(device_name)
    if datasheet and table:
        shown = {}
        for dtype in dtypes:
            shown.setdefault(table[dtype], []).append(dtype)
        for value, names in shown.items():
            charts.hline(fig, value, f"datasheet {'/'.join(names)} ({label}): {value:g}", faint=True)
    fig.update_xaxes(type="log", tickvals=list(SWEEP_SIZES))
    return fig


def ceiling_table(data: pd.DataFrame, device_name: str = "NVIDIA H200") -> pd.DataFrame:
    """Per dtype: the best measured TFLOP/s (the measured ceiling), the datasheet, and the ratio."""
    table = datasheet_tflops(device_name) or {}
    rows = []
    for dtype in MATMUL_DTYPES:
        part = data[data.dtype == dtype]
        if len(part):
            best = float(part.tflops.max())
            sheet = table.get(dtype)
            rows.append({"dtype": dtype, "measured ceiling (TFLOP/s)": best, "datasheet (TFLOP/s)": sheet,
                         "% of datasheet": 100 * best / sheet if sheet else None,
                         "at n": int(part.n[part.tflops.idxmax()])})
    return pd.DataFrame(rows)


def ceiling_figure(data: pd.DataFrame | None = None, source: str | None = None,
                   device_name: str | None = None) -> go.Figure:
    """Bars: each dtype's measured ceiling (best of the sweep) beside the datasheet figure of the device
    the data came from (``device_name`` when ``data`` is given)."""
    if data is None:
        data, source, (device_name, label) = _throughput_data()
    else:
        device_name, label = _given_device(device_name)
    sheet = datasheet_tflops(device_name) or {}
    fig = charts.figure("Measured ceiling vs datasheet, by dtype", "dtype", "throughput (TFLOP/s)", source or "")
    names = list(MATMUL_DTYPES)
    if sheet:  # a device with no datasheet entry gets no datasheet bars (nothing is borrowed from another)
        fig.add_bar(x=names, y=[sheet.get(d) for d in names], name=f"datasheet ({label}, dense)",
                    marker={"color": "#BBBBBB", "pattern": {"shape": "/"}})
    if data is not None and len(data):
        best = ceiling_table(data, device_name)
        labels = [f"{v:.0f}" + (f" ({p:.0f} %)" if p is not None and p == p else "")
                  for v, p in zip(best["measured ceiling (TFLOP/s)"], best["% of datasheet"], strict=True)]
        fig.add_bar(x=best.dtype, y=best["measured ceiling (TFLOP/s)"],
                    name="measured ceiling (best of sweep)", marker={"color": charts.PALETTE[0]}, text=labels,
                    textposition="outside")
    else:
        charts.no_data(fig, "No measured ceiling: no GPU here and no recording")
    fig.update_layout(barmode="group")
    return _room_for_caption(fig)


def vocab_result() -> tuple[pd.DataFrame | None, pd.DataFrame | None, str]:
    """(the LM-head timings, their 50304/50257 ratios, where they come from) or (None, None, why)."""
    if runtime.is_gpu():
        table = vocab_shape_sweep()
        return table, vocab_ratios(table), charts.source_caption("measured", runtime.device().name)
    rec = reference.load("precision.vocab_shape")
    if rec is None:
        return None, None, charts.source_caption(
            "none", "no GPU here and no recording of precision.vocab_shape yet (run `make record` on a GPU)")
    return rec.data, vocab_ratios(rec.data), charts.source_caption("recorded", rec.caption())


# --- widgets (each returns a displayable LiveChart; tests build them with threaded=False) -------------


def running_sum_widget(value: float = 0.1, *, threaded: bool = True):
    import ipywidgets as w

    from gpucourse.viz.widgets import LiveChart

    return LiveChart(
        {"value": w.FloatText(value=value, description="add"),
         "n": w.IntSlider(value=4096, min=256, max=8192, step=256, description="terms")},
        compute=lambda value, n: running_sum_figure(value, n, every=max(n // 64, 1)),
        threaded=threaded, description="A running sum of one repeated fp16 value, under each accumulator.")


def accumulation_widget(data: str = "uniform", max_n: int = 4096, *, threaded: bool = True):
    import ipywidgets as w

    from gpucourse.viz.widgets import LiveChart

    return LiveChart(
        {"data": w.Dropdown(options=DATA_KINDS, value=data, description="inputs"),
         "max_n": w.Dropdown(options=[256, 1024, 4096, 16384], value=max_n, description="up to n")},
        compute=lambda data, max_n: accumulation_figure(data, max_n, rows=4),
        threaded=threaded, description="Error of each accumulator against the exact sum, vs n.")


def gradient_widget(fmt: str = "fp16", log2_scale: int = 0, *, threaded: bool = True):
    import ipywidgets as w

    from gpucourse.viz.widgets import LiveChart

    sample = gradient_sample()
    return LiveChart(
        {"fmt": w.Dropdown(options=list(formats.FORMATS), value=fmt, description="format"),
         "log2_scale": w.IntSlider(value=log2_scale, min=0, max=32, description="log2 scale")},
        compute=lambda fmt, log2_scale: gradient_histogram_figure(fmt, log2_scale, sample),
        threaded=threaded, description="Gradients multiplied by a loss scale 2^k, against a format's range.")


def throughput_widget(*, threaded: bool = True):
    import ipywidgets as w

    from gpucourse.viz.widgets import LiveChart

    return LiveChart(
        {"dtypes": w.SelectMultiple(options=MATMUL_DTYPES, value=MATMUL_DTYPES, description="dtypes", rows=5),
         "datasheet": w.Checkbox(value=True, description="datasheet lines")},
        compute=lambda dtypes, datasheet: throughput_figure(dtypes or MATMUL_DTYPES, datasheet),
        threaded=threaded, description="Matmul TFLOP/s by dtype and size.")
