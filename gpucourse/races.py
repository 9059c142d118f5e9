"""Lesson 06 "Races and the memory consistency model": kernels, GPU sweeps, figures and widgets.

1. Lost updates — a histogram three ways: ``histogram_racy`` (plain ``+=``), ``histogram_atomic``
   (``cuda.atomic.add`` on global memory) and ``histogram_privatised`` (shared-memory atomics per
   block, merged at the end). ``lost_updates`` counts what each loses (GPU: measured; simulator:
   the plain simulator, which hides races, beside the race scheduler); ``histogram_figure`` adds
   the time per variant (GPU, or the ``races.histogram`` recording).
2. Message passing across blocks — ``mp_kernel`` (one producer, one consumer: the litmus test the
   race scheduler runs against the weak-memory model) and ``mp_harness`` (the GPU version: many
   pairs at once under memory stress, every spin-wait capped). ``run_litmus`` runs it on a GPU;
   ``races.litmus_mp`` records it with provenance (``make record``).
3. The weak-memory model lives in ``gpucourse.weakmemory``; the pictures are here.
4. Correct patterns — ``reduce_last_block`` (NVIDIA's threadFenceReduction: atomic ticket +
   ``threadfence``) and a small training loop whose loss drifts when blocks merge their
   gradients with a racy ``+=`` (``training_figure``).
"""

from __future__ import annotations

import math
from collections import Counter

import ipywidgets as widgets
import numpy as np
import pandas as pd
import plotly.graph_objects as go
from numba import cuda  # gpucourse (imported above through its package) has already chosen the mode
from plotly.subplots import make_subplots

from gpucourse import validate, weakmemory
from gpucourse.errors import InvalidConfig, NoGPU
from gpucourse.measure import reference, runtime
from gpucourse.measure.harness import measure
from gpucourse.viz import charts
from gpucourse.viz.diagrams import _tint
from gpucourse.viz.widgets import LiveChart

MAX_BINS = 1024  # one shared-memory histogram of int32 bins per block: 4 KiB
HIST_THREADS = 256
SIM_BLOCKS, SIM_THREADS = 4, 64  # the race scheduler's launch for the histogram (256 threads)
SIM_MAX_ITEMS = 4096
GPU_MAX_ITEMS = 10**8
HISTOGRAM_BINS = (1, 4, 16, 64, 256, 1024)
HISTOGRAM_ITEMS = 10**7
VARIANTS = ("racy", "atomic", "privatised")
VARIANT_LABELS = {"racy": "racy +=", "atomic": "global atomics", "privatised": "privatised"}
LITMUS_FENCES = ("none", "producer", "consumer", "both")
LITMUS_SLOT_STRIDE = 32  # int32 elements: each pair's flag and data sit in their own 128-byte line
OUTCOMES = {
    (1, 1): "saw the flag, new data",
    (1, 0): "saw the flag, OLD data (weak)",
    (0, 1): "no flag yet, new data",
    (0, 0): "no flag yet, old data",
}
REDUCE_THREADS = 128  # the last-block reduction's shared array (blocks of up to 128 threads)
MAX_FEATURES = 32


def _items(items, *, simulator: bool) -> int:
    limit = SIM_MAX_ITEMS if simulator else GPU_MAX_ITEMS
    return validate.integer("items", items, minimum=0, maximum=limit)


def _bins(bins) -> int:
    return validate.integer("bins", bins, minimum=1, maximum=MAX_BINS)


def _seed(seed) -> int:
    return validate.integer("seed", seed, minimum=0)


# --- 1. Lost updates: the histogram -------------------------------------------------------------


@cuda.jit
def histogram_racy(values, counts):
    start, stride, nbins = cuda.grid(1), cuda.gridsize(1), counts.size
    for i in range(start, values.size, stride):
        b = min(int(values[i] * np.float32(nbins)), nbins - 1)  # fp32: value × int64 is float64
        counts[b] += 1  # load, add, store: a store by another thread in between is lost


@cuda.jit
def histogram_atomic(values, counts):
    start, stride, nbins = cuda.grid(1), cuda.gridsize(1), counts.size
    for i in range(start, values.size, stride):
        b = min(int(values[i] * np.float32(nbins)), nbins - 1)  # fp32: value × int64 is float64
        cuda.atomic.add(counts, b, 1)  # one indivisible read-modify-write at L2


