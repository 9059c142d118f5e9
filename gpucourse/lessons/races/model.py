"""Lesson 06 "Races and the memory consistency model":
the hardware model, counted quantities, and the checks and helpers the runners share."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pandas as pd

from gpucourse import validate
from gpucourse.errors import InvalidConfig
from gpucourse.lessons.races import weakmemory
from gpucourse.lessons.races.kernels import (
    MAX_BINS,
    MAX_FEATURES,
    REDUCE_THREADS,
    handoff_kernel,
    histogram_atomic,
    histogram_privatised,
    histogram_racy,
    mp_kernel,
    reduce_last_block,
)

SIM_BLOCKS, SIM_THREADS = 4, 64  # the race scheduler's launch for the histogram (256 threads)
SIM_MAX_ITEMS = 4096
GPU_MAX_ITEMS = 10**8
VARIANTS = ("racy", "atomic", "privatised")
LITMUS_FENCES = ("none", "producer", "consumer", "both")


def _items(items, *, simulator: bool) -> int:
    limit = SIM_MAX_ITEMS if simulator else GPU_MAX_ITEMS
    return validate.integer("items", items, minimum=0, maximum=limit)


def _bins(bins) -> int:
    return validate.integer("bins", bins, minimum=1, maximum=MAX_BINS)


def _seed(seed) -> int:
    return validate.integer("seed", seed, minimum=0)


HISTOGRAM_KERNELS = {"racy": histogram_racy, "atomic": histogram_atomic, "privatised": histogram_privatised}


def histogram_values(items: int, seed: int = 0) -> np.ndarray:
    """``items`` float32 values, uniform in [0, 1): every bin is equally likely."""
    items = validate.integer("items", items, minimum=0, maximum=GPU_MAX_ITEMS)
    return np.random.default_rng(_seed(seed)).random(items, dtype=np.float32)


def histogram_reference(values: np.ndarray, bins: int) -> np.ndarray:
    """What the kernels must produce (NumPy, same binning rule)."""
    bins = _bins(bins)
    index = np.minimum((np.asarray(values, dtype=np.float32) * np.float32(bins)).astype(np.int64), bins - 1)
    return np.bincount(index, minlength=bins).astype(np.int32)


def race_histogram(variant: str, bins: int = 16, items: int = 1024, seed: int = 0, schedule: str = "random",
                   memory: str = "sc") -> tuple[np.ndarray, weakmemory.RaceReport]:
    """One histogram kernel under the race scheduler (4 blocks × 64 threads): (counts, report)."""
    variant = validate.choice("variant", variant, VARIANTS)
    bins, items, seed = _bins(bins), _items(items, simulator=True), _seed(seed)
    values = histogram_values(items, seed)
    counts = np.zeros(bins, np.int32)
    report = weakmemory.run_kernel(HISTOGRAM_KERNELS[variant], SIM_BLOCKS, SIM_THREADS, values, counts,
                                   schedule=schedule, seed=seed, memory=memory)
    return counts, report


def _fence_flags(fences: str) -> tuple[int, int]:
    fences = validate.choice("fences", fences, LITMUS_FENCES)
    return int(fences in ("producer", "both")), int(fences in ("consumer", "both"))


def mp_outcomes(fences: str = "none", runs: int = 50, seed: int = 0) -> Counter:
    """``mp_kernel`` under the race scheduler and the weak-memory model, ``runs`` random schedules:
    a Counter of (flag seen, data seen). Counts under the model, not a GPU's frequencies."""
    fp, fc = _fence_flags(fences)
    runs = validate.integer("runs", runs, minimum=1, maximum=10_000)
    seed = _seed(seed)
    outcomes: Counter = Counter()
    for s in range(seed, seed + runs):
        data, flag, out = np.zeros(1, np.int32), np.zeros(1, np.int32), np.full(2, -1, np.int32)
        weakmemory.run_kernel(mp_kernel, 2, 1, data, flag, out, fp, fc, schedule="random", seed=s, memory="weak")
        outcomes[(int(out[0]), int(out[1]))] += 1
    return outcomes


def handoff(producer_block: int = 1, spin_cap: int = 100, fence: bool = True, schedule: str = "random",
            seed: int = 0, memory: str = "weak") -> dict:
    """One run of ``handoff_kernel`` (2 blocks of 32 threads) under the race scheduler.

    ``schedule="sequential"`` runs blocks one after another, as the plain simulator does: with
    the producer in block 1, block 0 can only poll until its cap and give up."""
    producer_block = validate.integer("producer_block", producer_block, minimum=0, maximum=1)
    spin_cap = validate.integer("spin_cap", spin_cap, minimum=0, maximum=100_000)
    data, flag, out = np.zeros(1, np.int32), np.zeros(1, np.int32), np.full(3, -1, np.int32)
    report = weakmemory.run_kernel(handoff_kernel, 2, 32, data, flag, out, producer_block, spin_cap, int(bool(fence)),
                                   schedule=schedule, seed=seed, memory=memory)
    seen, value, polls = (int(v) for v in out)
    verdict = ("gave up: the flag never came" if not seen else "correct: saw the flag and the data" if value == 42
               else "WRONG: saw the flag but stale data")
    return {"schedule": schedule, "memory": memory, "fence": bool(fence), "producer block": producer_block,
            "flag seen": seen, "data read": value, "polls": polls, "outcome": verdict, "report": report}


