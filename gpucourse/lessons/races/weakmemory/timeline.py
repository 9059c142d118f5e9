"""``timeline_figure``: two threads' memory operations around one race of a ``RaceReport``, in the order the race
scheduler ran them."""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from gpucourse import validate
from gpucourse.lessons.races.weakmemory.runs import RaceReport
from gpucourse.viz import charts

# --------------------------------------------------------------------------------------------
# Pictures


def _short(value) -> str:
    if isinstance(value, float | np.floating):
        return f"{value:.3g}"
    return str(value)


def _event_label(e) -> str:
    where = f"{e.array}[{e.element}]"
    if e.op == "load":
        return f"load {where}<br>→ {_short(e.value)}"
    if e.op == "store":
        return f"store {where}<br>← {_short(e.value)}"
    if e.op == "atomic":
        return f"atomic {where}<br>{_short(e.value)} → {_short(e.new_value)}"
    return e.op


def timeline_figure(report: RaceReport, which: str = "lost", index: int = 0, context: int = 1) -> go.Figure:
    """Two threads' memory operations around one race, in the order the scheduler ran them.

    ``which="lost"``: lost update number ``index`` (two threads read the same value and both wrote:
    one write is gone). ``which="stale"``: stale read number ``index`` and the write it missed.
    ``context`` earlier operations of each thread are shown too; other threads' operations that ran
    in between are not drawn (the tick labels are the real step numbers)."""
    which = validate.choice("which", which, ("lost", "stale"))
    index = validate.integer("index", index, minimum=0)
    context = validate.integer("context", context, minimum=0, maximum=20)
    ev = report.events
    fig = charts.figure("", "step of the interleaving (other threads' steps in between are not drawn)", "thread",
                        charts.source_caption("counted", report.caption), height=380)
    table = report.lost_updates() if which == "lost" else report.stale_reads()
    what = "lost update" if which == "lost" else "stale read"
    if index >= len(table):
        fig.update_layout(title={"text": f"No {what} #{index} in this run (it had {len(table)})"})
        charts.no_data(fig, "Nothing to draw: try another seed or schedule")
        return fig
    row = table.iloc[index]
    if which == "lost":
        threads = [int(row.lost_thread), int(row.thread)]
        lo, hi = int(min(row.load_step, row.lost_step)), int(row.store_step)
        first, second = int(row.lost_step), int(row.store_step)
        title = (f"A lost update: thread {threads[1]} read {row['array']}[{row.element}] = {row.loaded_value}; "
                 f"thread {threads[0]} then wrote {row.lost_value}; thread {threads[1]}'s {row.stored_value} erased it")
    else:
        writes = ev[(ev["array"] == row["array"]) & (ev.element == row.element) & (ev.op != "load")
                    & (ev.step < row.step)]
        writer = int(writes.thread.iloc[-1]) if len(writes) else int(row.thread)
        threads = [writer, int(row.thread)] if writer != int(row.thread) else [int(row.thread)]
        lo, hi = (int(writes.step.iloc[-1]) if len(writes) else int(row.step)), int(row.step)
        first, second = (int(writes.step.iloc[-1]) if len(writes) else None), int(row.step)
        title = (f"A stale read (weak-memory model): block {row.block} read {row['array']}[{row.element}] = "
                 f"{row.value} after thread {writer} had written a newer value")
    mine = ev.thread.isin(threads)
    before = ev[mine & (ev.step < lo)].groupby("thread").tail(context)
    window = pd.concat([before, ev[mine & (ev.step >= lo) & (ev.step <= hi)]]).sort_values("step")
    names = {t: f"block {int(ev[ev.thread == t].block.iloc[0])} · thread {t}" for t in threads}
    order = {int(step): n for n, step in enumerate(window.step)}  # evenly spaced, in the order they ran
    for n, t in enumerate(threads):
        ops = window[window.thread == t]
        on_race = list((ops["array"] == row["array"]) & (ops.element == row.element))
        fig.add_scatter(
            x=[order[int(s)] for s in ops.step], y=[names[t]] * len(ops), mode="markers+text", name=names[t],
            text=[_event_label(e) for e in ops.itertuples(index=False)],
            textposition="top center" if n % 2 == 0 else "bottom center",
            marker={"symbol": [charts.MARKERS[n] if k else "circle-open" for k in on_race], "size": 13,
                    "color": charts.PALETTE[n]},
            hovertext=[f"step {e.step}, line {e.line}: {report.source.get(int(e.line), '')}"
                       for e in ops.itertuples(index=False)],
        )
    if first is not None and first in order and second in order:  # the write that is gone/missed → who did it
        fig.add_annotation(x=order[second], y=names[threads[-1]], ax=order[first], ay=names[threads[0]],
                           xref="x", yref="y", axref="x", ayref="y", showarrow=True, arrowhead=3, arrowwidth=2,
                           arrowcolor=charts.PALETTE[3], text="")
    fig.update_layout(title={"text": title, "font": {"size": 14}}, margin={"l": 150, "r": 60})
    fig.update_yaxes(categoryorder="array", categoryarray=[names[t] for t in threads],
                     range=[len(threads) - 0.4, -0.6], title=None)
    fig.update_xaxes(tickvals=list(order.values()), ticktext=[str(s) for s in order],
                     range=[-0.7, len(order) - 0.3])
    return fig