@cuda.jit
def histogram_privatised(values, counts):
    local = cuda.shared.array(MAX_BINS, np.int32)  # this block's own histogram
    t, nbins = cuda.threadIdx.x, counts.size
    for b in range(t, nbins, cuda.blockDim.x):
        local[b] = 0  # shared memory starts with garbage
    cuda.syncthreads()
    start, stride = cuda.grid(1), cuda.gridsize(1)
    for i in range(start, values.size, stride):
        b = min(int(values[i] * np.float32(nbins)), nbins - 1)  # fp32: value × int64 is float64
        cuda.atomic.add(local, b, 1)  # contention only inside the block, in fast shared memory
    cuda.syncthreads()  # every thread's increments are in `local` before the merge reads it
    for b in range(t, nbins, cuda.blockDim.x):
        if local[b] != 0:
            cuda.atomic.add(counts, b, local[b])  # one global atomic per bin per block


@cuda.jit
def _zero_int32(array):
    i = cuda.grid(1)
    if i < array.size:
        array[i] = 0


@cuda.jit
def racing_counter(counter):
    counter[0] += 1


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


def _subplots(title: str, left: str, right: str, source: str) -> go.Figure:
    fig = make_subplots(rows=1, cols=2, subplot_titles=(left, right), horizontal_spacing=0.14)
    # legend and caption stacked in the bottom margin, in pixels (the legend overlapped the caption)
    bottom_px, height_px = 175, 500
    fig.update_layout(title={"text": title, "x": 0.02}, template="plotly_white", colorway=charts.PALETTE,
                      height=height_px, margin={"l": 70, "r": 20, "t": 80, "b": bottom_px}, font={"size": 13},
                      legend={"orientation": "h", "yref": "container", "y": (bottom_px - 50) / height_px,
                              "yanchor": "top", "x": 0}, barmode="group")
    charts.set_source(fig, source)
    fig.update_annotations(selector={"name": "source"}, yshift=-(bottom_px - 70))
    return fig


PATTERNS = ("", "/", "x", ".", "\\")


def histogram_figure(bins: int = 16, items: int = 1024, seed: int = 0) -> go.Figure:
    """Left: counts lost per variant. Right: time per variant (measured, recorded, or none)."""
    bins, seed = _bins(bins), _seed(seed)
    items = _items(items, simulator=not runtime.is_gpu())
    lost = lost_updates(bins, items, seed)
    timing, time_source = _histogram_times(bins, items)
    left = "lost updates counted by the race scheduler" + (
        f" and measured on {runtime.device().name}" if runtime.is_gpu() else " and the plain simulator")
    source = charts.source_caption("counted", f"{left}. Time: {time_source}")
    bin_word = "bin" if bins == 1 else "bins"
    fig = _subplots(f"Histogram, {bins} {bin_word}: updates lost and time per variant", "updates lost",
                    "time per launch", source)
    for n, (where, rows) in enumerate(lost.groupby("where", sort=False)):
        fig.add_bar(x=[VARIANT_LABELS[v] for v in rows.variant], y=list(rows.lost), name=f"lost: {where}",
                    marker={"color": charts.PALETTE[n], "pattern": {"shape": PATTERNS[n]}},
                    text=[f"{v:,} of {i:,}" for v, i in zip(rows.lost, rows["items"], strict=True)],
                    textposition="outside", row=1, col=1)
    if timing is not None and len(timing):
        fig.add_bar(x=[VARIANT_LABELS[v] for v in timing.variant], y=list(timing.median_ms),
                    name="time (median)", marker={"color": charts.PALETTE[4], "pattern": {"shape": "."}},
                    text=[f"{t:.3g} ms" for t in timing.median_ms], textposition="outside", row=1, col=2)
    else:
        domain = fig.layout.xaxis2.domain
        fig.add_annotation(text="No GPU timing to show:<br>no GPU here and no recording yet<br>(make record on a GPU)",
                           xref="paper", yref="paper", x=(domain[0] + domain[1]) / 2, y=0.5, showarrow=False,
                           font={"size": 13, "color": "#444"})
        fig.update_xaxes(showticklabels=False, row=1, col=2)
        fig.update_yaxes(showticklabels=False, row=1, col=2)
    fig.update_yaxes(title_text="updates lost (count)", row=1, col=1, rangemode="tozero")
    fig.update_yaxes(title_text="time per launch (ms)", row=1, col=2, rangemode="tozero")
    fig.update_xaxes(title_text="variant", row=1, col=1)
    fig.update_xaxes(title_text="variant", row=1, col=2)
    return fig


