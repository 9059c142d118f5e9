"""Lesson 10's charts and widgets. Every chart here is the lesson's **model** (``dataparallel.model``), never a
measurement: compute from FLOPs and a datasheet's TFLOP/s × an assumed efficiency, communication from lesson
09's α-β model of a named link. Each caption says so and names its parameters.
"""

from __future__ import annotations

import ipywidgets as w
import numpy as np
import pandas as pd
import plotly.graph_objects as go

from gpucourse import validate
from gpucourse.lessons.dataparallel import model
from gpucourse.lessons.dataparallel.kernels import BUCKET_CAP_BYTES, FIRST_BUCKET_BYTES
from gpucourse.viz import charts
from gpucourse.viz.widgets import LiveChart

MIB = 2**20
KIND_STYLE = {"forward": (charts.PALETTE[2], ""), "backward": (charts.PALETTE[0], "/"),
              "all-reduce": (charts.PALETTE[1], "x"), "all-gather": (charts.PALETTE[4], "."),
              "reduce-scatter": (charts.PALETTE[5], "\\")}
CAPS_MIB = tuple(float(c) for c in np.logspace(-3, 12, 31, base=2))  # 1/8 KiB … 4 GiB
SCENARIO = {"blocks": 24, "d_model": 2048, "tokens": 2048, "ranks": 64, "link": "nvlink4", "gpu": "NVIDIA H200"}


def _layers(blocks: int, d_model: int, tokens: int) -> list[model.Layer]:
    return model.transformer_layers(blocks, d_model, tokens)


def first_bucket_bytes(cap_mib: float | None) -> int | None:
    """The first bucket's limit as the pinned PyTorch sets it (``_BucketCapacityConfig.create``,
    pytorch/pytorch#121640): 1 MiB only while ``bucket_cap_mb`` is left unset (``cap_mib`` None, the 25 MiB
    default); any cap you set, even 25, makes the first bucket as large as the others (None here)."""
    return FIRST_BUCKET_BYTES if cap_mib is None else None


def _cap_bytes(cap_mib: float | None) -> int:
    return BUCKET_CAP_BYTES if cap_mib is None else int(cap_mib * MIB)


def model_caption(link: str, ranks: int, gpu: str, efficiency: float, extra: str = "") -> str:
    return charts.source_caption("model", (
        f"the lesson's timeline, not a measurement: compute = FLOPs ÷ ({gpu} bf16 datasheet TFLOP/s × "
        f"{efficiency:g}, {model.EFFICIENCY_SOURCE.split(';')[0]}); communication = lesson 09's α-β model, "
        f"ring, {ranks} ranks on {link}{extra}"))


def gantt(tl: pd.DataFrame, title: str, source: str):
    """A Gantt chart: one row per stream (compute, communication), one bar per layer or collective (ms)."""
    fig = charts.figure(title, "time in the step (ms)", "", source, height=280)
    for kind, (colour, pattern) in KIND_STYLE.items():
        part = tl[tl.kind == kind]
        if part.empty:
            continue
        fig.add_bar(y=list(part.stream), x=list((part.end_s - part.start_s) * 1e3), base=list(part.start_s * 1e3),
                    orientation="h", name=kind, marker_color=colour, marker_pattern_shape=pattern,
                    marker_line={"color": "#333", "width": 0.3},
                    hovertext=[f"{n}: {b / MIB:.1f} MiB" if b else n for n, b in zip(part.name, part.nbytes)],
                    hoverinfo="text+x")
    fig.update_yaxes(categoryorder="array", categoryarray=["communication", "compute"])
    fig.update_layout(barmode="overlay")
    return charts.fit(fig)


def _title(s: dict, what: str) -> str:
    return (f"{what}: step {s['step_s'] * 1e3:.1f} ms, {s['collectives']} collectives, exposed communication "
            f"{s['exposed_comm_s'] * 1e3:.1f} ms ({100 * s['exposed_fraction']:.0f} % of it)")


