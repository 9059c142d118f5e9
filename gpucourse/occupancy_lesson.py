"""Lesson 05 "Occupancy": the lesson's kernels, their real resource use, the calculator's charts,
the SM picture, and the GPU sweeps (latency hiding; our calculator against the driver).

* ``KERNELS``: the lesson's kernels (memory-bound copies, compute-bound FMA chains, a
  register-hungry kernel and a shared-memory reduction) with their signatures.
* ``usage_table(max_registers=None)``: registers / shared memory / spills of each, from
  numba-cuda on a GPU, else from PTX + ptxas, else "unknown" (gpucourse.measure.ptxinfo).
* ``sm_picture``: one SM's warp slots, register file and shared memory filled by resident blocks.
* ``occupancy_charts``: the calculator's three classic charts (vs block size, registers,
  shared memory), each point coloured *and* shaped by the limiter.
* ``occupancy_explorer()``: a LiveChart over kernel, block size, max_registers, dynamic
  shared memory (or a typed register count when the toolchain cannot tell).
* GPU sweeps (``reference.register_sweep``): memory-bound and compute-bound kernel speed vs
  occupancy (lowered with dynamic shared-memory padding), and calculator vs driver
  (``cuOccupancyMaxActiveBlocksPerMultiprocessor``). Without a GPU their charts show the
  recording, or say there is none.
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from numba import cuda, float32

from gpucourse.errors import InvalidConfig, NoGPU
from gpucourse.measure import reference, runtime
from gpucourse.measure.ptxinfo import ResourceUsage, gpu_kernel, resource_usage, resource_usage_all
from gpucourse.occupancy import (
    ARCHITECTURES,
    KB,
    LIMITERS,
    SUB_PARTITIONS,
    WARP_SIZE,
    architecture,
    occupancy,
)
from gpucourse.viz import charts

LESSON = "05_occupancy"
FMA_B = np.float32(0.9990234375)  # exactly representable: the chain neither overflows nor underflows
FMA_C = np.float32(0.0009765625)
ACCUMULATORS = 48  # live values per thread in the register-hungry kernel


def _room_for_caption(fig: go.Figure) -> go.Figure:
    """charts.figure's caption sits below its bottom margin once a legend is shown; make room for it."""
    fig.update_layout(height=(fig.layout.height or 420) + 40, margin={"b": 140})
    return fig


# --- the lesson's kernels (module level, so the PTX compiler can find them by name) -----------


@cuda.jit
def copy_kernel(dst, src):
    """Memory-bound: one 4-byte load and one store per thread; little work to overlap."""
    i = cuda.grid(1)
    if i < src.size:
        dst[i] = src[i]


@cuda.jit
def copy_ilp4_kernel(dst, src):
    """Memory-bound with instruction-level parallelism: four independent loads in flight per thread."""
    i = cuda.grid(1)
    stride = cuda.gridsize(1)
    n = src.size
    if i + 3 * stride < n:
        a = src[i]
        b = src[i + stride]
        c = src[i + 2 * stride]
        d = src[i + 3 * stride]
        dst[i] = a
        dst[i + stride] = b
        dst[i + 2 * stride] = c
        dst[i + 3 * stride] = d
    else:
        for k in range(4):
            j = i + k * stride
            if j < n:
                dst[j] = src[j]


@cuda.jit
def fma_kernel(out, iterations):
    """Compute-bound, one dependent chain: each FMA waits for the previous one (no ILP)."""
    i = cuda.grid(1)
    a = float32(i & 15) * FMA_C
    for _ in range(iterations):
        a = a * FMA_B + FMA_C
    if i < out.size:
        out[i] = a