def _histogram_times(bins: int, items: int) -> tuple[pd.DataFrame | None, str]:
    if runtime.is_gpu():
        data = measure_histogram([bins], max(items, 1))
        return data, f"measured now on {runtime.device().name}, {max(items, 1):,} items"
    rec = reference.load("races.histogram")
    if rec is None:
        return None, "no GPU here and no recording of races.histogram yet"
    recorded = sorted(set(rec.data.bins))
    nearest = min(recorded, key=lambda b: abs(math.log(b) - math.log(bins)))
    data = rec.data[rec.data.bins == nearest]
    note = "" if nearest == bins else f" (nearest recorded: {nearest} bins)"
    return data, f"{rec.caption()}, {int(data['items'].iloc[0]):,} items{note}"


def histogram_widget(threaded: bool = True) -> LiveChart:
    """Bins (contention) and items → counts lost and time per variant."""
    if runtime.is_gpu():
        items = widgets.SelectionSlider(options=[10**4, 10**5, 10**6, 10**7], value=10**6, description="items")
    else:
        items = widgets.IntSlider(value=1024, min=0, max=SIM_MAX_ITEMS, step=256, description="items")
    return LiveChart(
        {"bins": widgets.SelectionSlider(options=[2**k for k in range(11)], value=16, description="bins"),
         "items": items, "seed": widgets.BoundedIntText(value=0, min=0, max=10**6, description="seed")},
        compute=histogram_figure, threaded=threaded,
        description="Fewer bins = more threads fighting over each counter. The seed picks the race scheduler's "
                    "interleaving.",
    )


def lost_update_timeline(bins: int = 4, items: int = 256, seed: int = 0, index: int = 0) -> go.Figure:
    """The racy histogram under the race scheduler: the interleaving that lost update ``index``."""
    _, report = race_histogram("racy", bins, items, seed)
    return weakmemory.timeline_figure(report, "lost", index)


# --- 2. Message passing across blocks --------------------------------------------------------------


@cuda.jit
def mp_kernel(data, flag, out, fence_producer, fence_consumer):
    """The MP litmus test: block 0 writes data then flag; block 1 reads flag then data."""
    if cuda.blockIdx.x == 0:
        data[0] = 1
        if fence_producer:
            cuda.threadfence()
        flag[0] = 1
    else:
        seen = flag[0]
        if fence_consumer:
            cuda.threadfence()
        out[0] = seen
        out[1] = data[0]


@cuda.jit
def handoff_kernel(data, flag, out, producer_block, spin_cap, fence):
    """Block ``producer_block`` publishes data[0] = 42 and raises a flag; another block waits for it.

    The flag is written and read with atomics: *strong* accesses in the PTX memory model, so fence +
    flag write is a release pattern and flag read + fence an acquire pattern. A plain ``flag[0] = 1``
    is a *weak* store; it would still work here only because ``threadfence`` is ``fence.sc``.
    The wait is capped at ``spin_cap`` polls: nothing guarantees the producer is resident."""
    if cuda.threadIdx.x != 0:
        return
    if cuda.blockIdx.x == producer_block:
        data[0] = 42
        if fence:
            cuda.threadfence()  # release: the data is visible before the flag
        cuda.atomic.exch(flag, 0, 1)  # a strong write of the flag
    else:
        seen = cuda.atomic.add(flag, 0, 0)  # a strong read: Numba has no volatile or ld.acquire load
        polls = 0
        while seen == 0 and polls < spin_cap:  # never wait without a cap
            seen = cuda.atomic.add(flag, 0, 0)
            polls += 1
        if fence:
            cuda.threadfence()  # acquire: reads after this see what the producer published
        out[0] = seen
        out[1] = data[0]
        out[2] = polls


