"""``Profile``: one traced launch reported in Nsight Compute's words, per kernel and per source line.
``microscope.profile()`` (launch.py, beside ``trace()``) traces a launch and returns one.

    from gpucourse import microscope
    p = microscope.profile(my_kernel, grid, block, *args)      # the arguments of trace()
    p                                   # a table in a notebook, text in a terminal
    p.value("l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum")
    p.table()                           # DataFrame: section, metric, label, microscope, unit, exactness, note
    p.lines()                           # DataFrame per source line, in the Source page's columns
    p.notes()                           # each metric's exactness note and the documentation it rests on

The metrics, their exactness and their sources are in ``ncu_metrics``; the counting rules are
``analysis``'s. ``registers_per_thread`` (ptxas decides it; a trace cannot see it) feeds the
occupancy rows; without it they leave the register limit out and say so.
"""

from __future__ import annotations

import html
import importlib

import pandas as pd

from gpucourse.errors import CourseError
from gpucourse.microscope import analysis
from gpucourse.microscope.errors import MicroscopeError
from gpucourse.microscope.ncu_metrics import BY_NAME, EXACTNESS, METRICS, TOPICS, Metric

# The lessons' occupancy calculator, named as a string (a lower layer imports no lesson; see measure/rehearsal).
OCCUPANCY_CALCULATOR = "gpucourse.lessons.occupancy.calculator.occupancy"

NAME_WIDTH = 70  # characters of the text table's metric column

# The Source page's columns (ncu's rules name the *Excessive* tables) the per-line table fills.
LINE_COLUMNS = (
    "Warp Issues (source line)",
    "Thread Instructions Executed",
    "Avg. Threads Executed",
    "Divergent Branches",
    "Global Requests",
    "L2 Theoretical Sectors Global",
    "L2 Theoretical Sectors Global Ideal",
    "L2 Theoretical Sectors Global Excessive",
    "Shared Instructions",
    "L1 Wavefronts Shared",
    "L1 Wavefronts Shared Ideal",
    "L1 Wavefronts Shared Excessive",
)


