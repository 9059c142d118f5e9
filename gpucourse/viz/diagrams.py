"""Drawn pictures (plotly shapes) of the execution and memory hierarchies, for lesson 00.

Every picture has a title that says what it shows; the notebook gives each one alt text.
"""

from __future__ import annotations

import plotly.graph_objects as go

from gpucourse.measure import runtime
from gpucourse.viz.charts import PALETTE, set_source, source_caption

# NVIDIA's Hopper whitepaper ("NVIDIA H100 Tensor Core GPU Architecture", 2022): 50 MB of L2 on an
# H100 SXM5 (the full GH100 die has 60 MB, of which the product enables 50).
H100_L2_TEXT = "50 MB on an H100 SXM5 (Hopper whitepaper)"


def l2_text() -> str:
    """The L2 size: queried from the device on a GPU, else the H100 SXM5's from the whitepaper."""
    if runtime.is_gpu():
        info = runtime.device()
        if info.l2_bytes:
            return f"{info.l2_bytes / 2**20:.0f} MiB on this {info.name} (device query)"
    return H100_L2_TEXT


def _tint(colour: str, alpha: float) -> str:
    """A palette colour as a light background fill."""
    r, g, b = (int(colour[i:i + 2], 16) for i in (1, 3, 5))
    return f"rgba({r},{g},{b},{alpha})"


def _box(fig: go.Figure, x0, y0, x1, y1, text: str, colour: str, *, font_size=12, text_y=None, dash="solid"):
    fig.add_shape(type="rect", x0=x0, y0=y0, x1=x1, y1=y1, line={"color": "#000", "width": 1, "dash": dash},
                  fillcolor=colour, opacity=0.9, layer="below")
    if text:
        fig.add_annotation(x=(x0 + x1) / 2, y=text_y if text_y is not None else (y0 + y1) / 2, text=text,
                           showarrow=False, font={"size": font_size, "color": "#000"})


def _arrow(fig: go.Figure, x0, y0, x1, y1, text: str = "", label_at: tuple[float, float] | None = None):
    """An arrow from (x0, y0) to (x1, y1); its text at its tail, or at ``label_at`` (where the tail sits
    on other labels)."""
    fig.add_annotation(x=x1, y=y1, ax=x0, ay=y0, xref="x", yref="y", axref="x", ayref="y",
                       text="" if label_at else text, showarrow=True, arrowhead=2, arrowwidth=1.5, font={"size": 11})
    if label_at and text:
        fig.add_annotation(x=label_at[0], y=label_at[1], text=text, showarrow=False, font={"size": 11})


def _canvas(title: str, width: float, height: float) -> go.Figure:
    fig = go.Figure()
    fig.update_layout(title={"text": title, "x": 0.02}, template="plotly_white", height=460,
                      margin={"l": 10, "r": 10, "t": 50, "b": 80}, showlegend=False)
    fig.update_xaxes(visible=False, range=[0, width])
    fig.update_yaxes(visible=False, range=[0, height], scaleanchor="x")
    return fig


def execution_hierarchy() -> go.Figure:
    """Grid → blocks → warps → threads, and blocks landing on an SM."""
    fig = _canvas("Execution hierarchy: a grid of blocks; a block is cut into warps of 32 threads", 100, 50)
    _box(fig, 1, 8, 31, 46, "", "#f2f2f2", text_y=44)
    fig.add_annotation(x=16, y=44, text="<b>grid</b> (one kernel launch)", showarrow=False)
    for row in range(3):
        for col in range(3):
            x0, y0 = 3 + col * 9.3, 10 + row * 10.5
            colour = PALETTE[1] if (col, row) == (1, 1) else PALETTE[5]
            _box(fig, x0, y0, x0 + 8, y0 + 8.5, f"block ({col},{row})", colour, font_size=10)
    _arrow(fig, 20.5, 25, 38, 38, "one<br>block", label_at=(34.5, 30))
    _box(fig, 38, 8, 62, 46, "", _tint(PALETTE[1], 0.15))
    fig.add_annotation(x=50, y=44, text="<b>block</b> = 128 threads = 4 warps", showarrow=False)
    for w in range(4):
        y0 = 34 - w * 7.5
        _box(fig, 40, y0, 60, y0 + 6, f"warp {w}: threads {32 * w}–{32 * w + 31}", PALETTE[2] if w else PALETTE[0],
             font_size=10)
    _arrow(fig, 60, 37, 66, 40, "one<br>warp", label_at=(64, 34))
    _box(fig, 66, 30, 98, 46, "", _tint(PALETTE[5], 0.15))
    fig.add_annotation(x=82, y=44, text="<b>warp</b> = 32 lanes, one instruction", showarrow=False)
    for lane in range(32):
        x0 = 67 + (lane % 16) * 1.9
        y0 = 37 - (lane // 16) * 4
        _box(fig, x0, y0, x0 + 1.6, y0 + 3, str(lane), PALETTE[0], font_size=7)
    _box(fig, 66, 2, 98, 27, "", _tint(PALETTE[2], 0.12))
    fig.add_annotation(x=82, y=25, text="<b>SM</b> (streaming multiprocessor)", showarrow=False)
    for s in range(4):
        _box(fig, 67.5 + s * 7.5, 14, 73.5 + s * 7.5, 22, f"warp<br>scheduler {s}", "#ffffff", font_size=9)
    _box(fig, 67.5, 4, 96.5, 12, "registers · shared memory / L1 · resident blocks", "#ffffff", font_size=10)
    _arrow(fig, 31, 20, 66, 15, "blocks are scheduled onto SMs")
    set_source(fig, source_caption("model", "a drawing of CUDA's execution hierarchy (CUDA C++ Programming Guide)"))
    return fig


def memory_hierarchy(l2: str | None = None,
                     hbm_text: str = "80 GB · 3.35 TB/s (H100) · 141 GB · 4.8 TB/s (H200)") -> go.Figure:
    """Registers → shared memory/L1 → L2 → HBM, from small and private to large and shared.

    ``l2``: the text for the L2 box; by default ``l2_text()`` (a device query on a GPU)."""
    l2 = l2_text() if l2 is None else l2
    fig = _canvas("Memory hierarchy: the further from the thread, the larger, more shared and slower", 100, 52)
    levels = [
        ("registers", "private to a thread · 64 K × 32-bit per SM", PALETTE[2]),
        ("shared memory / L1", "per SM · 256 KB store, up to 228 KB as shared memory for a block's threads",
         PALETTE[5]),
        ("L2 cache", f"whole GPU · {l2}", PALETTE[1]),
        ("HBM (global memory)", f"whole GPU · {hbm_text} (datasheet)", PALETTE[3]),
    ]
    for i, (name, detail, colour) in enumerate(levels):
        inset = 30 - i * 9
        y0 = 40 - i * 12
        _box(fig, inset, y0, 100 - inset, y0 + 10, f"<b>{name}</b><br>{detail}", colour, font_size=11)
    fig.add_annotation(x=3, y=26, text="faster,<br>smaller", showarrow=False, font={"size": 11})
    fig.add_annotation(x=3, y=8, text="slower,<br>larger", showarrow=False, font={"size": 11})
    set_source(fig, source_caption("model", "a drawing; HBM from NVIDIA's H100/H200 SXM datasheets, SM "
                                            "storage and L2 from NVIDIA's Hopper whitepaper, or L2 from a "
                                            "query of this device"))
    return fig
