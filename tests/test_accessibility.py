"""Accessibility without a browser: every chart and picture of the finished lessons, and alt text.

* Every figure builder of every gpucourse module, found by `figure_builders` (so a new one cannot
  be missed) and called with its defaults or as the lessons and labs call it, and the microscope's
  pictures: a title; axis titles that name a unit (or count or index something) on every
  numeric axis; only the course's palette (charts.PALETTE), greys, black and white; series in the
  legend told apart by marker, dash or pattern as well as colour; a source caption.
* Every lesson cell that displays a picture (a figure builder called directly in a code cell) comes
  right after a markdown cell that describes it for a screen reader, collapsed so that sighted
  readers are not made to read it first: "<details><summary>Description of the picture</summary>
  …</details>" (a few words at least). No visible "*Picture (alt text): …*" paragraph is left.
Keyboard operability of the widgets is checked in the browser (tests/test_browser.py).
"""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import re

import jupytext
import numpy as np
import plotly.graph_objects as go
import pytest
from lab06_kernels import lab_handoff_unfenced
from numba import cuda, float32  # tests/conftest.py imported gpucourse first: the simulator is chosen

import gpucourse
from gpucourse import microscope
from gpucourse.lessons import coalescing, measuring, warps
from gpucourse.lessons import occupancy as occupancy_lesson
from gpucourse.measure import runtime
from gpucourse.tooling.build import lesson_sources
from gpucourse.viz import charts, cited, diagrams

DESCRIPTION_SUMMARY = "Description of the picture"
ALT_TEXT = re.compile(rf"<details>\s*<summary>{DESCRIPTION_SUMMARY}</summary>\s*(?P<text>.*?)\s*</details>", re.DOTALL)
MIN_DESCRIPTION_WORDS = 8  # "A chart." describes nothing
VISIBLE_ALT_TEXT = re.compile(r"\*Picture \(alt text\)")

# Gaps in modules this test does not own, each named so that fixing it turns the xfail into a
# failure to remove the entry (strict).
KNOWN_GAPS = {
}


@cuda.jit
def _column_read(out):
    tile = cuda.shared.array((32, 32), float32)
    tx = cuda.threadIdx.x
    for r in range(32):
        tile[r, tx] = r * 32 + tx
    cuda.syncthreads()
    out[tx] = tile[tx, 3]  # every lane in bank 3


@cuda.jit
def _half_warp_branch(out):
    i = cuda.grid(1)
    if i % 32 < 16:
        out[i] = 1.0
    else:
        out[i] = 2.0


def _occupancy_as_a_learner_writes_it(threads, registers, shared_bytes, cc):
    from gpucourse.lessons.occupancy.calculator import occupancy

    r = occupancy(threads, registers, shared_bytes, cc)
    return {"blocks": r.active_blocks, "occupancy_pct": 100 * r.occupancy, "limiters": set(r.limiters)}


def _stale_read_timeline():
    from gpucourse.lessons import races
    from gpucourse.lessons.races import weakmemory

    run = races.handoff(producer_block=1, spin_cap=200, fence=False, schedule="round-robin", memory="weak")
    return weakmemory.timeline_figure(run["report"], "stale")


def _marked():
    from gpucourse.viz import predictions

    fig = charts.figure("Relative time", "fraction of lanes on path A", "time ÷ time on A (×)",
                        charts.source_caption("model"))
    charts.line(fig, [0, 0.5, 1], [1, 2, 1], "model", 0)
    predictions.mark(fig, 1.5, x=0.5, label="interleaved")
    return predictions.mark(fig, 1.2, label="clustered")


# Builders that need arguments, called the way the lessons call them (every other builder is found
# and called with its defaults by `figure_builders`).
def _collectives_pingpong():
    import pandas as pd

    from gpucourse.lessons import collectives

    link = collectives.LINKS["loopback"]
    table = pd.DataFrame({"size_bytes": [1024, 65536, 1 << 20]})
    table["time_s"] = link.alpha_s + table.size_bytes / link.bandwidth_bytes_per_s
    table["model_time_s"] = table.time_s
    return collectives.pingpong_figure(table, link)