def ddp_step(cap_mib: float | None = None, tokens: int = SCENARIO["tokens"], link: str = SCENARIO["link"],
                 ranks: int = SCENARIO["ranks"], gpu: str = SCENARIO["gpu"],
                 efficiency: float = model.EFFICIENCY) -> pd.DataFrame:
    """The modelled DDP step of the lesson's transformer; ``cap_mib`` None is PyTorch's default left unset
    (25 MiB, a 1 MiB first bucket), a number is ``bucket_cap_mb`` set (the first bucket as large:
    ``first_bucket_bytes``)."""
    if cap_mib is not None:
        cap_mib = validate.number("cap_mib", cap_mib, minimum=0.0, maximum=1 << 20)
    layers = _layers(SCENARIO["blocks"], SCENARIO["d_model"], tokens)
    return model.ddp_schedule(layers, model.collective_cost("all_reduce", link, ranks), cap_bytes=_cap_bytes(cap_mib),
                              first_bucket_bytes=first_bucket_bytes(cap_mib),
                              layer_s=lambda f: model.compute_s(f, gpu, "bf16", efficiency))


def ddp_figure(cap_mib: float | None = None, tokens: int = SCENARIO["tokens"],
               link: str = SCENARIO["link"], ranks: int = SCENARIO["ranks"], gpu: str = SCENARIO["gpu"],
               efficiency: float = model.EFFICIENCY) -> go.Figure:
    """One DDP step of the lesson's transformer: backward in reverse, a bucket's all-reduce once it is ready.
    ``cap_mib`` None: PyTorch's default, unset (25 MiB, first bucket 1 MiB); a number: ``bucket_cap_mb`` set."""
    tl = ddp_step(cap_mib, tokens, link, ranks, gpu, efficiency)
    what = ("DDP, default cap (25 MiB, first 1 MiB)" if cap_mib is None
            else f"DDP, bucket_cap_mb={cap_mib:g}")
    return gantt(tl, _title(model.summary(tl), what), model_caption(link, ranks, gpu, efficiency))


def bucket_sweep(tokens: int = SCENARIO["tokens"], link: str = SCENARIO["link"], ranks: int = SCENARIO["ranks"],
                 gpu: str = SCENARIO["gpu"], efficiency: float = model.EFFICIENCY) -> pd.DataFrame:
    """The step against ``bucket_cap_mb`` set to each of ``CAPS_MIB`` (so the first bucket is as large as the
    others, as in the pinned PyTorch)."""
    layers = _layers(SCENARIO["blocks"], SCENARIO["d_model"], tokens)
    table = model.bucket_sweep(layers, model.collective_cost("all_reduce", link, ranks),
                               [int(c * MIB) for c in CAPS_MIB], first_bucket_bytes=None,
                               layer_s=lambda f: model.compute_s(f, gpu, "bf16", efficiency))
    return table.assign(cap_mib=list(CAPS_MIB))


def bucket_plateaus(tokens: int = SCENARIO["tokens"], link: str = SCENARIO["link"], ranks: int = SCENARIO["ranks"],
                    gpu: str = SCENARIO["gpu"], efficiency: float = model.EFFICIENCY) -> pd.DataFrame:
    """The sweep read as what it is: runs of caps with the same number of collectives, each run's step time, and
    what its calls pay in α-terms alone (calls × the all-reduce's time at 0 bytes: 2(p−1)α for a ring)."""
    table = bucket_sweep(tokens, link, ranks, gpu, efficiency)
    per_call_s = model.collective_cost("all_reduce", link, ranks)(1)  # 1 byte: the α-terms, and nothing else
    rows = []
    for _, part in table.groupby((table.collectives != table.collectives.shift()).cumsum()):
        rows.append({"bucket cap (MiB)": f"{part.cap_mib.min():.3g} – {part.cap_mib.max():.3g}",
                     "collectives": int(part.collectives.iloc[0]),
                     "step (ms)": round(float(part.step_s.mean()) * 1e3, 1),
                     "exposed (ms)": round(float(part.exposed_comm_s.mean()) * 1e3, 1),
                     "their α-terms (ms)": round(int(part.collectives.iloc[0]) * per_call_s * 1e3, 1)})
    default = model.summary(ddp_step(None, tokens, link, ranks, gpu, efficiency))
    rows.append({"bucket cap (MiB)": "unset (PyTorch's 25, first 1)", "collectives": default["collectives"],
                 "step (ms)": round(default["step_s"] * 1e3, 1),
                 "exposed (ms)": round(default["exposed_comm_s"] * 1e3, 1),
                 "their α-terms (ms)": round(default["collectives"] * per_call_s * 1e3, 1)})
    return pd.DataFrame(rows)