def handoff_table(seed: int = 0) -> pd.DataFrame:
    """The hand-off in the situations the lesson discusses, one row each (the last: under fences that only
    release and acquire, which is all the atomic flag needs)."""
    seed = _seed(seed)
    cases = [
        ("blocks run one after another (like the plain simulator); producer is block 1", 1, True, "sequential", "sc"),
        ("all blocks resident; sequentially consistent memory; no fences", 1, False, "random", "sc"),
        ("all blocks resident; weak-memory model; no fences", 1, False, "round-robin", "weak"),
        ("all blocks resident; weak-memory model; threadfence on both sides", 1, True, "round-robin", "weak"),
        ("as row 4, fences weakened to release/acquire (fence.acq_rel): the atomic flag still carries the data",
         1, True, "round-robin", "weak-acqrel"),
    ]
    rows = []
    for what, producer, fence, schedule, memory in cases:
        result = handoff(producer, 200, fence, schedule, seed, memory)
        result.pop("report")
        rows.append({"situation": what, **result})
    return pd.DataFrame(rows)


def _box(fig, x0, y0, x1, y1, text, colour, *, dash="solid", size=12, text_y=None):
    fig.add_shape(type="rect", x0=x0, y0=y0, x1=x1, y1=y1, line={"color": "#000", "width": 1, "dash": dash},
                  fillcolor=colour, layer="below")
    if text:
        fig.add_annotation(x=(x0 + x1) / 2, y=(y0 + y1) / 2 if text_y is None else text_y, text=text,
                           showarrow=False, font={"size": size})


def _arrow(fig, x0, y0, x1, y1, text="", colour="#000"):
    fig.add_annotation(x=x1, y=y1, ax=x0, ay=y0, xref="x", yref="y", axref="x", ayref="y", text="",
                       showarrow=True, arrowhead=2, arrowwidth=2, arrowcolor=colour)
    if text:
        fig.add_annotation(x=(x0 + x1) / 2, y=(y0 + y1) / 2, text=text, showarrow=False, bgcolor="#FFFFFF",
                           font={"size": 11, "color": colour})


def fence_reduction(values: np.ndarray, blocks: int = 4, threads: int = 8, fence: bool = True,
                    schedule: str = "round-robin", seed: int = 0, memory: str = "weak") -> float:
    """The last-block reduction under the race scheduler; returns what it computed."""
    blocks = validate.integer("blocks", blocks, minimum=1, maximum=64)
    threads = validate.integer("threads", threads, minimum=1, maximum=REDUCE_THREADS)
    if threads & (threads - 1):
        raise InvalidConfig(f"threads must be a power of two (the tree sum halves it), got {threads}")
    values = np.asarray(values, dtype=np.float64)
    partial = np.full(blocks, -1.0e6)  # last launch's leftovers: reading one is visibly wrong
    ticket, out = np.zeros(1, np.uint32), np.full(1, np.nan)
    weakmemory.run_kernel(reduce_last_block, blocks, threads, values, partial, ticket, out, int(bool(fence)),
                          schedule=schedule, seed=seed, memory=memory)
    return float(out[0])


def fence_reduction_table(runs: int = 20, seed: int = 0) -> pd.DataFrame:
    """With and without the fences: how many of ``runs`` random schedules (weak model) sum correctly."""
    runs, seed = validate.integer("runs", runs, minimum=1, maximum=1000), _seed(seed)
    values = np.arange(1, 65, dtype=np.float64)
    expected = float(values.sum())
    rows = []
    for fence in (False, True):
        adversarial = fence_reduction(values, fence=fence, schedule="round-robin")
        good = sum(fence_reduction(values, fence=fence, schedule="random", seed=s) == expected
                   for s in range(seed, seed + runs))
        rows.append({"threadfence": "both sides" if fence else "none", "expected": expected,
                     "round-robin (stalest reads)": adversarial, f"correct in {runs} random schedules": good})
    return pd.DataFrame(rows)


def training_data(examples: int, features: int = 4, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    examples = validate.integer("examples", examples, minimum=1, maximum=10**7)
    features = validate.integer("features", features, minimum=1, maximum=MAX_FEATURES)
    rng = np.random.default_rng(_seed(seed))
    x = rng.standard_normal((examples, features)).astype(np.float32)
    w_true = np.linspace(1.0, -1.0, features).astype(np.float32)
    y = (x @ w_true + 0.1 * rng.standard_normal(examples)).astype(np.float32)
    return x, y


# --- Lab 06 helpers: run a learner's kernels under the race scheduler ----------------------------------

LAB_BLOCKS, LAB_THREADS = 4, 64


def race_event_counts(kernel, griddim, blockdim, *args, **options) -> dict[str, dict[str, int]]:
    """For hidden tests, through the grader's ``call`` (a fresh thread, the result frozen): one launch of a
    learner's kernel under the race scheduler (``weakmemory.run_kernel``'s options), summarised as plain
    data — how many accesses of each op per memory space and per array:
    ``{"space": {"shared atomic": 512, …}, "array": {"flag store": 0, …}}``. What the kernel computed is
    in the grader's own arrays."""
    events = weakmemory.run_kernel(kernel, griddim, blockdim, *args, **options).events
    return {column: {f"{name} {op}": int(n) for (name, op), n in events.groupby([column, "op"]).size().items()}
            for column in ("space", "array")}


def check_histogram(kernel, bins: int = 16, items: int = 512, schedule: str = "round-robin",
                    seed: int = 0) -> tuple[np.ndarray, np.ndarray, weakmemory.RaceReport]:
    """A histogram kernel ``kernel(values, counts)`` run by the race scheduler on 4 blocks × 64 threads:
    (its counts, NumPy's counts, the report). Shared memory starts with
    garbage, not zeros."""
    bins, items, seed = _bins(bins), _items(items, simulator=True), _seed(seed)
    values = histogram_values(items, seed)
    counts = np.zeros(bins, np.int32)
    report = weakmemory.run_kernel(kernel, LAB_BLOCKS, LAB_THREADS, values, counts, schedule=schedule, seed=seed,
                                   max_steps=100_000)
    return counts, histogram_reference(values, bins), report
