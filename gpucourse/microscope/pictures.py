"""Pictures of what one warp did: sectors under its lanes, banks under its lanes, its active lanes.

Colours come from the Okabe–Ito palette (safe for colour-blind readers) and never carry meaning
alone: marker shapes, text labels and hover text say the same thing.
"""

from __future__ import annotations

import plotly.graph_objects as go

from gpucourse.chartlayout import place_caption, rules, source_caption
from gpucourse.microscope.analysis import (
    BANK_WORD_BYTES,
    BANKS,
    SECTOR_BYTES,
    WARP_SIZE,
    bank_words,
    popcount,
)

OKABE_ITO = ("#000000", "#E69F00", "#56B4E9", "#009E73", "#F0E442", "#0072B2", "#D55E00", "#CC79A7")
BLACK, ORANGE, SKY_BLUE, GREEN, YELLOW, BLUE, VERMILLION, PURPLE = OKABE_ITO
SYMBOLS = ("circle", "square", "diamond", "triangle-up", "cross", "star", "hexagon", "triangle-down")
_VERB = {"load": "load", "store": "store", "atomic": "atomic"}


def _block_text(index) -> str:
    return "(" + ", ".join(str(i) for i in index) + ")"


def _title(text: str, source: str) -> dict:
    sub = f"<br><sup>{source}</sup>" if source else ""
    return {"text": text + sub, "x": 0.01, "xanchor": "left"}


def _caption(fig: go.Figure) -> go.Figure:
    """The provenance line every course chart carries, under the x-axis title. Placed by chartlayout, below the
    microscope (viz sits above it): a count of the simulator is the same in a rehearsal, so it carries no rehearsal
    mark (``viz.charts.set_source`` adds one to numbers that stand in for a GPU's)."""
    fig.update_layout(margin={"b": 120})
    place_caption(fig, source_caption("counted", "one launch traced in the simulator by gpucourse.microscope"))
    return fig


def _lane_axis(top: float = -1) -> dict:
    # Lane 0 at the top, like the rows of a table; the range is given reversed.
    return {"title": {"text": "lane (0–31)"}, "dtick": 4, "range": [WARP_SIZE, top]}


_LEGEND = {"orientation": "h", "y": 1.0, "yanchor": "bottom", "x": 1.0, "xanchor": "right"}