WITH_ARGUMENTS = {
    # lesson 09: the chart of a gloo ping-pong, here drawn from the loopback model's points (a test fixture)
    "lessons.collectives.figures.pingpong_figure": lambda: _collectives_pingpong(),
    "lessons.warps.figures.coverage_figure": lambda: warps.coverage_figure(40, 40),
    "lessons.measuring.figures.roofline_figure(fp32)": lambda: measuring.roofline_figure("fp32"),
    "lessons.coalescing.figures.warp_figure(stride 8, offset 1)": lambda: coalescing.warp_figure(stride=8, offset=1),
    "lessons.occupancy.figures.speed_figure(compute)": lambda: occupancy_lesson.speed_figure("compute"),
    "microscope.picture_sectors": lambda: coalescing.trace_copy(stride=2).picture_sectors(array="src"),
    "microscope.picture_banks": lambda: microscope.trace(_column_read, 1, 32, np.zeros(32, np.float32))
    .picture_banks(op="load"),
    "microscope.picture_lanes": lambda: microscope.trace(_half_warp_branch, 1, 64, np.zeros(64)).picture_lanes(1),
    "microscope.picture_threads": lambda: microscope.trace(_half_warp_branch, 2, 32, np.zeros(64)).picture_threads(),
    "lessons.races.weakmemory.timeline.timeline_figure": _stale_read_timeline,
    "lessons.occupancy.figures.occupancy_chart": lambda: occupancy_lesson.occupancy_chart("threads_per_block"),
    "lessons.races.figures.memory_model_picture(fenced)": lambda: _races().memory_model_picture(fenced=True),
    "lessons.occupancy.figures.learner_curve_figure": lambda: occupancy_lesson.learner_curve_figure(
        _occupancy_as_a_learner_writes_it, 37, 4 * 1024, (8, 6)),
    "lessons.precision.figures.dot_errors_figure": lambda: _precision().dot_errors_figure(
        {"fp64 reference": lambda a, b: (a.astype(np.float64) * b.astype(np.float64)).sum(axis=1)},
        ns=(64, 512), rows=2),
    "lessons.races.figures.show_histogram": lambda: _races().show_histogram(_races().histogram_atomic),
    "lessons.races.figures.show_handoff": lambda: _races().show_handoff(lab_handoff_unfenced),
    "viz.predictions.mark": lambda: _marked(),
    "lessons.feeding.figures.timeline_figure": lambda: _feeding().timeline_figure(
        _feeding().timeline(_feeding().small_kernels(4, 2.0)), "four small kernels", "model"),
    "lessons.feeding.figures.stream_timeline_figure": lambda: _feeding().stream_timeline_figure(
        _overlap_events(), "4 chunks on 2 streams", charts.source_caption("measured", "a GPU, CUDA events")),
}
# Builders the test cannot call alone, each with why; a new builder must be callable or named here.
NOT_CALLED = {
    "viz.charts.*": "the chart primitives every builder above is made of",
    "chartlayout.*": "the layout under viz.charts and the microscope's pictures (fit, rules...)",
    "viz.cited.*": "adds published series and captions to a lesson figure (each lesson figure that uses it is checked)",
    "viz.predictions.mark_chart": "marks a LiveChart's figure with predictions.mark (checked above)",
    "microscope.pictures.*": "drawn through the microscope's picture_* methods (above)",
    "lessons.measuring.figures.async_figure": "drawn by measuring.async_pitfall_figure (checked)",
}


def _precision():
    from gpucourse.lessons import precision

    return precision


def _feeding():
    from gpucourse.lessons import feeding

    return feeding


def _overlap_events():
    """Rows as feeding.overlap_events returns them (a GPU measurement's shape, made up here)."""
    import pandas as pd

    feeding = _feeding()
    engines = (feeding.model.H2D, feeding.model.SMS, feeding.model.D2H)
    return pd.DataFrame([{"engine": e, "name": f"chunk {c} op {k}", "kind": "kernel" if k == 1 else "copy",
                          "stream": c % 2, "start_us": 10.0 * (c + k), "end_us": 10.0 * (c + k) + 8.0}
                         for c in range(4) for k, e in enumerate(engines)])


def _races():
    from gpucourse.lessons import races

    return races

BUILDER_NAME = re.compile(r"(_figure|_picture|_charts?|_widget|_explorer|_timeline)$")


