"""Lesson 06 "Races and the memory consistency model": charts and widgets."""

from __future__ import annotations

import ipywidgets as widgets
import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from gpucourse import validate
from gpucourse.lessons.races import weakmemory
from gpucourse.lessons.races.experiments import (
    HANDOFF_ITEMS,
    _histogram_times,
    _litmus_gpu_data,
    lost_updates,
    run_handoff,
    train,
)
from gpucourse.lessons.races.model import (
    LITMUS_FENCES,
    _arrow,
    _bins,
    _box,
    _items,
    _seed,
    check_histogram,
    mp_outcomes,
    race_histogram,
    training_data,
)
from gpucourse.measure import runtime
from gpucourse.viz import charts, cited
from gpucourse.viz.diagrams import _tint
from gpucourse.viz.widgets import LiveChart

VARIANT_LABELS = {"racy": "racy +=", "atomic": "global atomics", "privatised": "privatised"}


def _subplots(title: str, left: str, right: str, source: str) -> go.Figure:
    fig = make_subplots(rows=1, cols=2, subplot_titles=(left, right), horizontal_spacing=0.14)
    # legend and caption stacked in the bottom margin, in pixels (charts.legend_below, once the bars are in)
    fig.update_layout(title={"text": title, "x": 0.02}, template="plotly_white", colorway=charts.PALETTE,
                      height=500, margin={"l": 70, "r": 20, "t": 80, "b": 175}, font={"size": 13},
                      barmode="group")
    charts.set_source(fig, source)
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
        cited.because(fig, "atomics")
    fig.update_yaxes(title_text="updates lost (count)", row=1, col=1, rangemode="tozero")
    fig.update_yaxes(title_text="time per launch (ms)", row=1, col=2, rangemode="tozero")
    fig.update_xaxes(title_text="variant", row=1, col=1)
    fig.update_xaxes(title_text="variant", row=1, col=2)
    return charts.legend_below(fig, 64)


WIDGET_SIM_ITEMS = 1024  # the explorer's most values in the simulator (a move: four traced launches)


def histogram_widget(threaded: bool = True) -> LiveChart:
    """Bins (contention) and items → counts lost and time per variant."""
    if runtime.is_gpu():
        items = widgets.SelectionSlider(options=[10**4, 10**5, 10**6, 10**7], value=10**6, description="items")
    else:
        # up to 1,024 values a move traces four launches in under a second on one core (0.88 CPU-s at 1,024
        # bins, the worst); the simulator's 4,096 (SIM_MAX_ITEMS) took 2.5 s: call histogram_figure for more
        items = widgets.IntSlider(value=WIDGET_SIM_ITEMS, min=0, max=WIDGET_SIM_ITEMS, step=128,
                                  description="items")
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
        cited.no_data(fig, "GPU: no recording yet, so no GPU bars (make record on a GPU)", "litmus")
        fig.layout.annotations[-1].update(x=0.99, y=0.75, xanchor="right")
    fig.update_layout(barmode="group")
    fig.update_yaxes(rangemode="tozero")
    return fig


# --- 3. Pictures of the model ------------------------------------------------------------------------


def _canvas(title: str, height: int = 430) -> go.Figure:
    fig = go.Figure()
    fig.update_layout(title={"text": title, "x": 0.02}, template="plotly_white", height=height,
                      margin={"l": 10, "r": 10, "t": 50, "b": 70}, showlegend=False)  # b: room for the caption
    fig.update_xaxes(visible=False, range=[0, 100])
    fig.update_yaxes(visible=False, range=[-1, 60])
    return fig


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