@cuda.jit
def fma_ilp4_kernel(out, iterations):
    """Compute-bound, four independent chains: the same FMAs, four at a time (ILP 4)."""
    i = cuda.grid(1)
    a0 = float32(i & 15) * FMA_C
    a1 = a0 + FMA_C
    a2 = a1 + FMA_C
    a3 = a2 + FMA_C
    for _ in range(iterations // 4):
        a0 = a0 * FMA_B + FMA_C
        a1 = a1 * FMA_B + FMA_C
        a2 = a2 * FMA_B + FMA_C
        a3 = a3 * FMA_B + FMA_C
    if i < out.size:
        out[i] = a0 + a1 + a2 + a3


@cuda.jit
def accumulators_kernel(out, x, iterations):
    """Register-hungry: 48 live accumulators per thread (the loops unroll into registers)."""
    i = cuda.grid(1)
    acc = cuda.local.array(ACCUMULATORS, float32)
    for k in range(ACCUMULATORS):
        acc[k] = x[(i + k) % x.size]
    for _ in range(iterations):
        for k in range(ACCUMULATORS):
            acc[k] = acc[k] * FMA_B + FMA_C
    total = float32(0)
    for k in range(ACCUMULATORS):
        total += acc[k]
    if i < out.size:
        out[i] = total


@cuda.jit
def block_sum_kernel(out, x):
    """Shared memory: a 1024-float tile (4 KB of static shared memory per block), tree reduction."""
    tile = cuda.shared.array(1024, float32)
    t = cuda.threadIdx.x
    i = cuda.grid(1)
    tile[t] = x[i] if i < x.size else float32(0)
    cuda.syncthreads()
    stride = cuda.blockDim.x // 2
    while stride > 0:
        if t < stride:
            tile[t] += tile[t + stride]
        cuda.syncthreads()
        stride //= 2
    if t == 0:
        out[cuda.blockIdx.x] = tile[0]


@dataclass(frozen=True)
class LessonKernel:
    name: str
    kernel: object
    signature: str
    role: str


KERNELS = {
    k.name: k
    for k in (
        LessonKernel("copy", copy_kernel, "void(float32[::1], float32[::1])", "memory-bound, ILP 1"),
        LessonKernel(
            "copy_ilp4", copy_ilp4_kernel, "void(float32[::1], float32[::1])", "memory-bound, ILP 4"
        ),
        LessonKernel("fma", fma_kernel, "void(float32[::1], int32)", "compute-bound, ILP 1"),
        LessonKernel("fma_ilp4", fma_ilp4_kernel, "void(float32[::1], int32)", "compute-bound, ILP 4"),
        LessonKernel(
            "accumulators", accumulators_kernel, "void(float32[::1], float32[::1], int32)", "register-hungry"
        ),
        LessonKernel(
            "block_sum", block_sum_kernel, "void(float32[::1], float32[::1])", "static shared memory"
        ),
    )
}
TYPED = "typed"  # the explorer's "I'll type the register count" choice


def lesson_kernel(name: str) -> LessonKernel:
    if name not in KERNELS:
        raise InvalidConfig(f"kernel must be one of {', '.join(KERNELS)}; got {name!r}")
    return KERNELS[name]


def kernel_source(name: str) -> str:
    """The source of a lesson kernel, as CI ran it (for the learner to read)."""
    import inspect

    from gpucourse.measure.ptxinfo import python_function

    return inspect.getsource(python_function(lesson_kernel(name).kernel)).rstrip()


def lesson_cc() -> tuple[int, int]:
    """The compute capability the lesson models: the GPU's, or cc 9.0 (H100/H200) in the simulator."""
    cc = tuple(runtime.device().compute_capability)
    return cc if cc in ARCHITECTURES else (9, 0)


# --- resource usage ----------------------------------------------------------------------------


def usage(name: str, max_registers: int | None = None, cc=None) -> ResourceUsage:
    k = lesson_kernel(name)
    return resource_usage(k.kernel, k.signature, cc or lesson_cc(), max_registers)


def usage_table(max_registers: int | None = None, cc=None, names=None) -> pd.DataFrame:
    """Registers, static shared memory and spills of the lesson's kernels (one compile for all)."""
    chosen = [lesson_kernel(n) for n in (names or KERNELS)]
    found = resource_usage_all([(k.kernel, k.signature) for k in chosen], cc or lesson_cc(), max_registers)
    rows = []
    for k, u in zip(chosen, found, strict=True):
        rows.append(
            {
                "kernel": k.name,
                "role": k.role,
                "registers": u.registers if u.known else "unknown",
                "static_shared_bytes": u.shared_bytes if u.known else "unknown",
                "spill_stores_bytes": u.spill_store_bytes if u.spill_store_bytes is not None else "—",
                "local_bytes_per_thread": u.stack_frame_bytes if u.stack_frame_bytes is not None else "—",
                "source": u.source if u.known else f"unknown: {u.reason}",
                "seconds": round(u.seconds, 2),
            }
        )
    return pd.DataFrame(rows)


# --- the calculator's three classic charts -----------------------------------------------------

_SINGLE_STYLE = {
    "registers": (charts.PALETTE[0], "circle"),
    "shared memory": (charts.PALETTE[1], "square"),
    "warps": (charts.PALETTE[2], "diamond"),
    "blocks": (charts.PALETTE[3], "triangle-up"),
}
_TIE_STYLES = [
    (charts.PALETTE[4], "x"),
    (charts.PALETTE[5], "star"),
    (charts.PALETTE[6], "cross"),
    (charts.PALETTE[7], "triangle-down"),
    ("#777777", "hexagon"),
    ("#999999", "pentagon"),
]
CANNOT_LAUNCH = "cannot launch"


def limiter_style(limiter: str) -> tuple[str, str]:
    """(colour, marker symbol) of a limiter name; ties get their own colour and shape."""
    if limiter in _SINGLE_STYLE:
        return _SINGLE_STYLE[limiter]
    if limiter == CANNOT_LAUNCH:
        return "#000000", "x-thin-open"
    ties = [" + ".join(c) for c in _tie_order()]
    index = ties.index(limiter) if limiter in ties else len(ties)
    return _TIE_STYLES[index % len(_TIE_STYLES)]


def _tie_order() -> list[tuple[str, ...]]:
    from itertools import combinations

    return [c for n in (2, 3, 4) for c in combinations(LIMITERS, n)]


AXES = {
    "threads_per_block": "threads per block",
    "registers_per_thread": "registers per thread",
    "shared_bytes_per_block": "shared memory per block (KB)",
}


def sweep_axis(
    axis: str, threads_per_block: int, registers_per_thread: int, shared_bytes_per_block: int = 0, cc=(9, 0)
) -> pd.DataFrame:
    """The calculator along one axis, the other two held: x, occupancy %, blocks, limiter."""
    if axis not in AXES:
        raise InvalidConfig(f"axis must be one of {', '.join(AXES)}; got {axis!r}")
    arch = architecture(cc)
    if axis == "threads_per_block":
        xs = list(range(WARP_SIZE, 1025, WARP_SIZE))
    elif axis == "registers_per_thread":
        xs = list(range(8, 256, 1))
    else:
        xs = list(range(0, arch.shared_per_block_optin_bytes + 1, 512))
    rows = []
    for x in xs:
        args = {
            "threads_per_block": threads_per_block,
            "registers_per_thread": registers_per_thread,
            "shared_bytes_per_block": shared_bytes_per_block,
            axis: x,
        }
        r = occupancy(
            args["threads_per_block"], args["registers_per_thread"], args["shared_bytes_per_block"], cc
        )
        rows.append(
            {
                "x": x / KB if axis == "shared_bytes_per_block" else x,
                "occupancy_pct": r.occupancy_pct,
                "active_blocks": r.active_blocks,
                "active_warps": r.active_warps,
                "limiter": r.limiter if r.launches else CANNOT_LAUNCH,
            }
        )
    return pd.DataFrame(rows)


def _add_axis_traces(
    fig: go.Figure,
    data: pd.DataFrame,
    axis: str,
    current_x: float | None,
    *,
    row=None,
    col=None,
    shown: set | None = None,
) -> None:
    where = {"row": row, "col": col} if row else {}
    fig.add_scatter(
        x=data.x,
        y=data.occupancy_pct,
        mode="lines",
        line={"color": "#bbbbbb", "width": 1},
        name="occupancy",
        showlegend=False,
        hoverinfo="skip",
        **where,
    )
    for limiter, group in data.groupby("limiter", sort=False):
        colour, symbol = limiter_style(limiter)
        first = shown is None or limiter not in shown
        if shown is not None:
            shown.add(limiter)
        fig.add_scatter(
            x=group.x,
            y=group.occupancy_pct,
            mode="markers",
            name=limiter if limiter == CANNOT_LAUNCH else f"limited by {limiter}",
            legendgroup=limiter,
            showlegend=first,
            marker={
                "color": colour,
                "symbol": symbol,
                "size": 5 if len(data) > 64 else 7,
                "line": {"width": 0.5, "color": "#000"},
            },
            customdata=np.stack([group.active_blocks, group.active_warps], axis=-1),
            hovertemplate=(
                f"{AXES[axis]}: %{{x}}<br>occupancy %{{y:.1f}} %<br>%{{customdata[0]}} blocks, "
                f"%{{customdata[1]}} warps<br>limited by {limiter}<extra></extra>"
            ),
            **where,
        )
    if current_x is not None:
        fig.add_vline(x=current_x, line_dash="dash", line_color="#000", opacity=0.6, **where)


def occupancy_chart(
    axis: str,
    threads_per_block: int = 256,
    registers_per_thread: int = 32,
    shared_bytes_per_block: int = 0,
    cc=(9, 0),
) -> go.Figure:
    """One classic chart: occupancy vs ``axis``; the dashed line marks the current configuration."""
    data = sweep_axis(axis, threads_per_block, registers_per_thread, shared_bytes_per_block, cc)
    now = occupancy(threads_per_block, registers_per_thread, shared_bytes_per_block, cc)
    current = {
        "threads_per_block": threads_per_block,
        "registers_per_thread": registers_per_thread,
        "shared_bytes_per_block": shared_bytes_per_block / KB,
    }[axis]
    arch = architecture(cc)
    fig = charts.figure(
        f"Occupancy vs {AXES[axis]} (cc {arch.name}); now: {now.occupancy_pct:.1f} %"
        + (f", limited by {now.limiter}" if now.launches else ", cannot launch"),
        AXES[axis],
        "occupancy (% of warp slots)",
        charts.source_caption("model", f"NVIDIA's occupancy rules for cc {arch.name} (exact, not a timing)"),
    )
    _add_axis_traces(fig, data, axis, current)
    fig.update_yaxes(range=[0, 105])
    return _room_for_caption(fig)


def occupancy_charts(
    threads_per_block: int = 256,
    registers_per_thread: int = 32,
    shared_bytes_per_block: int = 0,
    cc=(9, 0),
    *,
    registers_source: str = "",
    title: str | None = None,
) -> go.Figure:
    """The calculator's three classic charts side by side, coloured and shaped by the limiter."""
    from plotly.subplots import make_subplots

    now = occupancy(threads_per_block, registers_per_thread, shared_bytes_per_block, cc)
    arch = architecture(cc)
    fig = make_subplots(
        rows=1,
        cols=3,
        shared_yaxes=True,
        horizontal_spacing=0.04,
        subplot_titles=("vs block size", "vs registers per thread", "vs shared memory per block"),
    )
    shown: set = set()
    current = {
        "threads_per_block": threads_per_block,
        "registers_per_thread": registers_per_thread,
        "shared_bytes_per_block": shared_bytes_per_block / KB,
    }
    for col, axis in enumerate(AXES, start=1):
        data = sweep_axis(axis, threads_per_block, registers_per_thread, shared_bytes_per_block, cc)
        _add_axis_traces(fig, data, axis, current[axis], row=1, col=col, shown=shown)
        fig.update_xaxes(title_text=AXES[axis], row=1, col=col)
    headline = (
        f"{now.active_blocks} blocks × {now.warps_per_block} warps = {now.occupancy_pct:.1f} % "
        f"occupancy, limited by {now.limiter}"
        if now.launches
        else f"cannot launch: {now.reason}"
    )
    fig.update_layout(
        title={
            "text": title
            or f"cc {arch.name} · {threads_per_block} threads, {registers_per_thread} registers, "
            f"{shared_bytes_per_block:,} B shared → {headline}",
            "x": 0.02,
            "font": {"size": 14},
        },
        template="plotly_white",
        height=480,
        margin={"l": 70, "r": 20, "t": 80, "b": 160},
        legend={"orientation": "h", "y": -0.3, "x": 0},
        font={"size": 12},
        colorway=charts.PALETTE,
    )
    fig.update_yaxes(title_text="occupancy (% of warp slots)", range=[0, 105], row=1, col=1)
    if registers_source:
        fig.layout.title.text += f"<br><sup>registers: {html.escape(registers_source)}</sup>"
    detail = f"NVIDIA's occupancy rules for cc {arch.name} (exact, not a timing)"
    charts.set_source(fig, charts.source_caption("model", detail))
    fig.layout.annotations[-1].y = -0.5
    return fig


def learner_curve_figure(occupancy_fn, registers_per_thread: int, shared_bytes_per_block: int = 0, cc=(9, 0)):
    """Occupancy vs block size computed by a learner's function (lab 05), shaped by the limiters it names.

    ``occupancy_fn(threads, registers, shared_bytes, cc)`` returns a dict with "blocks",
    "occupancy_pct" and "limiters" (a set). Nothing from the course's calculator is drawn, so
    the chart shows the learner's own answer.
    """
    rows = []
    for threads in range(WARP_SIZE, 1025, WARP_SIZE):
        answer = occupancy_fn(threads, registers_per_thread, shared_bytes_per_block, cc)
        limiters = [name for name in LIMITERS if name in set(answer["limiters"])]
        rows.append(
            {
                "x": threads,
                "occupancy_pct": float(answer["occupancy_pct"]),
                "active_blocks": int(answer["blocks"]),
                "active_warps": int(answer["blocks"]) * -(-threads // WARP_SIZE),
                "limiter": " + ".join(limiters) if int(answer["blocks"]) else CANNOT_LAUNCH,
            }
        )
    data = pd.DataFrame(rows)
    fig = charts.figure(
        f"Your occupancy_by_hand: {registers_per_thread} registers, {shared_bytes_per_block:,} B shared, "
        f"cc {cc[0]}.{cc[1]}",
        "threads per block",
        "occupancy (% of warp slots)",
        charts.source_caption("model", "computed by your function (not a measurement)"),
    )
    _add_axis_traces(fig, data, "threads_per_block", None)
    fig.update_yaxes(range=[0, 105])
    return _room_for_caption(fig)


# --- the picture: one SM filled by resident blocks ---------------------------------------------

BLOCK_COLOURS = charts.PALETTE[:7]  # black is left out: block numbers are printed on the squares


SM_PICTURE_BOTTOM_PX = 180


def _plural(count: int, word: str) -> str:
    return f"{count} {word}" + ("" if count == 1 else "s")


def _sm_summary(r) -> str:
    """``r.summary()`` with singulars where a count is 1 ("1 block × 1 warp")."""
    if not r.launches:
        return r.summary()
    return (f"{_plural(r.active_blocks, 'block')} × {_plural(r.warps_per_block, 'warp')} = {r.active_warps} of "
            f"{r.max_warps} warps ({r.occupancy_pct:.1f} %), limited by {r.limiter}")


def sm_picture(
    threads_per_block: int = 128, registers_per_thread: int = 37, shared_bytes_per_block: int = 0, cc=(9, 0)
) -> go.Figure:
    """One SM: its warp slots, its four register-file quarters and its shared memory, filled by blocks."""
    from plotly.subplots import make_subplots

    r = occupancy(threads_per_block, registers_per_thread, shared_bytes_per_block, cc)
    arch = architecture(cc)
    slots_per_sp = arch.max_warps_per_sm // SUB_PARTITIONS
    fig = make_subplots(
        rows=1,
        cols=3,
        column_widths=[0.42, 0.33, 0.25],
        horizontal_spacing=0.07,
        subplot_titles=(
            f"warp slots ({arch.max_warps_per_sm}: 4 sub-partitions × {slots_per_sp})",
            f"registers (4 × {arch.registers_per_sm // SUB_PARTITIONS:,})",
            f"shared memory<br>({r.shared_per_sm_bytes // KB} KB)",  # one line was cut off at ~700 px
        ),
    )
    # Warp slots: warp g of the resident warps goes to sub-partition g % 4 (round-robin).
    xs, ys, texts, colours, symbols = [], [], [], [], []
    per_sp = [0] * SUB_PARTITIONS
    for g in range(arch.max_warps_per_sm):
        sp, column = g % SUB_PARTITIONS, g // SUB_PARTITIONS
        xs.append(column)
        ys.append(f"SP {sp}")
        if g < r.active_warps:
            block = g // r.warps_per_block
            per_sp[sp] += 1
            texts.append(str(block))
            colours.append(BLOCK_COLOURS[block % len(BLOCK_COLOURS)])
            symbols.append("square")
        else:
            texts.append("")
            colours.append("#999999")
            symbols.append("square-open")
    fig.add_scatter(
        x=xs,
        y=ys,
        mode="markers+text",
        text=texts,
        textfont={"size": 9, "color": "#000"},
        marker={"symbol": symbols, "size": 20, "color": colours, "line": {"color": "#666", "width": 1}},
        name="warp slots (number = block)",
        showlegend=False,
        hovertemplate="slot %{x} of %{y}: block %{text}<extra></extra>",
        row=1,
        col=1,
    )
    fig.update_xaxes(visible=False, row=1, col=1)
    # Registers per sub-partition: used, lost to rounding to 256 per warp, free.
    per_sp_regs = arch.registers_per_sm // SUB_PARTITIONS
    used = [n * registers_per_thread * WARP_SIZE for n in per_sp]
    rounding = [n * (r.registers_per_warp - registers_per_thread * WARP_SIZE) for n in per_sp]
    free = [per_sp_regs - n * r.registers_per_warp for n in per_sp]
    names = [f"SP {i}" for i in range(SUB_PARTITIONS)]
    for label, values, colour, pattern in (
        ("used by resident warps", used, charts.PALETTE[0], ""),
        ("allocated, unused (rounding to 256 per warp)", rounding, charts.PALETTE[1], "/"),
        ("free registers", free, "#eeeeee", "."),
    ):
        fig.add_bar(
            y=names,
            x=values,
            orientation="h",
            name=label,
            marker={"color": colour, "pattern_shape": pattern, "line": {"color": "#444", "width": 0.5}},
            legendgroup=label,
            hovertemplate=f"%{{y}}: %{{x:,}} registers {label}<extra></extra>",
            row=1,
            col=2,
        )
    # Shared memory: data, the driver's 1 KB per block, rounding to the granularity, free.
    blocks = r.active_blocks
    reserved = arch.reserved_shared_per_block_bytes
    data_bytes = blocks * shared_bytes_per_block
    reserve_bytes = blocks * reserved
    round_bytes = blocks * (r.shared_bytes_allocated - shared_bytes_per_block - reserved)
    free_bytes = max(r.shared_per_sm_bytes - blocks * r.shared_bytes_allocated, 0)
    for label, value, colour, pattern in (
        ("blocks' shared data", data_bytes, charts.PALETTE[2], ""),
        ("driver's 1 KB per block", reserve_bytes, charts.PALETTE[3], "x"),
        ("rounding to the granularity", round_bytes, charts.PALETTE[1], "/"),
        ("free shared memory", free_bytes, "#eeeeee", "."),
    ):
        fig.add_bar(
            x=["SM"],
            y=[value / KB],
            name=label,
            marker={"color": colour, "pattern_shape": pattern, "line": {"color": "#444", "width": 0.5}},
            hovertemplate=f"{label}: %{{y:.1f}} KB<extra></extra>",
            row=1,
            col=3,
        )
    fig.update_layout(
        barmode="stack",
        template="plotly_white",
        height=500,
        font={"size": 12},
        title={"text": f"One SM, cc {arch.name}: {_sm_summary(r)}", "x": 0.02, "font": {"size": 14}},
        # legend and caption in the bottom margin, in pixels: the legend can take three rows at ~700 px
        margin={"l": 60, "r": 20, "t": 80, "b": SM_PICTURE_BOTTOM_PX},
        legend={"orientation": "h", "yref": "container", "y": (SM_PICTURE_BOTTOM_PX - 45) / 500,
                "yanchor": "top", "x": 0},
    )
    fig.update_xaxes(title_text="registers", row=1, col=2)
    fig.update_yaxes(title_text="KB", row=1, col=3)
    charts.set_source(
        fig,
        charts.source_caption(
            "model",
            f"{threads_per_block} threads, {registers_per_thread} registers/thread, "
            f"{shared_bytes_per_block:,} B shared per block; NVIDIA's occupancy rules",
        ),
    )
    # inside the bottom margin, under the legend (at y = -0.4 it fell outside the figure)
    fig.layout.annotations[-1].update(y=0, yanchor="top", yshift=-(SM_PICTURE_BOTTOM_PX - 62))
    return fig


# --- the explorer widget -------------------------------------------------------------------------

MAX_REGISTER_CHOICES = ("none", 24, 32, 40, 48, 64, 80, 96, 128, 168, 255)


def explorer_figure(
    kernel: str = "accumulators",
    threads_per_block: int = 128,
    max_registers="none",
    typed_registers: int = 32,
    dynamic_shared_kb: int = 0,
    cc=None,
) -> go.Figure:
    """The explorer's chart: the kernel's real registers (capped) and shared memory → the three charts."""
    cc = cc or lesson_cc()
    cap = None if max_registers in (None, "none", 0) else int(max_registers)
    dynamic_bytes = int(dynamic_shared_kb) * KB
    if kernel == TYPED:
        regs = min(int(typed_registers), cap) if cap else int(typed_registers)
        static, source = 0, f"{regs} typed by you"
    else:
        u = usage(kernel, cap, cc)
        if u.known:
            regs, static = u.registers, u.shared_bytes or 0
            spill = f", spills {u.spill_store_bytes} B" if u.spill_store_bytes else ""
            source = f"{kernel}: {regs} registers, {static:,} B static shared{spill} ({u.source})"
            if u.note:
                source += f"; {u.note}"
        else:
            regs = min(int(typed_registers), cap) if cap else int(typed_registers)
            static, source = 0, f"{kernel}'s registers are unknown ({u.reason}); using your {regs}"
    return occupancy_charts(threads_per_block, regs, static + dynamic_bytes, cc, registers_source=source)


def occupancy_explorer(cc=None, *, threaded: bool = True):
    """Kernel, block size, max_registers, typed registers, dynamic shared memory → the three charts."""
    import ipywidgets as w

    from gpucourse.viz.widgets import LiveChart

    cc = cc or lesson_cc()
    arch = architecture(cc)
    options = [(f"{k.name} ({k.role})", k.name) for k in KERNELS.values()] + [
        ("type a register count", TYPED)
    ]
    style = {"description_width": "initial"}
    return LiveChart(
        {
            "kernel": w.Dropdown(options=options, value="accumulators", description="kernel", style=style),
            "threads_per_block": w.IntSlider(
                value=128,
                min=32,
                max=1024,
                step=32,
                description="threads/block",
                style=style,
                continuous_update=False,
            ),
            "max_registers": w.SelectionSlider(
                options=list(MAX_REGISTER_CHOICES),
                value="none",
                description="max_registers",
                style=style,
                continuous_update=False,
            ),
            "typed_registers": w.BoundedIntText(
                value=32, min=1, max=255, description="registers (if unknown)", style=style
            ),
            "dynamic_shared_kb": w.IntSlider(
                value=0,
                min=0,
                max=arch.shared_per_block_optin_bytes // KB,
                step=1,
                description="dynamic shared (KB)",
                style=style,
                continuous_update=False,
            ),
        },
        compute=lambda **v: explorer_figure(cc=cc, **v),
        threaded=threaded,
        description="Choose a kernel (its registers come from the compiler), a block size, a register cap "
        "and dynamic shared memory; the charts are the occupancy calculator's answer.",
    )


def calculator_widget(cc=None, *, threaded: bool = True):
    """A bare calculator: block size, registers and shared memory typed in → the SM picture."""
    import ipywidgets as w

    from gpucourse.viz.widgets import LiveChart

    cc = cc or lesson_cc()
    arch = architecture(cc)
    style = {"description_width": "initial"}
    return LiveChart(
        {
            "threads_per_block": w.IntSlider(
                value=128,
                min=32,
                max=1024,
                step=32,
                description="threads/block",
                style=style,
                continuous_update=False,
            ),
            "registers_per_thread": w.IntSlider(
                value=37, min=1, max=255, description="registers/thread", style=style, continuous_update=False
            ),
            "shared_kb": w.IntSlider(
                value=0,
                min=0,
                max=arch.shared_per_block_optin_bytes // KB,
                description="shared (KB)",
                style=style,
                continuous_update=False,
            ),
        },
        compute=lambda threads_per_block, registers_per_thread, shared_kb: sm_picture(
            threads_per_block, registers_per_thread, shared_kb * KB, cc
        ),
        threaded=threaded,
    )


# --- GPU sweeps: speed vs occupancy, and our calculator against the driver ----------------------

SWEEP_THREADS = 64  # 2 warps per block: 4…32 resident blocks spans 12.5 %…100 % on cc 9.0 without opt-in
TARGET_OCCUPANCIES = (0.125, 0.1875, 0.25, 0.375, 0.5, 0.75, 1.0)
COPY_ELEMENTS = 1 << 26  # 256 MiB per array: far beyond the L2
FMA_THREADS = 1 << 20
FMA_ITERATIONS = 4096
MAX_PADDING_BYTES = 48 * KB  # dynamic shared memory without opting in


def padding_levels(
    registers: int,
    static_shared_bytes: int,
    threads_per_block: int = SWEEP_THREADS,
    cc=(9, 0),
    targets=TARGET_OCCUPANCIES,
) -> list[tuple[int, object]]:
    """(dynamic shared bytes, Occupancy) pairs: the least padding that lowers occupancy to each level.

    Padding is dynamic shared memory the kernel never touches; it only makes fewer blocks fit.
    """
    reachable: dict[int, tuple[int, object]] = {}
    for dynamic in range(0, MAX_PADDING_BYTES - static_shared_bytes + 1, 128):
        r = occupancy(threads_per_block, registers, static_shared_bytes + dynamic, cc)
        if r.active_blocks and r.active_blocks not in reachable:
            reachable[r.active_blocks] = (dynamic, r)
    chosen: dict[int, tuple[int, object]] = {}
    for target in targets:
        dynamic, r = min(reachable.values(), key=lambda v: (abs(v[1].occupancy - target), v[0]))
        chosen[r.active_blocks] = (dynamic, r)
    return sorted(chosen.values(), key=lambda v: v[1].occupancy)


def _need_gpu(what: str) -> None:
    if not runtime.is_gpu():
        raise NoGPU(f"{what} runs on a GPU; in simulator mode the charts show a recording instead")


def driver_blocks(
    name: str, threads_per_block: int, dynamic_shared_bytes: int = 0, max_registers: int | None = None
) -> int:
    """The driver's answer: cuOccupancyMaxActiveBlocksPerMultiprocessor for the compiled kernel."""
    _need_gpu("asking the driver")
    k = lesson_kernel(name)
    _, compiled = gpu_kernel(k.kernel, k.signature, max_registers)
    cufunc = compiled._codelibrary.get_cufunc()
    return int(
        cuda.current_context().get_active_blocks_per_multiprocessor(
            cufunc, int(threads_per_block), int(dynamic_shared_bytes)
        )
    )


DRIVER_THREADS = (64, 128, 256, 512, 1024)
DRIVER_DYNAMIC_BYTES = (0, 12 * KB, 40 * KB)
DRIVER_CAPS = (None, 32, 64)


def driver_comparison(
    names=None, threads=DRIVER_THREADS, dynamic_bytes=DRIVER_DYNAMIC_BYTES, caps=DRIVER_CAPS
) -> pd.DataFrame:
    """Our calculator and the driver side by side for the lesson's real kernels (GPU only)."""
    _need_gpu("comparing the calculator with the driver")
    cc = tuple(runtime.device().compute_capability)
    architecture(cc)  # a clear error on a compute capability the calculator does not model
    rows = []
    for name in names or KERNELS:
        k = lesson_kernel(name)
        for cap in caps:
            u = resource_usage(k.kernel, k.signature, cc, cap, use_gpu=True)
            for t in threads:
                for dynamic in dynamic_bytes:
                    model = occupancy(t, u.registers, u.shared_bytes + dynamic, cc)
                    driver = driver_blocks(name, t, dynamic, cap)
                    rows.append(
                        {
                            "kernel": name,
                            "max_registers": cap or 0,
                            "registers": u.registers,
                            "static_shared_bytes": u.shared_bytes,
                            "threads_per_block": t,
                            "dynamic_shared_bytes": dynamic,
                            "model_blocks": model.active_blocks,
                            "driver_blocks": driver,
                            "model_limiter": model.limiter,
                            "match": model.active_blocks == driver,
                        }
                    )
    return pd.DataFrame(rows)


@reference.register_sweep(
    "occupancy.driver",
    lesson=LESSON,
    columns=(
        "kernel",
        "max_registers",
        "registers",
        "threads_per_block",
        "dynamic_shared_bytes",
        "model_blocks",
        "driver_blocks",
    ),
    description="blocks per SM: gpucourse.occupancy vs the driver's occupancy query, lesson kernels",
)
def _driver_sweep() -> pd.DataFrame:
    return driver_comparison()


def driver_comparison_figure() -> go.Figure:
    """Calculator vs driver, one point per configuration (on the diagonal = they agree)."""
    if runtime.is_gpu():
        data = driver_comparison()
        source = charts.source_caption("measured", f"asked the driver now on {runtime.device().name}")
    else:
        rec = reference.load("occupancy.driver")
        data = rec.data if rec else None
        source = (
            charts.source_caption("recorded", rec.caption())
            if rec
            else charts.source_caption(
                "none", "no GPU here and no recording of this comparison yet (run `make record` on a GPU)"
            )
        )
    fig = charts.figure(
        "Blocks per SM: our calculator (x) vs the driver (y)",
        "calculator: blocks per SM",
        "driver: blocks per SM",
        source,
    )
    _room_for_caption(fig)
    if data is None or not len(data):
        return charts.no_data(fig, "No driver to ask here: the comparison needs a GPU or a recording")
    top = int(max(data.model_blocks.max(), data.driver_blocks.max())) + 1
    fig.add_scatter(
        x=[0, top], y=[0, top], mode="lines", line={"dash": "dash", "color": "#999"}, name="agreement (y = x)"
    )
    for index, (name, group) in enumerate(data.groupby("kernel", sort=False)):
        fig.add_scatter(
            x=group.model_blocks,
            y=group.driver_blocks,
            mode="markers",
            name=name,
            marker={"color": charts.PALETTE[index % 8], "symbol": charts.MARKERS[index % 8], "size": 9},
            customdata=np.stack(
                [group.threads_per_block, group.dynamic_shared_bytes, group.registers], axis=-1
            ),
            hovertemplate=(
                f"{name}: %{{customdata[0]}} threads, %{{customdata[1]}} B dynamic, "
                "%{customdata[2]} regs<br>calculator %{x}, driver %{y}<extra></extra>"
            ),
        )
    agree = int((data.model_blocks == data.driver_blocks).sum())
    fig.update_layout(title={"text": f"Blocks per SM: calculator vs driver — {agree} of {len(data)} agree"})
    return fig


def _fma_reference(iterations: int, ilp: int, lanes: int = 16) -> np.ndarray:
    """What fma_kernel / fma_ilp4_kernel compute for i & 15 = 0…15 (float64 model of the chain)."""
    b, c = float(FMA_B), float(FMA_C)
    out = []
    for lane in range(lanes):
        starts = [lane * c + k * c for k in range(ilp)]
        values = []
        for a in starts:
            for _ in range(iterations // ilp):
                a = a * b + c
            values.append(a)
        out.append(sum(values))
    return np.array(out)


class SpeedRig:
    """The arrays and launches of the speed sweeps on a GPU (allocated once, reused for every point)."""

    def __init__(self, kind: str = "memory"):
        _need_gpu("timing kernels")
        if kind not in ("memory", "compute"):
            raise InvalidConfig(f"kind must be 'memory' or 'compute'; got {kind!r}")
        self.kind = kind
        self.cc = tuple(runtime.device().compute_capability)
        self.names = ("copy", "copy_ilp4") if kind == "memory" else ("fma", "fma_ilp4")
        if kind == "memory":
            self.host = np.arange(COPY_ELEMENTS, dtype=np.float32)
            self.poison_host = np.full(COPY_ELEMENTS, np.nan, dtype=np.float32)
            self.src = cuda.to_device(self.host)
            self.dst = cuda.device_array(COPY_ELEMENTS, dtype=np.float32)
        else:
            self.poison_host = np.full(FMA_THREADS, np.nan, dtype=np.float32)
            self.out = cuda.device_array(FMA_THREADS, dtype=np.float32)

    def usage(self, name: str) -> ResourceUsage:
        k = lesson_kernel(name)
        return resource_usage(k.kernel, k.signature, self.cc, use_gpu=True)

    def measure(self, name: str, threads_per_block: int, dynamic_shared_bytes: int, *, min_total_ms=500.0):
        """One harness measurement of kernel ``name`` with this block size and shared-memory padding."""
        from gpucourse.measure.harness import measure

        k = lesson_kernel(name)
        dispatcher, _ = gpu_kernel(k.kernel, k.signature)
        launch = dispatcher[
            self._grid(name, threads_per_block), threads_per_block, 0, int(dynamic_shared_bytes)
        ]
        label = f"{name}, {threads_per_block} threads, {dynamic_shared_bytes} B padding"
        if self.kind == "memory":
            self.dst.copy_to_device(self.poison_host)  # a kernel that writes nothing cannot pass the check
            return measure(
                lambda: launch(self.dst, self.src),
                label=label,
                min_total_ms=min_total_ms,
                check=lambda: bool(np.array_equal(self.dst.copy_to_host(), self.host)),
                bytes_moved=2 * COPY_ELEMENTS * 4,
                copy_ceiling_gbps=self.ceiling(),
            )
        ilp = 4 if name.endswith("ilp4") else 1
        expected = _fma_reference(FMA_ITERATIONS, ilp)
        iterations = np.int32(FMA_ITERATIONS)
        self.out.copy_to_device(self.poison_host)
        return measure(
            lambda: launch(self.out, iterations),
            label=label,
            min_total_ms=min_total_ms,
            check=lambda: bool(
                np.allclose(self.out.copy_to_host()[:16].astype(np.float64), expected, rtol=1e-3)
            ),
            flops=2 * FMA_THREADS * FMA_ITERATIONS,
        )

    def ceiling(self) -> float | None:
        if self.kind != "memory":
            return None
        from gpucourse.measure import ceilings

        return ceilings.copy_gbps()

    def _grid(self, name: str, threads_per_block: int) -> int:
        if self.kind == "memory":
            ilp = 4 if name.endswith("ilp4") else 1
            return math.ceil(COPY_ELEMENTS / (threads_per_block * ilp))
        return math.ceil(FMA_THREADS / threads_per_block)


def measure_speed(
    kind: str = "memory", threads_per_block: int = SWEEP_THREADS, targets=TARGET_OCCUPANCIES, progress=None
) -> pd.DataFrame:
    """On a GPU: a memory- or compute-bound kernel (ILP 1 and 4) at several occupancies.

    Occupancy is lowered by dynamic shared-memory padding per block; the calculator gives the
    level and the driver confirms it. Each point is measured by the course's harness.
    """
    rig = SpeedRig(kind)
    plans = []
    for name in rig.names:
        u = rig.usage(name)
        for dynamic, model in padding_levels(u.registers, u.shared_bytes, threads_per_block, rig.cc, targets):
            plans.append((name, u, dynamic, model))
    rows = []
    for step, (name, u, dynamic, model) in enumerate(plans):
        m = rig.measure(name, threads_per_block, dynamic)
        rows.append(
            {
                "kernel": name,
                "ilp": 4 if name.endswith("ilp4") else 1,
                "threads_per_block": threads_per_block,
                "registers": u.registers,
                "dynamic_shared_bytes": dynamic,
                "active_blocks": model.active_blocks,
                "driver_blocks": driver_blocks(name, threads_per_block, dynamic),
                "occupancy_pct": model.occupancy_pct,
                "median_ms": m.median_ms,
                "iqr_ms": m.iqr_ms,
                "n_samples": m.n_samples,
                "gbps": m.gbps,
                "tflops": m.tflops,
                "pct_of_copy_ceiling": m.pct_of_copy_ceiling,
            }
        )
        if progress:
            progress((step + 1) / len(plans))
    return pd.DataFrame(rows)


SPEED_COLUMNS = ("kernel", "ilp", "threads_per_block", "dynamic_shared_bytes", "occupancy_pct", "median_ms")


@reference.register_sweep(
    "occupancy.memory_bound",
    lesson=LESSON,
    columns=SPEED_COLUMNS + ("gbps",),
    description="float32 copy (ILP 1 and 4), 64-thread blocks, occupancy lowered by shared-memory padding",
)
def _memory_sweep() -> pd.DataFrame:
    return measure_speed("memory")


@reference.register_sweep(
    "occupancy.compute_bound",
    lesson=LESSON,
    columns=SPEED_COLUMNS + ("tflops",),
    description="float32 FMA chains (ILP 1 and 4, 4096 FMAs/thread), 64-thread blocks, occupancy via padding",
)
def _compute_sweep() -> pd.DataFrame:
    return measure_speed("compute")


# --- Little's-law model of the speed sweeps (assumptions, not measurements) ----------------------

MODEL_DRAM_LATENCY_NS = 600.0  # assumed: a typical unloaded HBM latency of recent data-centre GPUs
MODEL_FMA_LATENCY_CYCLES = 4  # assumed: FP32 FMA dependent-issue latency (Volta and later)
MODEL_BYTES_PER_WARP_COPY = 2 * WARP_SIZE * 4  # one float32 load (128 B) + its store: the store never waits
MODEL_FALLBACK_DEVICE = ("NVIDIA H200", 4800.0, 132, (9, 0))  # assumed when there is no device or recording


@dataclass(frozen=True)
class SpeedModel:
    """Little's law for the speed sweeps: speed ∝ min(1, resident warps × operations in flight per
    warp ÷ warps needed to cover the latency), normalised to 1 at full occupancy (no GB/s invented)."""

    kind: str
    device: str
    warps_needed: float  # per SM, with one operation in flight per warp
    max_warps: int  # warp slots per SM
    assumptions: str  # one line, for the chart: what the model assumed

    def relative_speed(self, resident_warps, ilp: int) -> np.ndarray:
        def raw(warps):
            return np.minimum(1.0, np.asarray(warps, dtype=float) * ilp / self.warps_needed)

        return raw(resident_warps) / raw(self.max_warps)


def _model_device(rec=None) -> tuple[str, float | None, int | None, tuple[int, int], bool]:
    """(name, datasheet GB/s, SM count, compute capability, assumed?) of the device the chart is about."""
    if runtime.is_gpu():
        info = runtime.device()
        return info.name, info.datasheet_bandwidth_gbps, info.sm_count, tuple(info.compute_capability), False
    if rec is not None:
        facts = rec.provenance.get("device", {})
        name = rec.device
        gbps = runtime.datasheet_bandwidth_gbps(name)
        cc = tuple(int(v) for v in str(facts.get("compute_capability", "9.0")).split("."))
        sm_count = facts.get("sm_count")
        if gbps and sm_count:
            return name, gbps, int(sm_count), cc, False
    name, gbps, sm_count, cc = MODEL_FALLBACK_DEVICE
    return name, gbps, sm_count, cc, True


def speed_model(kind: str = "memory", rec=None) -> SpeedModel:
    """The Little's-law model for the memory- or compute-bound sweep, on the device the chart shows
    (this GPU, else the recording's GPU, else an assumed H200). Its inputs are stated assumptions."""
    if kind not in ("memory", "compute"):
        raise InvalidConfig(f"kind must be 'memory' or 'compute'; got {kind!r}")
    name, gbps, sm_count, cc, assumed = _model_device(rec)
    if kind == "memory" and not (gbps and sm_count):  # a GPU with no datasheet entry: use the fallback's
        name, gbps, sm_count, cc = MODEL_FALLBACK_DEVICE
        assumed = True
    max_warps = architecture(cc).max_warps_per_sm
    which = f"{name}{', assumed' if assumed else ''}"
    if kind == "memory":
        bytes_in_flight = gbps / sm_count * MODEL_DRAM_LATENCY_NS  # GB/s = bytes/ns
        needed = bytes_in_flight / MODEL_BYTES_PER_WARP_COPY
        assumptions = (
            f"assumed {MODEL_DRAM_LATENCY_NS:.0f} ns DRAM latency × {gbps:,.0f} GB/s datasheet ÷ {sm_count} SMs "
            f"({which}) ÷ {MODEL_BYTES_PER_WARP_COPY} B per warp copy → {needed:.0f} warp loads in flight "
            f"per SM; {max_warps} warp slots"
        )
    else:
        needed = float(MODEL_FMA_LATENCY_CYCLES * SUB_PARTITIONS)
        assumptions = (
            f"assumed {MODEL_FMA_LATENCY_CYCLES}-cycle FMA latency × {SUB_PARTITIONS} sub-partitions issuing "
            f"one warp FMA per cycle → {needed:.0f} FMAs in flight per SM; {max_warps} warp slots (cc "
            f"{cc[0]}.{cc[1]}, {which})"
        )
    return SpeedModel(kind, name, needed, max_warps, assumptions)


def _add_speed_model(fig: go.Figure, model: SpeedModel, names, *, axis: str) -> None:
    """Dashed model curves (one per kernel, in the kernel's colour) and a line saying what they assume."""
    warps = np.arange(SWEEP_THREADS // WARP_SIZE, model.max_warps + 1, SWEEP_THREADS // WARP_SIZE)
    op = "loads" if model.kind == "memory" else "FMAs"
    for index, (name, ilp) in enumerate(names):
        charts.line(
            fig, 100.0 * warps / model.max_warps, model.relative_speed(warps, ilp),
            f"model: {name} (ILP {ilp})", index,
            dash=("dash", "dashdot")[index % 2], mode="lines", yaxis=axis,
        )
    fig.add_annotation(
        name="model", showarrow=False, xref="paper", yref="paper", x=0, y=0, yshift=-80,
        xanchor="left", yanchor="top", font={"size": 11, "color": "#444"},
        text=html.escape("Dashed: Little's-law model, speed ∝ min(1, resident warps × "
                         f"{op} in flight per warp (= ILP) ÷ warps needed); each curve is 1 at full occupancy.")
        + "<br>" + html.escape(model.assumptions + " (model assumptions, not measurements)."),
    )
    fig.update_layout(height=(fig.layout.height or 420) + 30, margin={"b": 175})


_MEASURED: dict[str, pd.DataFrame] = {}  # live GPU sweeps, measured once per session


def speed_figure(kind: str = "memory", progress=None) -> go.Figure:
    """Measured (GPU) or recorded speed vs occupancy for the memory- or compute-bound kernels."""
    if kind not in ("memory", "compute"):
        raise InvalidConfig(f"kind must be 'memory' or 'compute'; got {kind!r}")
    column, unit = (
        ("gbps", "bandwidth (GB/s)") if kind == "memory" else ("tflops", "FP32 FMA throughput (TFLOP/s)")
    )
    ceiling, rec = None, None
    if runtime.is_gpu():
        if kind not in _MEASURED:
            _MEASURED[kind] = measure_speed(kind, progress=progress)
        data = _MEASURED[kind]
        source = charts.source_caption(
            "measured", f"{runtime.device().name}; occupancy from the calculator, confirmed by the driver"
        )
        if kind == "memory":
            from gpucourse.measure import ceilings

            ceiling = ceilings.copy_gbps()
    else:
        rec = reference.load(f"occupancy.{kind}_bound")
        data = rec.data if rec else None
        source = (
            charts.source_caption("recorded", rec.caption())
            if rec
            else charts.source_caption(
                "none", "no GPU here and no recording of this sweep yet (run `make record` on a GPU); "
                "the dashed lines are the model"
            )
        )
    title = (
        "Memory-bound copy: bandwidth vs occupancy"
        if kind == "memory"
        else "Compute-bound FMA chains: throughput vs occupancy"
    )
    fig = _room_for_caption(
        charts.figure(title, "occupancy (% of warp slots, from the calculator)", unit, source)
    )
    model = speed_model(kind, rec)
    kernels = [("copy", 1), ("copy_ilp4", 4)] if kind == "memory" else [("fma", 1), ("fma_ilp4", 4)]
    if data is None or not len(data):
        fig.update_yaxes(title_text="model: speed ÷ speed at 100 % occupancy", range=[0, 1.1])
        _add_speed_model(fig, model, kernels, axis="y")
        fig.update_xaxes(range=[0, 105])
        return charts.no_data(fig, "No timing to show: there is no GPU here and no recording yet")
    for index, (name, group) in enumerate(data.groupby("kernel", sort=False)):
        ilp = int(group.ilp.iloc[0])
        charts.line(fig, group.occupancy_pct, group[column], f"{name} (ILP {ilp})", index, dash="solid")
    _add_speed_model(fig, model, kernels, axis="y2")
    fig.update_layout(
        yaxis2={"title": "model: speed ÷ speed at 100 % occupancy", "overlaying": "y", "side": "right",
                "range": [0, 1.1], "showgrid": False},
        margin={"r": 80},
    )
    if ceiling:
        charts.hline(fig, ceiling, f"measured copy ceiling {ceiling:.0f} GB/s")
    datasheet = runtime.device().datasheet_bandwidth_gbps if runtime.is_gpu() else None
    if kind == "memory" and datasheet:
        charts.hline(fig, datasheet, f"datasheet {datasheet:.0f} GB/s", faint=True)
    fig.update_xaxes(range=[0, 105])
    return fig


def speed_explorer(*, threaded: bool = True):
    """A LiveChart over the kind of kernel: memory-bound or compute-bound, speed vs occupancy."""
    import ipywidgets as w

    from gpucourse.viz.widgets import LiveChart

    return LiveChart(
        {
            "kind": w.ToggleButtons(
                options=[("memory-bound copy", "memory"), ("compute-bound FMA", "compute")],
                value="memory",
                description="kernel",
            )
        },
        compute=speed_figure,
        threaded=threaded,
        description="Each kernel runs at several occupancies (lowered by unused shared memory per block).",
    )