@cuda.jit
def mp_harness(data, flag, counts, scratch, fence_producer, fence_consumer, spin_cap, stress_iters, round_):
    """Many MP tests at once on a GPU: blocks come in pairs; thread 0 of one block produces, thread 0 of
    the other consumes (which one alternates by round); every other thread stresses memory."""
    pair = cuda.blockIdx.x // 2
    slot = pair * LITMUS_SLOT_STRIDE
    producer = (cuda.blockIdx.x + round_) % 2 == 0
    if cuda.threadIdx.x == 0:
        if producer:
            data[slot] = 1
            if fence_producer:
                cuda.threadfence()
            flag[slot] = 1
        else:
            seen = cuda.atomic.add(flag, slot, 0)
            polls = 0
            while seen == 0 and polls < spin_cap:
                seen = cuda.atomic.add(flag, slot, 0)
                polls += 1
            if fence_consumer:
                cuda.threadfence()
            value = data[slot]
            cuda.atomic.add(counts, seen * 2 + value, 1)
    else:
        n = scratch.size
        j = (cuda.grid(1) * 97 + round_ * 31) % n
        for k in range(stress_iters):  # loads and stores to scattered lines keep the memory system busy
            scratch[j] = scratch[(j + 4096) % n] + 1
            j = (j + 1031 + k) % n


@cuda.jit
def _reset_litmus(data, flag):
    i = cuda.grid(1)
    if i < data.size:
        data[i] = 0
        flag[i] = 0


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


def litmus_figure(runs: int = 50, seed: int = 0) -> go.Figure:
    """Message passing with threadfence on neither, one or both sides: how often the weak outcome
    (flag seen, old data) appears — under the model (race scheduler) and on a GPU (measured/recorded)."""
    runs, seed = validate.integer("runs", runs, minimum=1, maximum=10_000), _seed(seed)
    gpu, gpu_source = _litmus_gpu_data()
    caption = charts.source_caption(
        "counted", f"{runs} random schedules per variant under the weak-memory MODEL. GPU: {gpu_source}")
    fig = charts.figure("Message passing: how often the reader saw the flag but old data",
                        "threadfence placed on", "runs with the weak outcome (%)", caption)
    names = {"none": "no fence", "producer": "producer only", "consumer": "consumer only", "both": "both sides"}
    tests = {"none": "MP", "producer": "MP+fence (producer only)", "consumer": "MP+fence (consumer only)",
             "both": "MP+fences"}
    model_pct, model_text = [], []
    for fences in LITMUS_FENCES:
        counts = mp_outcomes(fences, runs, seed)
        weak = counts.get((1, 0), 0)
        allowed = weakmemory.allows(tests[fences], "weak")
        model_pct.append(100 * weak / runs)
        model_text.append(f"{weak} of {runs}" + ("" if allowed else " (forbidden)"))
    fig.add_bar(x=[names[f] for f in LITMUS_FENCES], y=model_pct, text=model_text, textposition="outside",
                name="weak-memory model (race scheduler)", marker={"color": charts.PALETTE[0]})
    if gpu is not None:
        pct, text = [], []
        for fences in LITMUS_FENCES:
            rows = gpu[gpu.fences == fences]
            weak = int(rows[(rows.flag_seen == 1) & (rows.data_seen == 0)]["count"].sum()) if len(rows) else 0
            total = int(rows["count"].sum()) if len(rows) else 0
            pct.append(100 * weak / total if total else None)
            text.append(f"{weak:,} of {total:,}" if total else "not run")
        fig.add_bar(x=[names[f] for f in LITMUS_FENCES], y=pct, text=text, textposition="outside",
                    name="GPU", marker={"color": charts.PALETTE[1], "pattern": {"shape": "/"}})
    else:
        charts.no_data(fig, "GPU: no recording yet, so no GPU bars (make record on a GPU)")
        fig.layout.annotations[-1].update(x=0.99, y=0.75, xanchor="right")
    fig.update_layout(barmode="group")
    fig.update_yaxes(rangemode="tozero")
    return fig