class Profile:
    """ncu's metric names with the microscope's values for one traced launch (see the module's docstring)."""

    def __init__(self, report, registers_per_thread=None, shared_config_bytes=None):
        if registers_per_thread is not None and (
            isinstance(registers_per_thread, bool) or not isinstance(registers_per_thread, int)
            or not 0 <= registers_per_thread <= 255
        ):
            raise MicroscopeError(
                f"registers_per_thread must be None or an integer 0..255; got {registers_per_thread!r}")
        self.report = report
        self.kernel_name = report.kernel_name
        self.registers_per_thread = registers_per_thread
        self.warps = len(report._warps)
        self.blocks = len({w["block"] for w in report._warps})
        carveout_percent = _carveout_percent(shared_config_bytes, report.cc)
        self._values, self._why = _kernel_values(report, registers_per_thread, carveout_percent)

    # -- numbers --------------------------------------------------------------------------------------

    def value(self, metric: str):
        """The microscope's value of one metric, by ncu's name (or the report's label)."""
        return self._values[_metric(metric).name]

    def values(self) -> dict:
        return dict(self._values)

    def per_warp(self, metric: str) -> float | None:
        """A count divided by the launch's warps: comparable across launch sizes (ratios are returned as they are)."""
        m = _metric(metric)
        value = self._values[m.name]
        if value is None or isinstance(value, str) or m.unit in ("%", "thread", "sector/request", "wavefront/inst"):
            return value
        return value / self.warps

    # -- tables ---------------------------------------------------------------------------------------

    def table(self, rows=None) -> pd.DataFrame:
        """Every metric, or only ``rows``: a topic of ``ncu_metrics.TOPICS`` ("global", "shared", "control",
        "first look", "occupancy") or ncu metric names, in that order."""
        chosen = METRICS if rows is None else [BY_NAME[name] for name in chosen_rows(rows)]
        rows = [
            {
                "section": m.section,
                "metric": m.name,
                "label": m.label,
                "microscope": self._values[m.name],
                "unit": m.unit,
                "exactness": m.exactness,
                "note": self._why.get(m.name, m.note),
            }
            for m in chosen
        ]
        return pd.DataFrame(rows, columns=["section", "metric", "label", "microscope", "unit", "exactness", "note"])

    def lines(self) -> pd.DataFrame:
        """Per source line, the Source page's counts (warp issues stand for ncu's SASS instructions)."""
        return _line_table(self.report)

    def beside(self, raw: dict, label: str = "ncu") -> pd.DataFrame:
        """This profile next to ncu's values (``raw``: ncu metric name -> number, e.g. one parsed CSV row)."""
        table = self.table()
        table.insert(4, label, [m.ncu_value(raw) for m in METRICS])
        return table

    def notes(self) -> str:
        """Each metric's exactness and the documentation it rests on, as text."""
        out = [f"Exactness: {', '.join(f'{k} = {v}' for k, v in EXACTNESS.items())}.", ""]
        for m in METRICS:
            out.append(f"{m.name} ({m.exactness}): {self._why.get(m.name, m.note)}")
            out.extend(f"    source: {source}" for source in m.sources())
        return "\n".join(out)

    # -- display --------------------------------------------------------------------------------------

    def _heading(self) -> str:
        r = self.report
        return (f"{self.kernel_name}: grid {r.grid_dim}, block {r.block_dim}, {r.threads:,} threads, {self.warps} "
                f"warps; counted by the microscope in Nsight Compute's words (cc {r.cc[0]}.{r.cc[1]})")

    def __repr__(self) -> str:
        lines, section = [self._heading()], None
        for m in METRICS:
            if m.section != section:
                section = m.section
                lines.append(f"  {section}")
            if len(m.name) > NAME_WIDTH:  # the derived rows' formulas: the name on a line of its own
                lines.append(f"    {m.name}")
            name = m.name if len(m.name) <= NAME_WIDTH else ""
            value = format_value(self._values[m.name])
            lines.append(f"    {name:<{NAME_WIDTH}} {value:>12} {m.unit:<15} {m.exactness}")
        lines.append("  p.notes(): how exact each value is, and why; p.lines(): per source line")
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        cells, section = [], None
        for m in METRICS:
            if m.section != section:
                section = m.section
                cells.append(f'<tr><th colspan="4" style="text-align:left">{html.escape(section)}</th></tr>')
            note = html.escape(self._why.get(m.name, m.note))
            cells.append(
                f'<tr title="{note}"><td><code>{html.escape(m.name)}</code><br><small>{html.escape(m.label)}</small>'
                f'</td><td style="text-align:right">{html.escape(format_value(self._values[m.name]))}</td>'
                f"<td>{html.escape(m.unit)}</td><td>{html.escape(m.exactness)}</td></tr>"
            )
        return (
            f"<div><p>{html.escape(self._heading())}</p><table><thead><tr><th>ncu metric</th><th>microscope</th>"
            f"<th>unit</th><th>exactness</th></tr></thead><tbody>{''.join(cells)}</tbody></table>"
            "<p><small>Hover a row for how exact it is; <code>.notes()</code> cites the documentation, "
            "<code>.lines()</code> gives the counts per source line.</small></p></div>"
        )


def chosen_rows(rows) -> tuple[str, ...]:
    """A topic of ``TOPICS`` or a list of the report's metric names (or labels), as ncu's names."""
    if isinstance(rows, str):
        if rows not in TOPICS:
            raise MicroscopeError(f"rows must be one of {', '.join(map(repr, TOPICS))} or a list of metric names; "
                                  f"got {rows!r}")
        return TOPICS[rows]
    names = tuple(_metric(name).name for name in rows)
    if not names:
        raise MicroscopeError("rows is empty: name a topic or at least one metric")
    return names


def format_value(value) -> str:
    if value is None or (isinstance(value, float) and value != value):  # None or NaN: not there
        return "n/a"
    if isinstance(value, str):
        return value
    if isinstance(value, int) or float(value).is_integer():
        return f"{int(value):,}"
    return f"{value:,.2f}"


def _metric(name: str) -> Metric:
    if name in BY_NAME:
        return BY_NAME[name]
    for m in METRICS:
        if m.label == name:
            return m
    raise MicroscopeError(f"no metric {name!r} in the report; its metrics are: {', '.join(BY_NAME)}")