def figure_builders() -> dict[str, object]:
    """Every public function of every gpucourse module that returns a figure (annotated so, or named
    like one: *_figure, *_picture, *_chart(s), *_widget, *_explorer, *_timeline), by module.name."""
    found = {}
    for info in pkgutil.walk_packages(gpucourse.__path__, "gpucourse."):
        if info.name.endswith(("__main__", ".book")):
            continue
        module = importlib.import_module(info.name)
        for name, func in inspect.getmembers(module, inspect.isfunction):
            if name.startswith("_") or func.__module__ != module.__name__:
                continue
            returns = inspect.signature(func).return_annotation
            if returns in (go.Figure, "go.Figure", "plotly.graph_objects.Figure") or BUILDER_NAME.search(name):
                found[f"{info.name.removeprefix('gpucourse.')}.{name}"] = func
    return found


def _called_with_defaults(func):
    def build():
        parameters = inspect.signature(func).parameters
        result = func(threaded=False) if "threaded" in parameters else func()
        return result if isinstance(result, go.Figure) else go.Figure(result.figure)
    return build


def _needs_arguments(func) -> bool:
    return any(p.default is inspect.Parameter.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD,
                                                                    p.KEYWORD_ONLY)
               for p in inspect.signature(func).parameters.values())


def _not_called(name: str) -> bool:
    return any(name == pattern or (pattern.endswith("*") and name.startswith(pattern[:-1]))
               for pattern in NOT_CALLED)


FIGURES = {name: _called_with_defaults(func) for name, func in figure_builders().items()
           if not _needs_arguments(func) and not _not_called(name)}
FIGURES.update(WITH_ARGUMENTS)


def test_every_figure_builder_is_checked():
    """A new figure builder is checked without anyone adding it here: called with its defaults, or,
    if it needs arguments, it must have an entry in WITH_ARGUMENTS (or a reason in NOT_CALLED)."""
    builders = figure_builders()
    assert len(builders) >= 60, sorted(builders)
    unchecked = [name for name in builders if name not in FIGURES and not _not_called(name)
                 and not any(key.startswith(name) for key in WITH_ARGUMENTS)]
    assert unchecked == [], f"add a call to WITH_ARGUMENTS for {unchecked}"
    for lesson in ("tiling", "weakmemory", "races", "formats", "precision", "divergence"):
        assert any(f".{lesson}." in f".{name}" for name in FIGURES), lesson


# --- colours ---------------------------------------------------------------------------------------

NAMED = {"black": (0, 0, 0), "white": (255, 255, 255), "gray": (128, 128, 128), "grey": (128, 128, 128),
         "lightgray": (211, 211, 211), "lightgrey": (211, 211, 211), "darkgray": (169, 169, 169),
         "darkgrey": (169, 169, 169), "dimgray": (105, 105, 105), "dimgrey": (105, 105, 105),
         "silver": (192, 192, 192), "gainsboro": (220, 220, 220), "whitesmoke": (245, 245, 245)}


def rgb(colour: str) -> tuple[int, int, int] | None:
    text = colour.strip().lower()
    if text in NAMED:
        return NAMED[text]
    if text in ("transparent", "rgba(0,0,0,0)"):
        return (255, 255, 255)
    if re.fullmatch(r"#[0-9a-f]{3}", text):
        return tuple(int(c * 2, 16) for c in text[1:])
    if re.fullmatch(r"#[0-9a-f]{6}([0-9a-f]{2})?", text):
        return tuple(int(text[i:i + 2], 16) for i in (1, 3, 5))
    match = re.fullmatch(r"rgba?\(\s*(\d+)\s*,\s*(\d+)\s*,\s*(\d+)\s*(,\s*[\d.]+\s*)?\)", text)
    return tuple(int(v) for v in match.groups()[:3]) if match else None


PALETTE_RGB = {rgb(c) for c in charts.PALETTE}


def allowed_colour(colour) -> bool:
    if not isinstance(colour, str):
        return True  # a number mapped through a colour scale (checked separately)
    value = rgb(colour)
    return value is not None and (value in PALETTE_RGB or value[0] == value[1] == value[2])