def _litmus_gpu_data() -> tuple[pd.DataFrame | None, str]:
    if runtime.is_gpu():
        data = pd.concat([run_litmus(f, rounds=1000) for f in LITMUS_FENCES], ignore_index=True)
        return data, f"measured now on {runtime.device().name}, 1,000 launches × one pair per SM"
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
    """The recording's counts per outcome, or one row saying plainly that no recording exists."""
    rec = reference.load("races.litmus_mp")
    if rec is None:
        return pd.DataFrame({"races.litmus_mp": ["no GPU recording yet: nothing was measured, so nothing is shown "
                                                 "(make record on a GPU captures it with provenance)"]})
    return rec.data.assign(recorded=rec.caption())


# --- 3. Pictures of the model ------------------------------------------------------------------------


def _canvas(title: str, height: int = 430) -> go.Figure:
    fig = go.Figure()
    fig.update_layout(title={"text": title, "x": 0.02}, template="plotly_white", height=height,
                      margin={"l": 10, "r": 10, "t": 50, "b": 70}, showlegend=False)  # b: room for the caption
    fig.update_xaxes(visible=False, range=[0, 100])
    fig.update_yaxes(visible=False, range=[-1, 60])
    return fig


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


def memory_model_picture(fenced: bool = False) -> go.Figure:
    """Two SMs and memory: block 0 writes data then flag, block 1 reads flag then data.

    Without fences the flag can reach block 1 before the data; with a threadfence on both sides
    the flag carries the data with it."""
    title = ("With threadfence on both sides: the flag brings the data with it" if fenced
             else "No fences: block 1 can see the new flag and still the old data")
    fig = _canvas(title)
    _box(fig, 2, 30, 46, 58, "", _tint(charts.PALETTE[0], 0.1), text_y=55)
    fig.add_annotation(x=24, y=55.5, text="<b>SM 0 · block 0 (producer)</b>", showarrow=False)
    _box(fig, 54, 30, 98, 58, "", _tint(charts.PALETTE[1], 0.12))
    fig.add_annotation(x=76, y=55.5, text="<b>SM 1 · block 1 (consumer)</b>", showarrow=False)
    fence_fill = _tint(charts.PALETTE[2], 0.25)
    steps_0 = ["data[0] = 1", "threadfence()  ← publish" if fenced else "", "flag[0] = 1"]
    steps_1 = ["r0 = flag[0]  → 1", "threadfence()  ← catch up" if fenced else "",
               "r1 = data[0]  → " + ("1" if fenced else "0 (stale!)")]
    for i, (a, b) in enumerate(zip(steps_0, steps_1, strict=True)):
        y = 49 - 6 * i
        if a:
            _box(fig, 6, y - 2.3, 42, y + 2.3, a, "#FFFFFF" if "threadfence" not in a else fence_fill, size=12)
        if b:
            colour = "#FFFFFF" if "threadfence" not in b else fence_fill
            _box(fig, 58, y - 2.3, 94, y + 2.3, b, _tint(charts.PALETTE[3], 0.3) if "stale" in b else colour, size=12)
    _box(fig, 20, 3, 80, 20, "", "#EFEFEF")
    fig.add_annotation(x=50, y=17.5, text="<b>L2 / global memory</b>", showarrow=False)
    _box(fig, 28, 6, 46, 13, "data[0]: 0 → 1", "#FFFFFF")
    _box(fig, 54, 6, 72, 13, "flag[0]: 0 → 1", "#FFFFFF")
    if fenced:
        _arrow(fig, 16, 30, 34, 13.5, "① data published", charts.PALETTE[2])
        _arrow(fig, 36, 30, 60, 13.5, "② then the flag", charts.PALETTE[2])
        _arrow(fig, 68, 13.5, 80, 30, "③ flag seen → data seen", charts.PALETTE[2])
    else:
        _arrow(fig, 36, 30, 60, 13.5, "① flag arrives first", charts.PALETTE[3])
        _arrow(fig, 16, 30, 34, 13.5, "③ data arrives late", charts.PALETTE[3])
        _arrow(fig, 68, 13.5, 80, 30, "② flag seen, data still old", charts.PALETTE[3])
    charts.set_source(fig, charts.source_caption("model", "a drawing of the CUDA/PTX memory model's message "
                                                          "passing (PTX ISA, memory consistency model)"))
    return fig