def bucket_curve_figure(tokens: int = SCENARIO["tokens"], link: str = SCENARIO["link"],
                        ranks: int = SCENARIO["ranks"], gpu: str = SCENARIO["gpu"],
                        efficiency: float = model.EFFICIENCY, cap_mib: float | None = None) -> go.Figure:
    """The U-curve: step time and exposed communication against the bucket cap (log axis)."""
    table = bucket_sweep(tokens, link, ranks, gpu, efficiency)
    best = table.loc[table.step_s.idxmin()]
    fig = charts.figure(f"Step time against bucket size: best near {best.cap_mib:.3g} MiB "
                        f"({best.step_s * 1e3:.1f} ms)", "bucket cap (MiB, log scale)", "time (ms)",
                        model_caption(link, ranks, gpu, efficiency, f", {tokens} tokens per rank; each cap set "
                                      "explicitly, so the first bucket is as large as the others (PyTorch "
                                      "#121640); the diamond: the cap left unset"))
    fig.add_scatter(x=list(table.cap_mib), y=list(table.step_s * 1e3), name="step time", mode="lines+markers",
                    line={"color": charts.PALETTE[0]}, marker={"symbol": "circle"})
    fig.add_scatter(x=list(table.cap_mib), y=list(table.exposed_comm_s * 1e3), name="exposed communication",
                    mode="lines+markers", line={"color": charts.PALETTE[1], "dash": "dash"},
                    marker={"symbol": "square"})
    fig.add_scatter(x=list(table.cap_mib), y=list(table.compute_s * 1e3), name="compute alone",
                    mode="lines", line={"color": "#777", "dash": "dot"})
    default = model.summary(ddp_step(None, tokens, link, ranks, gpu, efficiency))
    fig.add_scatter(x=[BUCKET_CAP_BYTES / MIB], y=[default["step_s"] * 1e3], mode="markers",
                    name="PyTorch's default, bucket_cap_mb unset (25 MiB, first bucket 1 MiB)",
                    marker={"symbol": "diamond", "size": 12, "color": "#000"})
    fig.add_vline(x=BUCKET_CAP_BYTES / MIB, line_dash="dot", line_color="#000",
                  annotation_text="PyTorch's default 25 MiB", annotation_position="top left")
    if cap_mib is not None:
        fig.add_vline(x=max(cap_mib, CAPS_MIB[0]), line_color=charts.PALETTE[3],
                      annotation_text="your bucket", annotation_position="bottom right")
    fig.update_xaxes(type="log")
    fig.update_yaxes(rangemode="tozero")
    return charts.fit(fig)


def bucket_explorer() -> LiveChart:
    """The bucket-size slider over the Gantt chart, with the link, ranks and tokens per rank."""
    from gpucourse.lessons.collectives import model as collectives

    controls = {
        "cap_mib": w.SelectionSlider(options=[(f"{c:.3g}", c) for c in CAPS_MIB], value=CAPS_MIB[20],
                                     description="bucket MiB", continuous_update=False),
        "tokens": w.IntSlider(value=SCENARIO["tokens"], min=256, max=16384, step=256, description="tokens/rank",
                              continuous_update=False),
        "link": w.Dropdown(options=[k for k in collectives.LINKS if k != "loopback"], value=SCENARIO["link"],
                           description="link"),
        "ranks": w.IntSlider(value=SCENARIO["ranks"], min=2, max=64, description="ranks", continuous_update=False),
    }
    return LiveChart(controls, compute=ddp_figure, threaded=False,
                     description="The timeline model (not a measurement): move the bucket size and watch what "
                                 "overlaps; the U-curve below is the same model swept.")


# --- ZeRO / FSDP -------------------------------------------------------------------------------------------

PART_STYLE = {"parameters": (charts.PALETTE[0], ""), "gradients": (charts.PALETTE[1], "/"),
              "optimizer state": (charts.PALETTE[2], "x")}


