"""Lesson 07 "Mixed precision and tensor cores":
the hardware model, counted quantities, and the checks and helpers the runners share."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from gpucourse import validate
from gpucourse.errors import InvalidConfig
from gpucourse.lessons.precision import formats
from gpucourse.lessons.precision.kernels import (
    sum_fp16_kernel,
    sum_fp32_kernel,
    sum_kahan_fp16_kernel,
    sum_kahan_fp32_kernel,
)
from gpucourse.measure import runtime, torch_precision

METHODS = ("fp16", "fp16_kahan", "fp32", "fp32_kahan")
DATA_KINDS = ("uniform", "normal", "constant")
SIM_MAX_ELEMENTS = 1 << 18  # the simulator adds ~100k numbers a second: keep a run to seconds
THREADS_PER_BLOCK = 32

# Dense datasheet peaks come from runtime.datasheet_tflops (H100/H200 SXM names only; NVIDIA's
# H100/H200 datasheets); this lesson calls its fp8 format "fp8_e4m3".
DATASHEET_FALLBACK_DEVICE = "NVIDIA H200"  # the datasheet shown when there is neither a GPU nor a recording
MATMUL_DTYPES = ("fp32", "tf32", "fp16", "bf16", "fp8_e4m3")


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


def _torch_dtype(dtype: str):
    import torch

    return {"fp32": torch.float32, "tf32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16,
            "fp8_e4m3": torch.float8_e4m3fn}[dtype]


def _bytes_per_element(dtype: str) -> int:
    return {"fp32": 4, "tf32": 4, "fp16": 2, "bf16": 2, "fp8_e4m3": 1}[dtype]


class _TF32:
    """Context: TF32 on or off for float32 matmuls, restored afterwards (measure.torch_precision)."""

    def __init__(self, enabled: bool):
        self.enabled = enabled

    def __enter__(self):
        self._context = torch_precision.matmul_tf32(self.enabled)
        self._context.__enter__()

    def __exit__(self, *exc):
        return bool(self._context.__exit__(*exc))


def _fp8_operands(a, b):
    """Per-tensor scaled E4M3 copies of a (row-major) and b (column-major), with their inverse scales."""
    import torch

    def scaled(t):
        scale = 448.0 / t.abs().max().clamp(min=1e-12).float()
        return (t.float() * scale).to(torch.float8_e4m3fn), (1.0 / scale).reshape(())

    a8, inv_a = scaled(a)
    b8_t, inv_b = scaled(b.t().contiguous())
    return a8, b8_t.t(), inv_a, inv_b  # b8_t.t(): the column-major layout scaled_mm wants


def _matmul_fn(dtype: str, a, b):
    """A zero-argument function computing a @ b in ``dtype`` (inputs already in that dtype)."""
    import torch

    if dtype == "fp8_e4m3":
        a8, b8, inv_a, inv_b = _fp8_operands(a, b)
        return lambda: torch_precision.scaled_mm(torch, a8, b8, inv_a, inv_b, torch.bfloat16)
    return lambda: torch.matmul(a, b)


def vocab_measured(ratios: pd.DataFrame | None) -> str | None:
    """The read-back's measurement from ``vocab_ratios``: "TFLOP/s at 50304 ÷ at 50257: a× to b×" (None: none)."""
    if ratios is None or not len(ratios):
        return None
    ratio = ratios.tflops_ratio_50304_over_50257
    span = f"{ratio.min():.2f}×" if round(ratio.min(), 2) == round(ratio.max(), 2) else \
        f"{ratio.min():.2f}× to {ratio.max():.2f}×"
    return f"TFLOP/s at 50304 ÷ at 50257: {span} over {len(ratios)} dtype and pass pairs (the table above)"


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


def _given_device(device_name: str | None) -> tuple[str, str]:
    if device_name is None:
        return _datasheet_device()
    return device_name, device_name.removeprefix("NVIDIA ")


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


# --- which tensor-core formats a compute capability has (review gpu-mode-paths.md G21) ----------------------

_BEFORE_AMPERE = ("not supported before Ampere (cc 8.0): Turing's tensor cores take fp16 and int8 only (Turing "
                  "whitepaper); a {dtype} request runs on the CUDA cores, so timing it would plot fp32 speed "
                  "under a tensor-core label")


def unsupported_dtypes(cc) -> dict[str, str]:
    """The matmul dtypes this compute capability has no tensor cores for, each with the reason (the lesson
    labels them instead of timing them)."""
    cc = tuple(cc)
    out = {}
    if cc < (8, 0):
        out.update({d: _BEFORE_AMPERE.format(dtype=d) for d in ("tf32", "bf16")})
    if cc < (8, 9):
        out["fp8_e4m3"] = "fp8 tensor cores came with Ada and Hopper (cc 8.9, 9.0)"
    return out