def scopes_picture() -> go.Figure:
    """Nested scopes of the CUDA/PTX memory model, and which operation orders memory at each."""
    fig = _canvas("Scopes: a fence or barrier orders memory only for threads inside its scope", height=470)
    blue, green, orange, pink = (_tint(charts.PALETTE[i], a) for i, a in ((0, .1), (2, .12), (1, .12), (4, .15)))
    layers = [
        (2, 2, 98, 58, "#F2F2F2", "<b>system</b> (GPU + CPU + other GPUs): threadfence_system()", 55.5),
        (6, 5, 94, 51, blue, "<b>GPU</b> (all blocks of all kernels): threadfence() = fence.sc.gpu; atomics",
         48.5),
        (10, 8, 90, 44, green, "<b>cluster</b> (sm_90: blocks of one cluster, distributed shared memory)", 41.5),
        (14, 11, 86, 37, orange, "<b>block</b> (CTA): syncthreads(), threadfence_block(), shared memory", 34.5),
        (18, 14, 58, 29, pink, "<b>warp</b>: syncwarp()", 26.5),
    ]
    for x0, y0, x1, y1, colour, label, ty in layers:
        _box(fig, x0, y0, x1, y1, "", colour)
        fig.add_annotation(x=(x0 + x1) / 2, y=ty, text=label, showarrow=False, font={"size": 12})
    for i in range(4):
        _box(fig, 21 + 9 * i, 17, 28 + 9 * i, 23, f"thread {i}", "#FFFFFF", size=10)
    _box(fig, 62, 15, 84, 28, "another block:<br>syncthreads and<br>threadfence_block<br>do not reach it", "#FFFFFF",
         dash="dash", size=11)
    charts.set_source(fig, charts.source_caption("model", "a drawing of the scopes of the PTX ISA's memory "
                                                          "consistency model"))
    return fig


# --- 4. Correct patterns ---------------------------------------------------------------------------------


@cuda.jit
def reduce_last_block(values, partial, ticket, out, fence):
    """Sum ``values``: every block sums its share, publishes it, takes a ticket; the last block adds
    the partial sums (NVIDIA's threadFenceReduction; the reader-side fence is the PTX model's acquire)."""
    s = cuda.shared.array(REDUCE_THREADS, np.float64)
    last = cuda.shared.array(1, np.int32)
    t = cuda.threadIdx.x
    acc = 0.0
    for i in range(cuda.grid(1), values.size, cuda.gridsize(1)):
        acc += values[i]
    s[t] = acc
    cuda.syncthreads()
    step = cuda.blockDim.x // 2
    while step > 0:  # tree sum in shared memory (blockDim.x is a power of two)
        if t < step:
            s[t] += s[t + step]
        cuda.syncthreads()
        step //= 2
    if t == 0:
        partial[cuda.blockIdx.x] = s[0]
        if fence:
            cuda.threadfence()  # release: the partial sum is visible before the ticket is taken
        taken = cuda.atomic.inc(ticket, 0, cuda.gridDim.x - 1)  # wraps to 0 for the next launch
        last[0] = taken == cuda.gridDim.x - 1
    cuda.syncthreads()
    if last[0] and t == 0:
        if fence:
            cuda.threadfence()  # acquire: see every partial sum published before its ticket
        total = 0.0
        for b in range(cuda.gridDim.x):
            total += partial[b]
        out[0] = total


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


@cuda.jit
def gradient_kernel(x, y, w, grad, atomic_merge):
    """Least-squares gradient: each block sums its examples' gradients in shared memory, then merges
    them into ``grad`` — with an atomic (correct) or with a plain ``+=`` (blocks race)."""
    part = cuda.shared.array(MAX_FEATURES, np.float32)
    t, nf = cuda.threadIdx.x, w.size
    if t < nf:
        part[t] = 0.0
    cuda.syncthreads()
    i = cuda.grid(1)
    if i < y.size:
        err = -y[i]
        for j in range(nf):
            err += x[i, j] * w[j]
        for j in range(nf):
            cuda.atomic.add(part, j, err * x[i, j])
    cuda.syncthreads()
    if t < nf:
        if atomic_merge:
            cuda.atomic.add(grad, t, part[t])
        else:
            grad[t] += part[t]  # the bug: another block's merge between this load and store is lost