# -- counting -------------------------------------------------------------------------------------------


def _shared_counts(requests) -> dict:
    instructions = wavefronts = ideal = 0
    for r in requests:
        w, i = analysis.bank_wavefronts(r["lanes"], r["addresses"], r["itemsize"])
        instructions, wavefronts, ideal = instructions + 1, wavefronts + w, ideal + i
    return {"instructions": instructions, "wavefronts": wavefronts, "conflicts": wavefronts - ideal}


def _branch_keys(issues) -> set:
    """Lines the lanes left for two or more different next lines somewhere in the launch (ifs, loop tests)."""
    targets: dict = {}
    for issue in issues:
        targets.setdefault(issue["key"], set()).update(issue["next"])
    return {key for key, nexts in targets.items() if len(nexts) > 1}


def _kernel_values(report, registers, carveout_percent) -> tuple[dict, dict]:
    values: dict = {}
    why: dict = {}
    requests = report._requests

    def chosen(space, op):
        return [r for r in requests if r["space"] == space and r["op"] == op]

    for op, short in (("load", "ld"), ("store", "st")):
        reqs = chosen("global", op)
        sectors = sum(len(r["sectors"]) for r in reqs)
        values[f"l1tex__t_requests_pipe_lsu_mem_global_op_{short}.sum"] = len(reqs)
        values[f"l1tex__t_sectors_pipe_lsu_mem_global_op_{short}.sum"] = sectors
        values[f"l1tex__average_t_sectors_per_request_pipe_lsu_mem_global_op_{short}.ratio"] = (
            sectors / len(reqs) if reqs else None)
        shared = _shared_counts(chosen("shared", op))
        values[f"smsp__sass_inst_executed_op_shared_{short}.sum"] = shared["instructions"]
        values[f"l1tex__data_pipe_lsu_wavefronts_mem_shared_op_{short}.sum"] = shared["wavefronts"]
        values[f"l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_{short}.sum"] = shared["conflicts"]
        values[f"l1tex__data_pipe_lsu_wavefronts_mem_shared_op_{short}.sum / "
               f"smsp__sass_inst_executed_op_shared_{short}.sum"] = (
            shared["wavefronts"] / shared["instructions"] if shared["instructions"] else None)
    atomics = chosen("global", "atomic")
    values["smsp__sass_inst_executed_op_global_atom.sum + smsp__sass_inst_executed_op_global_red.sum"] = len(atomics)
    values["(no ncu counter) global atomic updates by lanes"] = sum(len(r["lanes"]) for r in atomics)
    values["smsp__sass_inst_executed_op_shared_atom.sum"] = len(chosen("shared", "atomic"))

    issues = report._issues
    lanes = sum(analysis.popcount(i["mask"]) for i in issues)
    values["smsp__inst_executed.sum"] = len(issues)
    values["smsp__thread_inst_executed.sum"] = lanes
    values["smsp__thread_inst_executed_per_inst_executed.ratio"] = lanes / len(issues) if issues else None
    branch_keys = _branch_keys(issues)
    at_branches = [i for i in issues if i["key"] in branch_keys]
    divergent = sum(1 for i in issues if i["successors"] > 1)
    values["smsp__sass_branch_targets.sum"] = len(at_branches)
    values["smsp__sass_branch_targets_threads_divergent.sum"] = divergent
    if at_branches:
        values["smsp__sass_average_branch_targets_threads_uniform.pct"] = (
            100.0 * sum(1 for i in at_branches if i["successors"] == 1) / len(at_branches))
    else:
        values["smsp__sass_average_branch_targets_threads_uniform.pct"] = None
        why["smsp__sass_average_branch_targets_threads_uniform.pct"] = (
            "no line here sends lanes to different next lines: no branch the warps could split at. " +
            BY_NAME["smsp__sass_average_branch_targets_threads_uniform.pct"].note)

    values["launch__thread_count"] = report.threads
    values["launch__shared_mem_per_block_static"] = report.static_shared_bytes
    values["launch__shared_mem_per_block_dynamic"] = report.dynamic_shared_bytes
    values["launch__registers_per_thread"] = registers
    values.update(_occupancy_values(report, registers, carveout_percent, why))
    return values, why