def sectors_figure(request: dict, line: tuple) -> go.Figure:
    _, lineno, source, _ = line
    base, itemsize, array = request["base"], request["itemsize"], request["array"]
    sectors = request["sectors"]
    colour_of = {s: (BLUE, VERMILLION)[i % 2] for i, s in enumerate(sectors)}
    symbol_of = {s: ("circle", "diamond")[i % 2] for i, s in enumerate(sectors)}
    xs, ys, colours, symbols, hover = [], [], [], [], []
    for lane, address in zip(request["lanes"], request["addresses"], strict=True):
        offset = address - base
        for s in range(address // SECTOR_BYTES, (address + itemsize - 1) // SECTOR_BYTES + 1):
            xs.append(s - base // SECTOR_BYTES)
            ys.append(lane)
            colours.append(colour_of[s])
            symbols.append(symbol_of[s])
            hover.append(
                f"lane {lane}: bytes {offset}–{offset + itemsize - 1} of {array} → sector "
                f"{s - base // SECTOR_BYTES} (bytes {(s * SECTOR_BYTES - base)}–{(s + 1) * SECTOR_BYTES - base - 1})"
            )
    fig = go.Figure()
    for s in sectors:
        x = s - base // SECTOR_BYTES
        fig.add_vrect(x0=x - 0.45, x1=x + 0.45, fillcolor=SKY_BLUE, opacity=0.25, line_width=0, layer="below")
    fig.add_trace(
        go.Scatter(
            x=xs,
            y=ys,
            mode="markers",
            name="lane's element",
            hovertext=hover,
            hoverinfo="text",
            marker={"color": colours, "symbol": symbols, "size": 9, "line": {"width": 1, "color": BLACK}},
        )
    )
    fetched = [s - base // SECTOR_BYTES for s in sectors]
    fig.add_trace(
        go.Scatter(
            x=fetched,
            y=[-0.8] * len(fetched),
            mode="text",
            text=["▼"] * len(fetched),
            name="sector fetched (32 B)",
            hovertext=[f"sector {x} fetched: 32 bytes" for x in fetched],
            hoverinfo="text",
            textfont={"color": BLACK},
        )
    )
    requested = request["bytes_requested"]
    text = (
        f"{_VERB[request['op']]} of {array} at line {lineno}, warp {request['warp']} of block "
        f"{_block_text(request['block'])}: {len(sectors)} sectors of 32 B ({requested} B requested, "
        f"{len(sectors) * SECTOR_BYTES} B fetched)"
    )
    fig.update_layout(
        title=_title(text, source),
        template="plotly_white",
        showlegend=True,
        height=520,
        xaxis={"title": {"text": f"32-byte sector of {array} (index from the start of its allocation)"}},
        yaxis=_lane_axis(top=-1.5),
        legend=_LEGEND,
    )
    return _caption(fig)


def banks_figure(request: dict, line: tuple) -> go.Figure:
    _, lineno, source, _ = line
    array, itemsize = request["array"], request["itemsize"]
    phases = bank_words(request["lanes"], request["addresses"], itemsize)
    rank = {}  # (phase, word) -> 0, 1, 2...: which turn of its bank the word is served in
    for phase, banks in phases.items():
        for words in banks.values():
            for i, word in enumerate(sorted(words)):
                rank[(phase, word)] = i
    per_phase = WARP_SIZE if itemsize <= BANK_WORD_BYTES else max(1, BANKS * BANK_WORD_BYTES // itemsize)
    xs, ys, colours, symbols, labels, hover = [], [], [], [], [], []
    for lane, address in zip(request["lanes"], request["addresses"], strict=True):
        phase = lane // per_phase
        for word in range(address // BANK_WORD_BYTES, (address + itemsize - 1) // BANK_WORD_BYTES + 1):
            turn = rank[(phase, word)]
            xs.append(word % BANKS)
            ys.append(lane)
            colours.append(OKABE_ITO[1:][turn % 7])
            symbols.append(SYMBOLS[turn % len(SYMBOLS)])
            labels.append(str(turn + 1))
            hover.append(
                f"lane {lane}: word {word} (byte {word * BANK_WORD_BYTES}) of {array} in bank {word % BANKS}, "
                f"served in turn {turn + 1}" + (f", phase {phase}" if per_phase < WARP_SIZE else "")
            )
    ways = request["ways"]
    fig = go.Figure(
        go.Scatter(
            x=xs,
            y=ys,
            mode="markers+text",
            text=labels,
            textposition="middle right",
            hovertext=hover,
            hoverinfo="text",
            name="lane's word (label = turn in its bank)",
            marker={"color": colours, "symbol": symbols, "size": 9, "line": {"width": 1, "color": BLACK}},
        )
    )
    verdict = "conflict-free (1-way)" if ways == 1 else f"{ways}-way bank conflict"
    text = (
        f"{_VERB[request['op']]} of shared {array} at line {lineno}, warp {request['warp']} of block "
        f"{_block_text(request['block'])}: {verdict}"
    )
    fig.update_layout(
        title=_title(text, source),
        template="plotly_white",
        height=520,
        showlegend=True,
        xaxis={
            "title": {"text": "shared-memory bank (32 banks × 4-byte words)"},
            "range": [-1, BANKS],
            "dtick": 4,
        },
        yaxis=_lane_axis(),
        legend=_LEGEND,
    )
    return _caption(fig)


def lanes_figure(warp: dict, lines: dict) -> go.Figure:
    issues = warp["issues"]
    labels = []
    for issue in issues:
        _, lineno, source, _ = lines[issue["key"]]
        suffix = f" (#{issue['k'] + 1})" if issue["k"] else ""
        short = source if len(source) <= 40 else source[:39] + "…"
        labels.append(f"{len(labels) + 1}. line {lineno}{suffix}: {short}")
    on_x, on_y, on_hover, off_x, off_y, off_hover = [], [], [], [], [], []
    for label, issue in zip(labels, issues, strict=True):
        active = popcount(issue["mask"])
        for lane in range(warp["lanes"]):
            if issue["mask"] >> lane & 1:
                on_x.append(lane), on_y.append(label)
                on_hover.append(f"lane {lane} active at {label} ({active}/32 lanes)")
            else:
                off_x.append(lane), off_y.append(label)
                off_hover.append(f"lane {lane} idle at {label} ({active}/32 lanes)")
    fig = go.Figure()
    fig.add_trace(
        go.Scatter(
            x=on_x,
            y=on_y,
            mode="markers",
            name="active lane",
            hovertext=on_hover,
            hoverinfo="text",
            marker={"symbol": "square", "size": 10, "color": BLUE},
        )
    )
    fig.add_trace(
        go.Scatter(
            x=off_x,
            y=off_y,
            mode="markers",
            name="idle lane (masked off)",
            hovertext=off_hover,
            hoverinfo="text",
            marker={"symbol": "x-thin-open", "size": 8, "color": ORANGE, "line": {"width": 2}},
        )
    )
    total = sum(popcount(i["mask"]) for i in issues)
    efficiency = total / (len(issues) * WARP_SIZE) if issues else 0.0
    text = (
        f"Active lanes of warp {warp['warp']} in block {_block_text(warp['block'])}: SIMT efficiency "
        f"{efficiency:.0%}, {warp['paths']} distinct path(s)"
    )
    fig.update_layout(
        title=_title(text, ""),
        template="plotly_white",
        height=max(320, 60 + 22 * len(issues)),
        xaxis={"title": {"text": "lane (0–31)"}, "range": [-1, WARP_SIZE], "dtick": 4},
        yaxis={
            "title": {"text": "executed line, in order"},
            "autorange": "reversed",
            "type": "category",
            "categoryorder": "array",
            "categoryarray": labels,
        },
        legend=_LEGEND,
    )
    return _caption(fig)


def threads_figure(array: str, points: list[tuple], block_dim, threads: int) -> go.Figure:
    """``points``: (element index, global thread, op, block index) per access of one array; ``threads``: how
    many the launch started (the vertical axis shows them all, those that touched nothing too)."""
    fig = go.Figure()
    styles = {"load": (BLUE, "circle"), "store": (VERMILLION, "square"), "atomic": (GREEN, "diamond")}
    for op in ("load", "store", "atomic"):
        mine = [p for p in points if p[2] == op]
        if not mine:
            continue
        colour, symbol = styles[op]
        fig.add_trace(
            go.Scatter(
                x=[p[0] for p in mine],
                y=[p[1] for p in mine],
                mode="markers",
                name=f"{_VERB[op]} by that thread",
                hovertext=[f"thread {p[1]} (block {_block_text(p[3])}) {op}s {array}[{p[0]}]" for p in mine],
                hoverinfo="text",
                marker={"color": colour, "symbol": symbol, "size": 7, "opacity": 0.8},
            )
        )
    per_block = block_dim[0] * block_dim[1] * block_dim[2]
    rules(fig, "y", [edge - 0.5 for edge in range(per_block, threads, per_block)],  # block boundaries
          color=BLACK, width=1, dash="dot")
    fig.update_layout(
        title=_title(f"Which thread touches which element of {array} (dotted lines: block edges)", ""),
        template="plotly_white",
        height=420,
        xaxis={"title": {"text": f"element index of {array}"}},
        yaxis={"title": {"text": "global thread index"}, "range": [threads - 0.5, -0.5]},
        legend=_LEGEND,
        margin={"t": 110},
    )
    return _caption(fig)
