"""Lesson 06 "Races and the memory consistency model":
host runners, microscope traces, GPU sweeps and their recording registration."""

from __future__ import annotations

import functools
import math

import numpy as np
import pandas as pd

from gpucourse import validate
from gpucourse.errors import InvalidConfig, NoGPU
from gpucourse.lessons.races import weakmemory
from gpucourse.lessons.races.kernels import (
    LITMUS_SLOT_STRIDE,
    MAX_BINS,
    MAX_FEATURES,
    _reset_litmus,
    _zero_int32,
    gradient_kernel,
    histogram_racy,
    mp_harness,
    racing_counter,
)
from gpucourse.lessons.races.model import (
    HISTOGRAM_KERNELS,
    LITMUS_FENCES,
    SIM_BLOCKS,
    SIM_THREADS,
    VARIANTS,
    _bins,
    _fence_flags,
    _items,
    _seed,
    histogram_reference,
    histogram_values,
    race_histogram,
    training_data,
)
from gpucourse.measure import reference, runtime
from gpucourse.measure.harness import measure

HIST_THREADS = 256
HISTOGRAM_BINS = (1, 4, 16, 64, 256, 1024)
HISTOGRAM_ITEMS = 10**7
OUTCOMES = {
    (1, 1): "saw the flag, new data",
    (1, 0): "saw the flag, OLD data (weak)",
    (0, 1): "no flag yet, new data",
    (0, 0): "no flag yet, old data",
}