def _colours(node, path=""):
    """Every (path, colour) in a figure's JSON, outside the template."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "template":
                continue
            where = f"{path}.{key}" if path else key
            if key.endswith("colorscale") and isinstance(value, (list, tuple)):
                yield from ((where, stop[1]) for stop in value)
            elif key.endswith("color") or key == "colorway":
                values = value if isinstance(value, (list, tuple, np.ndarray)) else [value]
                yield from ((where, v) for v in values if v is not None)
            else:
                yield from _colours(value, where)
    elif isinstance(node, (list, tuple)):
        for i, value in enumerate(node):
            yield from _colours(value, f"{path}[{i}]")


def colour_problems(fig: go.Figure) -> list[str]:
    problems = [f"{where} = {colour!r} is not in charts.PALETTE (nor a grey)"
                for where, colour in _colours(fig.to_plotly_json()) if not allowed_colour(colour)]
    colorway = fig.layout.colorway or fig.layout.template.layout.colorway or ()
    defaulted = [t for t in fig.data if t.type in ("scatter", "bar", "histogram", "box")
                 and _explicit_colour(t) is None and getattr(t, "mode", None) != "text"]
    bad_way = [c for c in list(colorway)[:len(defaulted)] if not allowed_colour(c)]
    if bad_way:
        problems.append(f"traces {[t.name for t in defaulted]} take default colours {bad_way} (set colorway=PALETTE)")
    for trace in fig.data:
        if trace.type in ("heatmap", "contour") and trace.colorscale is None:
            problems.append(f"{trace.type} {trace.name!r} uses the default colour scale, not the palette")
    return problems


def _explicit_colour(trace):
    for part in ("marker", "line"):
        obj = getattr(trace, part, None)
        if obj is not None and getattr(obj, "color", None) is not None:
            return obj.color
    return None


# --- axes, legend, caption -------------------------------------------------------------------------

# A numeric axis names its unit in parentheses, or counts, indexes or compares something.
UNIT = re.compile(r"\(.+\)|\b(per|KB|MB|GB|bytes?|ms|µs|threads|warps|blocks|sectors|registers|lanes|elements|"
                  r"index|idx|ratio|fraction|÷)\b|threadIdx|%|×", re.IGNORECASE)


def _is_numeric(values) -> bool:
    if values is None:
        return False
    items = list(values)
    return bool(items) and all(isinstance(v, (int, float, np.integer, np.floating)) or v is None for v in items)


def axis_problems(fig: go.Figure) -> list[str]:
    problems = []
    for key in fig.layout:
        if not re.fullmatch(r"[xy]axis\d*", key):
            continue
        axis = fig.layout[key]
        if axis.visible is False or axis.showticklabels is False:
            continue
        letter, ref = key[0], key[0] + key[5:]
        values = [v for t in fig.data if (getattr(t, f"{letter}axis", None) or letter) == ref
                  for v in (getattr(t, letter, None) if getattr(t, letter, None) is not None else [])]
        if not _is_numeric(values):
            continue  # categories (or nothing drawn): the tick labels say what each one is
        title = axis.title.text or ""
        if not title:
            problems.append(f"{key} (numeric) has no title")
        elif not UNIT.search(title):
            problems.append(f"{key} title {title!r} names no unit")
    return problems


def _signature(trace) -> tuple:
    """What tells a series apart besides its colour."""
    marker = getattr(trace, "marker", None)
    line = getattr(trace, "line", None)
    pattern = getattr(marker, "pattern", None) if marker is not None else None
    symbol = getattr(marker, "symbol", None) if marker is not None else None
    return (trace.type, getattr(trace, "mode", None),
            tuple(symbol) if isinstance(symbol, (list, tuple)) else symbol,
            getattr(line, "dash", None) if line is not None else None,
            getattr(pattern, "shape", None) if pattern is not None else None,
            getattr(marker, "pattern_shape", None) if marker is not None and hasattr(marker, "pattern_shape") else None)


def legend_problems(fig: go.Figure) -> list[str]:
    if fig.layout.showlegend is False:
        return []
    shown = [t for t in fig.data if t.showlegend is not False and t.name]
    if len(shown) < 2 and fig.layout.showlegend is not True:
        return []
    by_sig: dict[tuple, list[str]] = {}
    for trace in shown:  # series in different panels are told apart by where they are
        panel = (getattr(trace, "xaxis", None) or "x", getattr(trace, "yaxis", None) or "y")
        by_sig.setdefault((panel, _signature(trace)), []).append(trace.name)
    return [f"legend entries {names} differ by colour alone (give each a marker, dash or pattern)"
            for names in by_sig.values() if len(set(names)) > 1]


def figure_problems(fig: go.Figure) -> list[str]:
    problems = []
    if not (fig.layout.title.text or "").strip():
        problems.append("no title")
    problems += axis_problems(fig) + colour_problems(fig) + legend_problems(fig)
    if not charts.caption_of(fig).strip():
        problems.append("no source caption (charts.set_source / charts.figure(source=...))")
    return problems


# A caption that says there is no GPU timing behind the chart (simulator mode, no recording).
NO_GPU_TIMING = re.compile(r"no GPU here|^No data|no recording|none \(no GPU", re.IGNORECASE)


def timing_problems(fig: go.Figure) -> list[str]:
    """Issue 18: without a GPU or a recording, a timing chart draws a cited published measurement or says,
    in its caption, why it shows only the model and the counts."""
    text = charts.caption_of(fig)
    problems = []
    if NO_GPU_TIMING.search(text) and cited.PUBLISHED_LEAD not in text and cited.BECAUSE_LEAD not in text:
        problems.append("no GPU timing, and neither a published measurement nor why there is none")
    if cited.PUBLISHED_LEAD in text and not any((t.name or "").startswith("published") for t in fig.data):
        problems.append("the caption cites a published source but no series named 'published…' is drawn")
    return problems


@pytest.mark.parametrize("name", list(FIGURES))
def test_chart_is_accessible(name):
    fig = FIGURES[name]()
    if name in KNOWN_GAPS:
        problems = figure_problems(fig)
        if problems:
            pytest.xfail(f"{KNOWN_GAPS[name]}: {problems}")
        pytest.fail(f"{name} is fixed: remove it from KNOWN_GAPS")
    assert isinstance(fig, go.Figure), type(fig)
    assert figure_problems(fig) == []
    if not runtime.is_gpu():
        assert timing_problems(fig) == []


def test_the_timing_check_wants_published_data_or_a_reason():
    bare = charts.figure("t", "size (bytes)", "time (ms)", charts.source_caption("none", "no GPU here"))
    assert timing_problems(bare) == ["no GPU timing, and neither a published measurement nor why there is none"]
    assert timing_problems(cited.because(bare, "divergence")) == []
    claimed = cited.cite(charts.figure("t", "n", "TFLOP/s", "No data"), "Datasheet", cited.MAMF)
    assert timing_problems(claimed) == [
        "the caption cites a published source but no series named 'published…' is drawn"]
    cited.mamf_lines(claimed, ["bf16"], [1024, 4096])
    assert timing_problems(claimed) == []


def test_the_checks_catch_what_they_should():
    bad = go.Figure()
    bad.add_scatter(x=[1, 2], y=[1, 2], name="a", line={"color": "#ff0000"})
    bad.add_scatter(x=[1, 2], y=[2, 3], name="b", line={"color": "#00ff00"})
    bad.update_layout(xaxis_title="size", yaxis_title="")
    problems = " | ".join(figure_problems(bad))
    for expected in ("no title", "xaxis title 'size' names no unit", "yaxis (numeric) has no title",
                     "'#ff0000' is not in charts.PALETTE", "differ by colour alone", "no source caption"):
        assert expected in problems, problems
    good = charts.figure("t", "size (bytes)", "time (ms)", charts.source_caption("model"))
    charts.line(good, [1, 2], [1, 2], "a", 0)
    charts.line(good, [1, 2], [2, 3], "b", 1)
    assert figure_problems(good) == []


# --- alt text in the lessons -----------------------------------------------------------------------

def _picture_builders() -> set[str]:
    """Names of every gpucourse function that returns a figure, and the microscope's picture methods."""
    names = {"picture_sectors", "picture_banks", "picture_lanes"}
    for info in pkgutil.walk_packages(gpucourse.__path__, "gpucourse."):
        if info.name.endswith(("__main__", ".book")):
            continue
        module = importlib.import_module(info.name)
        for name, func in inspect.getmembers(module, inspect.isfunction):
            if name.startswith("_") or func.__module__ != module.__name__:
                continue
            returns = inspect.signature(func).return_annotation
            if returns in (go.Figure, "go.Figure", "plotly.graph_objects.Figure") or module is diagrams:
                names.add(name)
    return names