def memory_figure(params: int = 7_000_000_000, ranks: int = 8) -> go.Figure:
    """Bytes per rank of parameters, gradients and optimizer state for DDP and ZeRO stages 1-3 (stacked)."""
    rows = [{"stage": stage, **model.memory_per_rank(params, ranks, stage)} for stage in model.STAGES]
    table = pd.DataFrame(rows)
    fig = charts.figure(f"Memory per rank, {params / 1e9:g} B parameters on {ranks} ranks (activations not counted)",
                        "", "GiB per rank", charts.source_caption(
                            "model", "counted: bf16 parameters and gradients, fp32 Adam state 12 bytes per "
                                     "parameter (ZeRO paper, Rajbhandari et al. 2020, whose fp16 takes the same "
                                     "bytes); not a measurement"))
    for part, (colour, pattern) in PART_STYLE.items():
        fig.add_bar(x=list(table.stage), y=list(table[part] / 2**30), name=part, marker_color=colour,
                    marker_pattern_shape=pattern)
    fig.update_layout(barmode="stack")
    fig.update_xaxes(title_text="sharding stage")
    return charts.fit(fig)


def traffic_table(grad_bytes: int = 2 * 7_000_000_000, ranks: int = 8) -> pd.DataFrame:
    """Bytes each rank sends per step, in units of Ψ (the gradients' bytes) and in GB, per stage."""
    rows = []
    for stage in model.STAGES:
        parts = model.traffic_per_rank(grad_bytes, ranks, stage)
        total = sum(parts.values())
        rows.append({"stage": stage, "collectives": " + ".join(parts), "GB sent per rank": round(total / 1e9, 2),
                     "× Ψ": round(total / grad_bytes, 3), "× Ψ as p → ∞": round(total / grad_bytes * ranks
                                                                               / (ranks - 1), 3)})
    return pd.DataFrame(rows)


def fsdp_step(prefetch: int = 1, tokens: int = SCENARIO["tokens"], link: str = SCENARIO["link"],
                  ranks: int = SCENARIO["ranks"], gpu: str = SCENARIO["gpu"],
                  efficiency: float = model.EFFICIENCY) -> pd.DataFrame:
    """The modelled FSDP step of the lesson's transformer (one unit per block, ``model.fsdp_units``)."""
    layers = model.fsdp_units(_layers(SCENARIO["blocks"], SCENARIO["d_model"], tokens))
    return model.fsdp_schedule(layers, model.collective_cost("all_gather", link, ranks),
                               model.collective_cost("reduce_scatter", link, ranks), prefetch=prefetch,
                               layer_s=lambda f: model.compute_s(f, gpu, "bf16", efficiency))


def fsdp_waits(prefetch: int = 1, **scenario) -> int:
    """How many times compute waits in the modelled FSDP step: a unit's compute that starts later than the
    previous one ended (the first unit: later than 0)."""
    compute = fsdp_step(prefetch, **scenario).query("stream == 'compute'")
    previous_end = [0.0, *compute.end_s.iloc[:-1]]
    return int(sum(start > end * (1 + 1e-12) + 1e-15 for start, end in zip(compute.start_s, previous_end)))


def fsdp_figure(prefetch: int = 1, tokens: int = SCENARIO["tokens"], link: str = SCENARIO["link"],
                ranks: int = SCENARIO["ranks"], gpu: str = SCENARIO["gpu"],
                efficiency: float = model.EFFICIENCY) -> go.Figure:
    """An FSDP step of the lesson's transformer (one unit per block, ``model.fsdp_units``): all-gathers
    prefetched ``prefetch`` units ahead, reduce-scatters after each unit's backward, one communication stream."""
    tl = fsdp_step(prefetch, tokens, link, ranks, gpu, efficiency)
    s = model.summary(tl)
    compute = tl[tl.stream == "compute"]
    idle = s["step_s"] - float((compute.end_s - compute.start_s).sum())
    return gantt(tl, f"FSDP, prefetch {prefetch}: step {s['step_s'] * 1e3:.1f} ms, compute waits "
                               f"{idle * 1e3:.1f} ms", model_caption(link, ranks, gpu, efficiency))


def fsdp_explorer() -> LiveChart:
    controls = {"prefetch": w.IntSlider(value=1, min=0, max=4, description="prefetch", continuous_update=False),
                "tokens": w.IntSlider(value=SCENARIO["tokens"], min=256, max=16384, step=256,
                                      description="tokens/rank", continuous_update=False)}
    return LiveChart(controls, compute=fsdp_figure, threaded=False,
                     description="The FSDP timeline model (not a measurement): prefetch 0 waits for every "
                                 "all-gather; 1 or more hides them behind the previous layer's compute.")