def counter_demo(threads: int = 2048, blocks: int = 8, seed: int = 0) -> pd.DataFrame:
    """``threads`` threads each do ``counter[0] += 1``: the plain simulator vs the race scheduler."""
    threads = validate.integer("threads", threads, minimum=1, maximum=weakmemory.MAX_THREADS)
    blocks = validate.integer("blocks", blocks, minimum=1, maximum=threads)
    seed = _seed(seed)
    if threads % blocks:
        raise InvalidConfig(f"threads ({threads}) must be a multiple of blocks ({blocks})")
    rows = []
    counter = np.zeros(1, np.int32)
    if runtime.is_gpu():
        d = runtime.cuda.to_device(counter)
        racing_counter[blocks, threads // blocks](d)
        rows.append({"run": f"GPU ({runtime.device().name})", "expected": threads, "counter": int(d.copy_to_host()[0])})
    else:
        racing_counter[blocks, threads // blocks](counter)
        rows.append({"run": "plain simulator (one thread at a time)", "expected": threads, "counter": int(counter[0])})
    for schedule in ("round-robin", "random"):
        counter = np.zeros(1, np.int32)
        weakmemory.run_kernel(racing_counter, blocks, threads // blocks, counter, schedule=schedule, seed=seed)
        rows.append({"run": f"race scheduler ({schedule}{', seed ' + str(seed) if schedule == 'random' else ''})",
                     "expected": threads, "counter": int(counter[0])})
    table = pd.DataFrame(rows)
    table["lost"] = table.expected - table.counter
    return table


def lost_updates(bins: int = 16, items: int = 1024, seed: int = 0) -> pd.DataFrame:
    """Counts lost by each variant: one row per (variant, where it ran).

    On a GPU: one launch of each kernel, measured. Everywhere: the race scheduler (random
    schedule, ``seed``), exact for that interleaving. In simulator mode also the plain simulator,
    which runs one thread at a time and so loses nothing."""
    bins, seed = _bins(bins), _seed(seed)
    items = _items(items, simulator=not runtime.is_gpu())
    rows = []
    if runtime.is_gpu():
        gpu_items = items
        values = histogram_values(gpu_items, seed)
        expected = histogram_reference(values, bins)
        for variant in VARIANTS:
            counts = _gpu_histogram(variant, values, bins)
            rows.append({"variant": variant, "where": "GPU (measured now)", "items": gpu_items,
                         "counted": int(counts.sum()), "wrong_bins": int((counts != expected).sum())})
        items = min(items, 1024)  # the race scheduler's copy of the experiment stays small
    else:
        values = histogram_values(items, seed)
        counts = np.zeros(bins, np.int32)
        histogram_racy[SIM_BLOCKS, SIM_THREADS](values, counts)
        expected = histogram_reference(values, bins)
        rows.append({"variant": "racy", "where": "plain simulator", "items": items, "counted": int(counts.sum()),
                     "wrong_bins": int((counts != expected).sum())})
    for variant in VARIANTS:
        counts, _ = race_histogram(variant, bins, items, seed)
        expected = histogram_reference(histogram_values(items, seed), bins)
        rows.append({"variant": variant, "where": f"race scheduler (random, seed {seed})", "items": items,
                     "counted": int(counts.sum()), "wrong_bins": int((counts != expected).sum())})
    table = pd.DataFrame(rows)
    table["lost"] = table["items"] - table.counted
    return table[["variant", "where", "items", "counted", "lost", "wrong_bins"]]


def _launch_shape(items: int) -> tuple[int, int]:
    sms = runtime.device().sm_count or 1
    return max(1, min(sms * 8, math.ceil(max(items, 1) / HIST_THREADS))), HIST_THREADS


def _gpu_histogram(variant: str, values: np.ndarray, bins: int) -> np.ndarray:
    d_values = runtime.cuda.to_device(values)
    d_counts = runtime.cuda.device_array(bins, dtype=np.int32)
    blocks, threads = _launch_shape(values.size)
    _zero_int32[math.ceil(bins / 256), 256](d_counts)
    HISTOGRAM_KERNELS[variant][blocks, threads](d_values, d_counts)
    return d_counts.copy_to_host()


def measure_histogram(bins_list=HISTOGRAM_BINS, items: int = HISTOGRAM_ITEMS, variants=VARIANTS) -> pd.DataFrame:
    """On a GPU: time of each variant (zeroing the bins included) and the counts it lost."""
    if not runtime.is_gpu():
        raise NoGPU("measure_histogram times kernels on a GPU and there is none here")
    bins_list = [_bins(b) for b in bins_list]
    items = _items(items, simulator=False)
    variants = [validate.choice("variant", v, VARIANTS) for v in variants]
    validate.fits_in_memory(items * 4 + MAX_BINS * 4, runtime.free_memory_bytes(), "the values and bins")
    values = histogram_values(items, 0)
    d_values = runtime.cuda.to_device(values)
    blocks, threads = _launch_shape(items)
    rows = []
    for bins in bins_list:
        expected = histogram_reference(values, bins)
        d_counts = runtime.cuda.device_array(bins, dtype=np.int32)
        for variant in variants:
            kernel = HISTOGRAM_KERNELS[variant]

            def run(kernel=kernel, d_counts=d_counts, bins=bins):
                _zero_int32[math.ceil(bins / 256), 256](d_counts)
                kernel[blocks, threads](d_values, d_counts)

            check = None if variant == "racy" else (
                lambda d_counts=d_counts, expected=expected: bool(np.array_equal(d_counts.copy_to_host(), expected)))
            m = measure(run, label=f"{variant} histogram, {bins} bins", check=check, bytes_moved=items * 4)
            run()
            counted = int(d_counts.copy_to_host().sum())
            rows.append({"bins": bins, "items": items, "variant": variant, "median_ms": m.median_ms,
                         "iqr_ms": m.iqr_ms, "n_samples": m.n_samples, "lost": items - counted,
                         "memory_level": m.memory_level})  # 10^7 values fit in a 50 MB L2
    return pd.DataFrame(rows)


@reference.register_sweep(
    "races.histogram", lesson="06_races", columns=("bins", "items", "variant", "median_ms", "lost"),
    description="histogram of 10^7 float32 values: racy +=, global atomics, privatised shared atomics; "
                "time (bins zeroed in each run) and counts lost, vs number of bins",
)
def _histogram_sweep() -> pd.DataFrame:
    return measure_histogram()


@functools.lru_cache(maxsize=64)
def _measured_histogram(bins: int, items: int) -> pd.DataFrame:
    """GPU timings by their real key: a seed (the race scheduler's) does not change them."""
    return measure_histogram([bins], items)


def _histogram_times(bins: int, items: int) -> tuple[pd.DataFrame | None, str]:
    if runtime.is_gpu():
        data = _measured_histogram(int(bins), max(int(items), 1)).copy()
        return data, f"measured now on {runtime.device().name}, {max(items, 1):,} items"
    rec = reference.load("races.histogram")
    if rec is None:
        return None, "no GPU here and no recording of races.histogram yet"
    recorded = sorted(set(rec.data.bins))
    nearest = min(recorded, key=lambda b: abs(math.log(b) - math.log(bins)))
    data = rec.data[rec.data.bins == nearest]
    note = "" if nearest == bins else f" (nearest recorded: {nearest} bins)"
    return data, f"{rec.caption()}, {int(data['items'].iloc[0]):,} items{note}"


def run_litmus(fences: str = "none", rounds: int = 10_000, pairs: int | None = None, spin_cap: int = 10_000,
               stress_iters: int = 64, threads: int = 256) -> pd.DataFrame:
    """On a GPU: ``rounds`` launches of ``mp_harness``, ``pairs`` producer/consumer pairs each.

    Returns one row per outcome with its count (they sum to rounds × pairs). Every spin-wait is
    capped at ``spin_cap`` polls, so the harness ends even if a producer is never resident."""
    if not runtime.is_gpu():
        raise NoGPU("run_litmus runs the message-passing test on a GPU and there is none here; "
                    "the lesson shows what the weak-memory model allows instead")
    fp, fc = _fence_flags(fences)
    rounds = validate.integer("rounds", rounds, minimum=1, maximum=10**7)
    pairs = validate.integer("pairs", pairs or runtime.device().sm_count or 1, minimum=1, maximum=65_535)
    spin_cap = validate.integer("spin_cap", spin_cap, minimum=0, maximum=10**7)
    stress_iters = validate.integer("stress_iters", stress_iters, minimum=0, maximum=10_000)
    threads = validate.block(threads)[0]
    slots = pairs * LITMUS_SLOT_STRIDE
    d_data = runtime.cuda.to_device(np.zeros(slots, np.int32))
    d_flag = runtime.cuda.to_device(np.zeros(slots, np.int32))
    d_counts = runtime.cuda.to_device(np.zeros(4, np.int64))
    d_scratch = runtime.cuda.to_device(np.zeros(1 << 22, np.int32))  # 16 MiB of stress targets
    reset_blocks = math.ceil(slots / 256)
    for r in range(rounds):
        _reset_litmus[reset_blocks, 256](d_data, d_flag)
        mp_harness[2 * pairs, threads](d_data, d_flag, d_counts, d_scratch, fp, fc, spin_cap, stress_iters, r)
    runtime.cuda.synchronize()
    counts = d_counts.copy_to_host()
    rows = [{"fences": fences, "outcome": OUTCOMES[(seen, value)], "flag_seen": seen, "data_seen": value,
             "count": int(counts[seen * 2 + value]), "runs": rounds * pairs, "spin_cap": spin_cap,
             "stress_iters": stress_iters} for (seen, value) in OUTCOMES]
    return pd.DataFrame(rows)


@reference.register_sweep(
    "races.litmus_mp", lesson="06_races", columns=("fences", "outcome", "count", "runs"),
    description="message-passing litmus test across blocks under memory stress (one pair per SM, 10,000 "
                "launches, spin-waits capped at 10,000 polls), with threadfence on neither, one or both sides",
)
def _litmus_sweep() -> pd.DataFrame:
    return pd.concat([run_litmus(f) for f in LITMUS_FENCES], ignore_index=True)


@functools.cache
def _litmus_measured() -> tuple[pd.DataFrame, str]:
    """On a GPU, once per process: the chart, its table and the read-back show the same measured counts."""
    data = pd.concat([run_litmus(f, rounds=1000) for f in LITMUS_FENCES], ignore_index=True)
    return data, f"measured now on {runtime.device().name}, 1,000 launches × one pair per SM"


def _litmus_gpu_data() -> tuple[pd.DataFrame | None, str]:
    if runtime.is_gpu():
        return _litmus_measured()
    rec = reference.load("races.litmus_mp")
    if rec is None:
        return None, "no recording yet, nothing observed, nothing shown"
    data = rec.data
    if "flag_seen" not in data:
        data = data.assign(flag_seen=data.outcome.str.startswith("saw").astype(int),
                           data_seen=(~data.outcome.str.contains("old|OLD")).astype(int))
    return data, rec.caption()


def litmus_recording() -> pd.DataFrame | None:
    """The GPU recording of the MP litmus sweep (counts per outcome), or None when there is none."""
    rec = reference.load("races.litmus_mp")
    return None if rec is None else rec.data


def litmus_recording_table() -> pd.DataFrame:
    """The GPU's counts per outcome: on a GPU those the chart above measured now (gpu-mode review G19), else the
    recording's, or one row saying plainly that no recording exists."""
    if runtime.is_gpu():
        data, source = _litmus_measured()
        return data.assign(measured=source)
    rec = reference.load("races.litmus_mp")
    if rec is None:
        return pd.DataFrame({"races.litmus_mp": ["no GPU recording yet: nothing was measured, so nothing is shown "
                                                 "(make record on a GPU captures it with provenance)"]})
    return rec.data.assign(recorded=rec.caption())


def litmus_weak_per_million(fences: str = "none") -> float | None:
    """How often the GPU showed the weak outcome (flag seen, old data), per million runs of ``fences``: measured
    now on a GPU, else recorded (None when there is neither): what the lesson's read-back quotes."""
    data, _ = _litmus_gpu_data()
    if data is None:
        return None
    rows = data[data.fences == fences]
    total = int(rows["count"].sum())
    weak = int(rows[(rows.flag_seen == 1) & (rows.data_seen == 0)]["count"].sum())
    return round(1e6 * weak / total, 3) if total else None


def train(steps: int = 25, racy: bool = False, examples: int | None = None, features: int = 4, block: int = 16,
          lr: float = 0.3, seed: int = 0) -> np.ndarray:
    """Gradient descent on least squares; the gradient comes from ``gradient_kernel``. Returns the
    loss before each step. On a GPU the kernel runs there; in the simulator under the race
    scheduler (random schedule, a new seed per step), since the plain simulator hides races."""
    steps = validate.integer("steps", steps, minimum=1, maximum=10_000)
    features = validate.integer("features", features, minimum=1, maximum=MAX_FEATURES)
    block = validate.integer("block (one thread per feature at least)", block, minimum=features, maximum=1024)
    lr = validate.number("lr", lr, minimum=0.0, maximum=10.0)
    if examples is None:
        examples = 1 << 16 if runtime.is_gpu() else 64
    x, y = training_data(examples, features, seed)
    if not runtime.is_gpu() and examples > 256:
        raise InvalidConfig(f"in the simulator train at most 256 examples (the race scheduler is slow), got {examples}")
    w = np.zeros(features, np.float32)
    grid = math.ceil(examples / block)
    losses = []
    d_x = runtime.cuda.to_device(x) if runtime.is_gpu() else None
    d_y = runtime.cuda.to_device(y) if runtime.is_gpu() else None
    for step in range(steps):
        losses.append(float(np.mean((x @ w - y) ** 2) / 2))
        grad = np.zeros(features, np.float32)
        if runtime.is_gpu():
            d_grad = runtime.cuda.to_device(grad)
            gradient_kernel[grid, block](d_x, d_y, runtime.cuda.to_device(w), d_grad, int(not racy))
            grad = d_grad.copy_to_host()
        else:
            weakmemory.run_kernel(gradient_kernel, grid, block, x, y, w, grad, int(not racy), schedule="random",
                                  seed=seed * 100_003 + step)
        w = (w - lr * grad / examples).astype(np.float32)
    return np.array(losses)
HANDOFF_ITEMS = 8  # the lab's producer block has 8 threads, each writes data[t] = t + 1


def run_handoff(kernel, producer: int = 0, spin_cap: int = 1000, schedule: str = "round-robin", seed: int = 0,
                memory: str = "weak",
                max_steps: int = 50_000) -> tuple[np.ndarray, weakmemory.RaceReport]:
    """The lab's hand-off kernel ``kernel(data, flag, out, producer, spin_cap)`` on 2 blocks × 8 threads:
    (out = [sum the consumer read, 1 if it saw the flag else 0], the report)."""
    producer = validate.integer("producer", producer, minimum=0, maximum=1)
    spin_cap = validate.integer("spin_cap", spin_cap, minimum=0, maximum=1_000_000)
    data, flag = np.zeros(HANDOFF_ITEMS, np.int32), np.zeros(1, np.int32)
    out = np.full(2, -1, np.int32)
    report = weakmemory.run_kernel(kernel, 2, HANDOFF_ITEMS, data, flag, out, producer, spin_cap, schedule=schedule,
                                   seed=seed, memory=memory, max_steps=max_steps)
    return out, report