def training_data(examples: int, features: int = 4, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    examples = validate.integer("examples", examples, minimum=1, maximum=10**7)
    features = validate.integer("features", features, minimum=1, maximum=MAX_FEATURES)
    rng = np.random.default_rng(_seed(seed))
    x = rng.standard_normal((examples, features)).astype(np.float32)
    w_true = np.linspace(1.0, -1.0, features).astype(np.float32)
    y = (x @ w_true + 0.1 * rng.standard_normal(examples)).astype(np.float32)
    return x, y


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


def training_figure(steps: int = 25, seed: int = 0) -> go.Figure:
    """Loss per step: blocks merging gradients with an atomic vs with a racy ``+=``, and NumPy's exact run."""
    steps, seed = validate.integer("steps", steps, minimum=2, maximum=10_000), _seed(seed)
    examples, block = (1 << 16, 256) if runtime.is_gpu() else (64, 16)
    correct = train(steps, racy=False, examples=examples, block=block, seed=seed)
    racy = train(steps, racy=True, examples=examples, block=block, seed=seed)
    x, y = training_data(examples, 4, seed)
    w, exact = np.zeros(4, np.float32), []
    for _ in range(steps):  # the CPU reference: the full gradient, in float64
        exact.append(float(np.mean((x @ w - y) ** 2) / 2))
        w = w - 0.3 * (x.T.astype(np.float64) @ (x @ w - y)) / examples
    shape = f"{examples:,} examples in blocks of {block}"
    where = (charts.source_caption("measured", f"{runtime.device().name}, {shape}") if runtime.is_gpu() else
             charts.source_caption("counted", f"the race scheduler (random schedules, seed {seed}), {shape}"))
    gap = 100 * (racy[-1] / correct[-1] - 1)
    fig = charts.figure(f"The same training loop, {steps} steps: racy gradient merges end {gap:+.0f} % off in loss",
                        "training step (index)", "loss (mean squared error ÷ 2)", where)
    charts.line(fig, range(steps), exact, "NumPy reference (exact gradient)", 2, dash="dot")
    charts.line(fig, range(steps), correct, "blocks merge with cuda.atomic.add", 0)
    charts.line(fig, range(steps), racy, "blocks merge with a plain += (race)", 3)
    fig.update_yaxes(type="log")
    return fig


# --- Lab 06 helpers: run a learner's kernels under the race scheduler ----------------------------------

LAB_BLOCKS, LAB_THREADS = 4, 64
HANDOFF_ITEMS = 8  # the lab's producer block has 8 threads, each writes data[t] = t + 1


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


def show_histogram(kernel, bins: int = 16, items: int = 256, seed: int = 0) -> go.Figure:
    """Your histogram under a random interleaving (the microscope's race scheduler) beside NumPy's."""
    counts, expected, report = check_histogram(kernel, bins, items, "random", seed)
    lost = int(expected.sum() - counts.sum())
    fig = charts.figure(f"{report.kernel}: {lost:,} of {items:,} counts lost under a random interleaving (seed {seed})",
                        "bin (index)", "count (items)", charts.source_caption("counted", report.caption))
    fig.add_bar(x=list(range(bins)), y=list(expected), name="NumPy (correct)",
                marker={"color": charts.PALETTE[2], "pattern": {"shape": "/"}})
    fig.add_bar(x=list(range(bins)), y=list(counts), name=f"{report.kernel} (race scheduler)",
                marker={"color": charts.PALETTE[0]})
    fig.update_layout(barmode="group")
    return fig


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


def show_handoff(kernel, schedule: str = "round-robin", seed: int = 0) -> go.Figure:
    """Your hand-off under the weak-memory model: the stale read it made, or what it computed."""
    out, report = run_handoff(kernel, 0, 1000, schedule, seed, "weak")
    of_data = list(report.stale_reads()["array"] == "data")
    if any(of_data):
        return weakmemory.timeline_figure(report, "stale", of_data.index(True))
    expected = HANDOFF_ITEMS * (HANDOFF_ITEMS + 1) // 2
    fig = charts.figure(f"{report.kernel}: flag seen = {out[1]}, sum read = {out[0]} (expected {expected}); "
                        f"no stale read of data", "", "", charts.source_caption("counted", report.caption), height=200)
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    return fig
