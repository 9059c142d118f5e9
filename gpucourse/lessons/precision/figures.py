"""Lesson 07 "Mixed precision and tensor cores": charts and widgets."""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from gpucourse import validate
from gpucourse.lessons.precision import formats
from gpucourse.lessons.precision.experiments import SWEEP_SIZES, _measured_sweep, _measured_vocab, relative_errors
from gpucourse.lessons.precision.model import (
    DATA_KINDS,
    DATASHEET_FALLBACK_DEVICE,
    MATMUL_DTYPES,
    METHODS,
    RECIPE_LABELS,
    TrainingRun,
    _datasheet_device,
    _given_device,
    accumulate,
    accumulation_errors,
    ceiling_table,
    datasheet_tflops,
    dot_errors,
    dot_inputs,
    exact_sums,
    format_zones,
    gradient_sample,
    log2_histogram,
    reference_accumulate,
    train_all,
    underflow_share,
    unsupported_dtypes,
    vocab_ratios,
)
from gpucourse.measure import reference, runtime
from gpucourse.viz import charts, cited

METHOD_LABELS = {
    "fp16": "fp16 accumulator",
    "fp16_kahan": "fp16 accumulator + Kahan",
    "fp32": "fp16 inputs, fp32 accumulator",
    "fp32_kahan": "fp16 inputs, fp32 accumulator + Kahan",
}
MATMUL_LABELS = {
    "fp32": "FP32 (TF32 off: CUDA cores)", "tf32": "TF32 (fp32 inputs, tensor cores)",
    "fp16": "FP16", "bf16": "BF16", "fp8_e4m3": "FP8 E4M3 (scaled_mm)",
}


def accumulation_figure(data: str = "uniform", max_n: int = 4096, rows: int = 4, engine: str = "kernel",
                        errors: pd.DataFrame | None = None) -> go.Figure:
    """Error vs n (log-log) for each accumulation method, with each format's unit roundoff."""
    table = errors if errors is not None else accumulation_errors(data, max_n, rows, engine=engine)
    where = ("the Numba kernels in the simulator" if engine == "kernel" and not runtime.is_gpu()
             else f"the Numba kernels on {runtime.device().name}" if engine == "kernel"
             else "NumPy, with the kernels' roundings (the same table, tested)")
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
    return rec.data, charts.source_caption("recorded", rec.caption(bars=True)), _datasheet_device(rec)


def throughput_figure(dtypes=MATMUL_DTYPES, datasheet: bool = True, data: pd.DataFrame | None = None,
                      source: str | None = None, device_name: str | None = None) -> go.Figure:
    """Matmul TFLOP/s vs size per dtype: measured on a GPU, else recorded, else 'no data'. The datasheet
    lines are those of the device the data came from (``device_name`` when ``data`` is given)."""
    dtypes = [validate.choice("dtype", d, MATMUL_DTYPES) for d in dtypes]
    if data is None:
        data, source, (device_name, label) = _throughput_data()
    else:
        device_name, label = _given_device(device_name)
    fig = charts.figure("Matmul throughput by dtype (n × n × n)", "matrix size n (n × n × n)",
                        "TFLOP/s (counted 2n³ ÷ time)",
                        source or "")
    if data is not None and len(data):
        for index, dtype in enumerate(MATMUL_DTYPES):
            part = data[data.dtype == dtype]
            if dtype in dtypes and len(part):
                charts.line(fig, part.n, part.tflops, MATMUL_LABELS[dtype], index,
                            error_y=reference.spread(part, "tflops"))
    table = datasheet_tflops(device_name)
    if data is None or not len(data):  # no GPU, no recording: the published maxima where the table has the dtype
        # in the widest gap between the datasheet lines, above its middle: their labels stand on the lines
        levels = sorted({0.0, *(float(table[d]) for d in dtypes if table and d in table)})
        low, high = max(zip(levels, levels[1:]), key=lambda gap: gap[1] - gap[0], default=(0.0, 1.0))
        charts.no_data(fig, "No GPU measurement or recording: published maxima and the datasheet only",
                       y=low + 0.6 * (high - low), yref="y" if len(levels) > 1 else "paper")
        cited.mamf_lines(fig, dtypes, SWEEP_SIZES)
    if runtime.is_gpu():  # formats this GPU has no tensor cores for: said, not plotted at fp32 speed
        missing = unsupported_dtypes(runtime.device().compute_capability)
        said = [f"{d}: {missing[d]}" for d in dtypes if d in missing]
        if said:
            fig.add_annotation(text="<br>".join(said), xref="paper", yref="paper", x=0.01, y=0.99,
                               showarrow=False, align="left", xanchor="left", yanchor="top", font={"size": 10})
    if datasheet and table:
        shown = {}
        for dtype in dtypes:
            if dtype in table:  # a T4's datasheet has no tf32 or bf16 line
                shown.setdefault(table[dtype], []).append(dtype)
        for value, names in shown.items():
            charts.hline(fig, value, f"datasheet {'/'.join(names)} ({label}): {value:g}", faint=True)
    fig.update_xaxes(type="log", tickvals=list(SWEEP_SIZES))
    if data is None or not len(data):
        cited.cite(fig, "No GPU here and no recording of precision.matmul yet. Dotted: the datasheet of an "
                        f"{DATASHEET_FALLBACK_DEVICE} (assumed)", cited.MAMF)
    return fig


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
    else:  # no GPU, no recording: the published maxima where the table has the dtype
        cited.mamf_bars(fig, names)
    fig.update_layout(barmode="group")
    fig = _room_for_caption(fig)
    if data is None or not len(data):
        cited.cite(fig, "No GPU here and no recording of precision.matmul yet. Hatched grey: the datasheet of an "
                        f"{DATASHEET_FALLBACK_DEVICE} (assumed); no bar: not in the published table", cited.MAMF)
    return fig