def _calculator(name: str):
    module, _, _ = OCCUPANCY_CALCULATOR.rpartition(".")
    return getattr(importlib.import_module(module), name)


def _carveout_percent(shared_config_bytes, cc) -> int | None:
    """The smallest carve-out preference (CUDA's percent) that gives an SM ``shared_config_bytes``."""
    if shared_config_bytes is None:
        return None
    carveout_bytes = _calculator("carveout_bytes")
    for percent in range(101):
        if carveout_bytes(percent, cc) == shared_config_bytes:
            return percent
    sizes = sorted({carveout_bytes(p, cc) for p in range(101)})
    raise MicroscopeError(f"shared_config_bytes must be a carve-out of cc {cc[0]}.{cc[1]}: one of {sizes}; "
                          f"got {shared_config_bytes!r}")


def _occupancy_values(report, registers, carveout_percent, why: dict) -> dict:
    names = ("launch__occupancy_limit_registers", "launch__occupancy_limit_shared_mem",
             "launch__occupancy_limit_warps", "launch__occupancy_limit_blocks",
             "sm__maximum_warps_per_active_cycle_pct", "(smallest launch__occupancy_limit_*)")
    occupancy = _calculator(OCCUPANCY_CALCULATOR.rpartition(".")[2])
    threads = report.block_dim[0] * report.block_dim[1] * report.block_dim[2]
    shared = report.static_shared_bytes + report.dynamic_shared_bytes
    try:
        result = occupancy(threads, registers or 0, shared, report.cc, carveout_percent=carveout_percent)
    except CourseError as exc:  # a compute capability the calculator does not model
        for n in names:
            why[n] = f"the occupancy calculator cannot answer: {exc}"
        return dict.fromkeys(names)
    limits = result.limits
    values = {
        "launch__occupancy_limit_registers": limits["registers"] if registers is not None else None,
        "launch__occupancy_limit_shared_mem": limits["shared memory"],
        "launch__occupancy_limit_warps": limits["warps"],
        "launch__occupancy_limit_blocks": limits["blocks"],
        "sm__maximum_warps_per_active_cycle_pct": result.occupancy_pct,
        "(smallest launch__occupancy_limit_*)": result.limiter,
    }
    if registers is None:
        missing = ("registers per thread not given (ptxas decides them): the register limit is left out, so this "
                   "is an upper bound. ")
        for n in ("launch__occupancy_limit_registers", "sm__maximum_warps_per_active_cycle_pct",
                  "(smallest launch__occupancy_limit_*)"):
            why[n] = missing + BY_NAME[n].note
    return values


def _line_table(report) -> pd.DataFrame:
    per_line: dict = {}

    def row(key):
        if key not in per_line:
            per_line[key] = dict.fromkeys(LINE_COLUMNS, 0)
        return per_line[key]

    for issue in report._issues:
        r = row(issue["key"])
        r["Warp Issues (source line)"] += 1
        r["Thread Instructions Executed"] += analysis.popcount(issue["mask"])
        r["Divergent Branches"] += issue["successors"] > 1
    for request in report._requests:
        r = row(request["key"])
        if request["space"] == "global":
            sectors, ideal = len(request["sectors"]), analysis.ideal_sectors(request["bytes_requested"])
            r["Global Requests"] += 1
            r["L2 Theoretical Sectors Global"] += sectors
            r["L2 Theoretical Sectors Global Ideal"] += ideal
            r["L2 Theoretical Sectors Global Excessive"] += sectors - ideal
        else:
            wavefronts, ideal = analysis.bank_wavefronts(request["lanes"], request["addresses"], request["itemsize"])
            r["Shared Instructions"] += 1
            r["L1 Wavefronts Shared"] += wavefronts
            r["L1 Wavefronts Shared Ideal"] += ideal
            r["L1 Wavefronts Shared Excessive"] += wavefronts - ideal
    rows = []
    for key in sorted(per_line):
        counts = per_line[key]
        issues = counts["Warp Issues (source line)"]
        counts["Avg. Threads Executed"] = counts["Thread Instructions Executed"] / issues if issues else None
        rows.append({**report._where(key), **counts})
    return pd.DataFrame(rows, columns=["function", "line", "source", "via", *LINE_COLUMNS])