def _displayed_calls(source: str) -> list[str]:
    """Names of the functions whose result a code cell displays (its last expression)."""
    code = "\n".join(line for line in source.splitlines() if not line.lstrip().startswith(("%", "!")))
    try:
        body = ast.parse(code).body
    except SyntaxError:
        return []
    if not body or not isinstance(body[-1], ast.Expr):
        return []
    calls = []
    for node in ast.walk(body[-1].value):
        if isinstance(node, ast.Call):
            func = node.func
            calls.append(func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", ""))
    return calls


def described(markdown: str) -> bool:
    """The markdown holds a collapsed description of a few words at least."""
    return any(len(m.group("text").split()) >= MIN_DESCRIPTION_WORDS for m in ALT_TEXT.finditer(markdown))


def missing_alt_text(source_path) -> list[str]:
    builders = _picture_builders()
    cells = jupytext.read(source_path).cells
    missing = []
    for index, cell in enumerate(cells):
        if cell.cell_type == "markdown" and VISIBLE_ALT_TEXT.search(cell.source):
            missing.append(f"cell {index}: a visible '*Picture (alt text)' paragraph; collapse it into "
                           f"<details><summary>{DESCRIPTION_SUMMARY}</summary>")
        if cell.cell_type != "code":
            continue
        shown = [name for name in _displayed_calls(cell.source) if name in builders]
        if not shown:
            continue
        before = cells[index - 1] if index else None
        if before is None or before.cell_type != "markdown" or not described(before.source):
            missing.append(f"cell {index} ({shown[0]}) has no <details><summary>{DESCRIPTION_SUMMARY}</summary> "
                           f"in the markdown before it")
    return missing


@pytest.mark.parametrize("source", lesson_sources(), ids=lambda p: p.stem)
def test_every_picture_has_alt_text(source):
    assert missing_alt_text(source) == []


def _lesson(tmp_path, first_markdown: str) -> object:
    lesson = tmp_path / "99_x.py"
    lesson.write_text(f"# %% [markdown]\n{first_markdown}\n\n# %%\nfrom gpucourse.viz import diagrams\n\n"
                      "diagrams.memory_hierarchy()\n\n# %% [markdown]\n"
                      f"# <details><summary>{DESCRIPTION_SUMMARY}</summary>\n#\n"
                      "# Nested boxes from registers through shared memory and L2 to HBM.\n#\n# </details>\n\n"
                      "# %%\ndiagrams.execution_hierarchy()\n")
    return lesson


def test_alt_text_check_finds_a_picture_without_it(tmp_path):
    assert missing_alt_text(_lesson(tmp_path, "# Some prose.")) == [
        f"cell 1 (memory_hierarchy) has no <details><summary>{DESCRIPTION_SUMMARY}</summary> in the markdown before it"]


@pytest.mark.parametrize("markdown", [
    f"# <details><summary>{DESCRIPTION_SUMMARY}</summary>\n#\n# </details>",  # empty
    f"# <details><summary>{DESCRIPTION_SUMMARY}</summary>\n#\n# A chart.\n#\n# </details>",  # says nothing
    "# <details><summary>Details</summary>\n#\n# Nested boxes from registers through shared memory and L2.\n"
    "# </details>",
])
def test_alt_text_check_rejects_an_empty_or_unnamed_description(tmp_path, markdown):
    assert len(missing_alt_text(_lesson(tmp_path, markdown))) == 1


def test_alt_text_check_accepts_a_collapsed_description_and_rejects_a_visible_paragraph(tmp_path):
    good = (f"# <details><summary>{DESCRIPTION_SUMMARY}</summary>\n#\n"
            "# Nested boxes from registers through shared memory and L2 to HBM.\n#\n# </details>")
    assert missing_alt_text(_lesson(tmp_path, good)) == []
    cluttered = good + "\n#\n# *Picture (alt text): nested boxes from registers through shared memory to HBM.*"
    assert missing_alt_text(_lesson(tmp_path, cluttered)) == [
        "cell 0: a visible '*Picture (alt text)' paragraph; collapse it into "
        f"<details><summary>{DESCRIPTION_SUMMARY}</summary>"]