def vocab_result(*, bars: bool = False) -> tuple[pd.DataFrame | None, pd.DataFrame | None, str]:
    """(the LM-head timings, their 50304/50257 ratios, where they come from) or (None, None, why).
    ``bars``: the caption says the chart draws the IQR error bars (recorded data only)."""
    if runtime.is_gpu():
        table = _measured_vocab()
        return table, vocab_ratios(table), charts.source_caption("measured", runtime.device().name)
    rec = reference.load("precision.vocab_shape")
    if rec is None:
        return None, None, charts.source_caption(
            "none", "no GPU here and no recording of precision.vocab_shape yet (run `make record` on a GPU). "
                    f"{cited.BECAUSE_LEAD} {cited.NOTHING_PUBLISHED['vocab shape']}")
    return rec.data, vocab_ratios(rec.data), charts.source_caption("recorded", rec.caption(bars=bars))


def measured_speedups() -> dict[str, str] | None:
    """bf16 and tf32 against fp32, from the best TFLOP/s of each in the throughput sweep the charts above drew
    (measured now on a GPU, cached; else recorded): what the speed-up read-back quotes (gpu-mode review G19)."""
    data, _, _ = _throughput_data()
    if data is None or not len(data):
        return None
    best = data.groupby("dtype").tflops.max()
    if "fp32" not in best or not best["fp32"] > 0:
        return None
    return {f"{dtype} / fp32": f"{best[dtype] / best['fp32']:.1f}×" for dtype in ("bf16", "tf32") if dtype in best}


def vocab_figure(data: pd.DataFrame | None = None, source: str | None = None) -> go.Figure:
    """The LM head's matmul time per dtype and pass, vocabulary 50257 beside 50304 (measured here,
    else the course's recording with its device, contract and date in the caption), IQR error bars."""
    if data is None:
        data, _, source = vocab_result(bars=True)
    fig = charts.figure("GPT-2's LM head: vocabulary 50257 vs 50304 (8192 tokens, hidden 768)",
                        "dtype and pass", "median time per matmul (ms, lower is faster)", source or "")
    if data is None or not len(data):
        cited.no_data(fig, "No GPU timing and no recording of the vocabulary shapes to show here", "vocab shape")
        return _room_for_caption(fig)
    for index, vocab in enumerate(sorted(data.vocab.unique())):
        rows = data[data.vocab == vocab]
        fig.add_bar(x=[f"{d} {p.split(':')[0]}" for d, p in zip(rows.dtype, rows["pass"])],
                    y=list(rows.median_ms), error_y=reference.spread(rows, "median_ms"),
                    name=f"vocabulary {vocab}" + (" (multiple of 64)" if vocab % 64 == 0 else ""),
                    marker={"color": charts.PALETTE[index], "line": {"color": "#000"},
                            "pattern": {"shape": ("", "/")[index % 2]}})
    fig.update_layout(barmode="group")
    fig.update_yaxes(rangemode="tozero")
    return _room_for_caption(fig)


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
        compute=lambda data, max_n: accumulation_figure(data, max_n, rows=4, engine=widget_engine(max_n)),
        threaded=threaded, description="Error of each accumulator against the exact sum, vs n.")


SIM_KERNEL_MAX_N = 4096  # past it the simulator's kernels take seconds per move (2.3 CPU-s at 16384)


def widget_engine(max_n: int) -> str:
    """The explorer's engine: the Numba kernels on a GPU, and in the simulator up to SIM_KERNEL_MAX_N terms;
    beyond, NumPy's reference, which gives the same table (tests/test_precision.py) in a tenth of a second."""
    return "kernel" if runtime.is_gpu() or max_n <= SIM_KERNEL_MAX_N else "numpy"


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
