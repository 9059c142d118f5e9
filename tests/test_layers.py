"""The layer rule of ARCHITECTURE.md, checked on every module's imports (read with ast):

    notebooks/labs -> gpucourse.lessons -> viz -> measure -> microscope -> (errors, hardware, validate, chartlayout)

with gpucourse.tooling (and ``python -m gpucourse``) on top. A module may import its own layer and the
layers below it, never a layer above. No modules import each other in a circle (function-level imports
count: a circle of them is one call away from a partly initialised module). No package exports a public
name that is also one of its submodules' names, unless it is that submodule (once the module
``microscope/profile.py`` was imported anywhere, ``from gpucourse.microscope import profile`` gave the
module, not the function the package exported under that name). Inside a lesson package the parts are layered too:
kernels -> model -> experiments -> figures -> __init__ (a part imports only the parts before it;
the lesson's whole-file helpers, e.g. races/weakmemory/ (a package), sit below all four; reductions/compiled.py,
which compiles the lesson's kernels as an experiment does, sits at experiments' rank). The grading package's
rooms are layered the same way (GRADING_ROOMS): no room imports one after it, nor the package's face."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "gpucourse"

# (layer, top-level names of gpucourse in it), lowest first.
LAYERS = (
    ("foundation", ("errors", "hardware", "validate", "chartlayout")),
    ("microscope", ("microscope",)),
    ("measuring", ("measure",)),
    ("charts", ("viz",)),
    ("lessons", ("lessons",)),
    ("tooling", ("tooling", "__main__")),
)
LESSON_PARTS = ("kernels", "model", "experiments", "figures", "__init__")
# parts that run kernels' code the way experiments do, at experiments' rank (they may import kernels, model)
# compiled: SASS and PTX; ranks: lesson 10; recorded, timing: attention (lesson 12); recordings: tensorcores' live
# or recorded facts (lesson 11); fresh: tensorcores' compile_for in a child process (lab 12's grader)
BESIDE_EXPERIMENTS = ("compiled", "ranks", "recorded", "timing", "recordings", "fresh")
GRADING = "gpucourse.tooling.grading"
# lowest first: the learner's kernel imports the first three (with the face, __init__); nbgrader's side next
GRADING_ROOMS = ("snapshot", "hooks", "tripwire", "frozen", "traced", "hidden", "rewrite", "scan", "notes", "header",
                 "forkkernel", "locked", "execute", "preprocessors", "report", "workers", "batch", "known", "__init__")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts)


def all_modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _is_package(name: str) -> bool:
    return (PACKAGE.parent / Path(*name.split(".")) / "__init__.py").exists()


def _exists(name: str) -> bool:
    path = PACKAGE.parent / Path(*name.split("."))
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists()


def imported(source: str, module: str) -> list[tuple[int, str]]:
    """Every gpucourse module that ``source`` (the text of ``module``) imports, with its line:
    function-level imports included, relative imports resolved, ``from pkg import sub`` -> pkg.sub."""
    is_package = module.endswith("__init__") or _is_package(module)
    package = module.removesuffix(".__init__") if is_package else module.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[:len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                found.append((node.lineno, sub if _exists(sub) else base))
    return [(line, name) for line, name in found if name == "gpucourse" or name.startswith("gpucourse.")]


def layer_of(name: str) -> int | None:
    """The layer index of a gpucourse module; None for the package itself (``import gpucourse``
    only decides GPU or simulator) and for modules outside every layer."""
    parts = name.split(".")
    if len(parts) < 2 or parts[1] == "__init__":
        return None
    for index, (_, members) in enumerate(LAYERS):
        if parts[1] in members:
            return index
    return None


def _lesson_part(name: str) -> tuple[str, int] | None:
    """(lesson, rank) of a module inside gpucourse.lessons.<lesson>; helpers moved in whole rank lowest."""
    parts = name.split(".")
    if len(parts) < 3 or parts[:2] != ["gpucourse", "lessons"]:
        return None
    if len(parts) == 3:
        return parts[2], LESSON_PARTS.index("__init__") + 1
    last = "experiments" if parts[3] in BESIDE_EXPERIMENTS else parts[3]
    return parts[2], LESSON_PARTS.index(last) + 1 if last in LESSON_PARTS else 0


def _grading_room(name: str) -> int | None:
    """The rank of a module of the grading package (its face, the package itself, ranks last)."""
    if name == GRADING or name == f"{GRADING}.__init__":
        return GRADING_ROOMS.index("__init__")
    if name.startswith(f"{GRADING}."):
        room = name.split(".")[3]
        return GRADING_ROOMS.index(room) if room in GRADING_ROOMS else None
    return None


def violations(source: str, module: str) -> list[str]:
    """The imports of ``module`` (given as source text) that break the layer rule, in words."""
    mine = layer_of(module)
    part = _lesson_part(module)
    room = _grading_room(module)
    found = []
    for line, target in imported(source, module):
        theirs = layer_of(target)
        if mine is not None and theirs is not None and theirs > mine:
            found.append(f"{module}:{line} imports {target}: layer '{LAYERS[theirs][0]}' is above "
                         f"'{LAYERS[mine][0]}'")
        other = _lesson_part(target)
        if part and other and part[0] == other[0] and other[1] > part[1]:
            found.append(f"{module}:{line} imports {target}: a lesson's part imports only the parts before it "
                         f"({' -> '.join(LESSON_PARTS)})")
        other_room = _grading_room(target)
        if room is not None and other_room is not None and other_room >= room and target != module:
            found.append(f"{module}:{line} imports {target}: a grading room imports only the rooms before it "
                         f"({' -> '.join(GRADING_ROOMS)})")
    return found


def test_every_grading_module_is_a_room_in_its_place():
    rooms = sorted(p.stem for p in (PACKAGE / "tooling" / "grading").glob("*.py"))
    assert rooms == sorted(GRADING_ROOMS), "name each grading module in GRADING_ROOMS, in its place"


def test_every_module_is_in_a_layer():
    outside = [name for name in all_modules()
               if layer_of(name) is None and name not in ("gpucourse.__init__",)]
    assert outside == [], f"put these modules in a layer (LAYERS, ARCHITECTURE.md): {outside}"


def test_no_module_imports_a_layer_above_it():
    broken = [v for name, path in all_modules().items() for v in violations(path.read_text(), name)]
    assert broken == [], "\n".join(broken)


def test_the_lessons_are_packages_with_their_parts():
    lessons = [p for p in (PACKAGE / "lessons").iterdir() if p.is_dir() and not p.name.startswith("_")]
    assert len(lessons) >= 8
    for lesson in lessons:
        assert (lesson / "__init__.py").exists(), lesson
        assert (lesson / "kernels.py").exists() and (lesson / "figures.py").exists(), lesson
    flat = [p.name for p in PACKAGE.glob("*.py")]
    assert sorted(flat) == ["__init__.py", "__main__.py", "chartlayout.py", "errors.py", "hardware.py",
                            "validate.py"], flat


@pytest.mark.parametrize(("module", "source", "words"), [
    ("gpucourse.measure.harness", "from gpucourse.lessons import tiling\n", "above"),
    ("gpucourse.viz.charts", "def f():\n    from gpucourse.lessons.races import weakmemory\n", "above"),
    ("gpucourse.microscope.launch", "import gpucourse.tooling.grading\n", "above"),
    ("gpucourse.hardware", "from gpucourse.measure import runtime\n", "above"),
    ("gpucourse.validate", "from gpucourse import microscope\n", "above"),
    ("gpucourse.lessons.tiling.kernels", "from gpucourse.lessons.tiling.figures import gflops_figure\n",
     "parts before it"),
    ("gpucourse.lessons.tiling.model", "from .experiments import measure_matmul\n", "parts before it"),
    ("gpucourse.tooling.grading.snapshot", "from gpucourse.tooling.grading.hidden import check\n", "rooms before it"),
    ("gpucourse.tooling.grading.hidden", "from gpucourse.tooling.grading import check\n", "rooms before it"),
    ("gpucourse.tooling.grading.report", "def f():\n    from .batch import grade_all\n", "rooms before it"),
    ("gpucourse.microscope.pictures", "def f():\n    from gpucourse.viz.charts import rules\n", "above"),
    ("gpucourse.microscope.nsight", "from gpucourse.measure import ncu\n", "above"),
    ("gpucourse.measure.ncu", "def f():\n    from gpucourse.viz import charts\n", "above"),
    ("gpucourse.chartlayout", "from gpucourse.measure import rehearsal\n", "above"),
])
def test_a_planted_upward_import_is_caught(module, source, words):
    found = violations(source, module)
    assert len(found) == 1 and words in found[0], found


@pytest.mark.parametrize(("module", "source"), [
    ("gpucourse.lessons.tiling.figures", "from gpucourse.lessons.tiling.model import Rung\n"),
    ("gpucourse.lessons.races.kernels", "from gpucourse.lessons.races import weakmemory\n"),
    ("gpucourse.tooling.gpureport", "from gpucourse.lessons import warps\n"),
    ("gpucourse.viz.charts", "from gpucourse.measure import rehearsal\nimport gpucourse\n"),
    ("gpucourse.lessons.tiling.experiments", "from .kernels import copy_kernel\nfrom . import model\n"),
    ("gpucourse.tooling.grading.batch", "from gpucourse.tooling.grading.workers import WorkerPool\n"),
    ("gpucourse.tooling.grading.__init__", "from gpucourse.tooling.grading.hidden import check\n"),
    ("gpucourse.measure.ncu", "def f():\n    from gpucourse.microscope.nsight import Profile\n"),
    ("gpucourse.microscope.pictures", "from gpucourse.chartlayout import rules\n"),
    ("gpucourse.viz.charts", "from gpucourse.chartlayout import fit\n"),
    ("gpucourse.lessons.races.weakmemory.timeline", "from gpucourse.viz import charts\n"),
])
def test_downward_and_sideways_imports_pass(module, source):
    assert violations(source, module) == []


# --- no circles ---------------------------------------------------------------------------------------------------


def _package_name(module: str) -> str:
    return module.removesuffix(".__init__")


def import_graph(sources: dict[str, str]) -> dict[str, set[str]]:
    """Module -> the gpucourse modules it imports (function-level imports too; a package is its ``__init__``).
    Importing ``a.b.c`` also runs the package ``a.b`` first; that edge is left out (a package's face imports
    its own parts), but ``from a.b import name`` where ``name`` is no submodule is an edge to the face."""
    graph: dict[str, set[str]] = {}
    for module, source in sources.items():
        me = _package_name(module)
        graph.setdefault(me, set()).update(
            _package_name(target) for _, target in imported(source, module) if _package_name(target) != me)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every circle of imports: each strongly connected set of two or more modules (Tarjan), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def test_no_modules_import_each_other_in_a_circle():
    graph = import_graph({name: path.read_text() for name, path in all_modules().items()})
    assert len(graph) > 100
    circles = cycles(graph)
    assert circles == [], "import circles (function-level imports count): " + "; ".join(
        " <-> ".join(c) for c in circles)


@pytest.mark.parametrize(("sources", "circle"), [
    ({"gpucourse.microscope.launch": "from gpucourse.microscope.report import Report\n",
      "gpucourse.microscope.report": "def profile(self):\n    from gpucourse.microscope.launch import trace\n"},
     ["gpucourse.microscope.launch", "gpucourse.microscope.report"]),
    # the circle the microscope had: launch -> report (top) -> profile (in a method) -> launch (in a function)
    ({"gpucourse.microscope.launch": "from gpucourse.microscope.report import Report\n",
      "gpucourse.microscope.report": "class Report:\n    def profile(self):\n"
                                     "        from gpucourse.microscope.profile import Profile\n",
      "gpucourse.microscope.profile": "def profile():\n    from gpucourse.microscope.launch import trace\n"},
     ["gpucourse.microscope.launch", "gpucourse.microscope.profile", "gpucourse.microscope.report"]),
    # through a package's face: a part that imports a name of the package whose __init__ imports that part
    ({"gpucourse.microscope.__init__": "from gpucourse.microscope.launch import trace\n",
      "gpucourse.microscope.launch": "def f():\n    from gpucourse.microscope import MemorySystem\n"},
     ["gpucourse.microscope", "gpucourse.microscope.launch"]),
    ({"gpucourse.lessons.races.weakmemory.runs": "from .timeline import timeline_figure\n",
      "gpucourse.lessons.races.weakmemory.timeline": "from .runs import RaceReport\n"},
     ["gpucourse.lessons.races.weakmemory.runs", "gpucourse.lessons.races.weakmemory.timeline"]),
])
def test_a_planted_circle_is_caught(sources, circle):
    assert cycles(import_graph(sources)) == [circle]


def test_imports_in_one_direction_are_no_circle():
    sources = {"gpucourse.microscope.__init__": "from gpucourse.microscope.launch import profile, trace\n",
               "gpucourse.microscope.launch": "from gpucourse.microscope.report import Report\n"
                                              "from gpucourse.microscope.nsight import Profile\n",
               "gpucourse.microscope.report": "def f():\n    from gpucourse.microscope.nsight import Profile\n",
               "gpucourse.microscope.nsight": "from gpucourse.microscope import analysis\nimport gpucourse\n",
               "gpucourse.microscope.analysis": "from gpucourse.hardware import WARP_SIZE\n"}
    assert cycles(import_graph(sources)) == []


# --- no module named like a name its package exports --------------------------------------------------------------


def packages() -> dict[str, Path]:
    return {_package_name(name): path for name, path in all_modules().items() if name.endswith(".__init__")}


def submodules(package_init: Path) -> list[str]:
    folder = package_init.parent
    return sorted([p.stem for p in folder.glob("*.py") if p.stem != "__init__"]
                  + [p.name for p in folder.iterdir() if (p / "__init__.py").exists()])


def face_bindings(source: str, package: str) -> dict[str, str | None]:
    """The names a package's ``__init__`` binds at its top level: name -> the module it is bound to (a submodule or
    package imported by name), or None (a function, class or value, or a name taken out of a module)."""
    found: dict[str, str | None] = {}

    def walk(body) -> None:
        for node in body:
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")
                    anchor = anchor[:len(anchor) - (node.level - 1)]
                    base = ".".join(anchor + ([base] if base else []))
                for alias in node.names:
                    full = f"{base}.{alias.name}"
                    found[alias.asname or alias.name] = full if _exists(full) else None
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.asname:
                        found[alias.asname] = alias.name
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                found[node.name] = None
            elif isinstance(node, ast.Assign | ast.AnnAssign):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                found.update({t.id: None for t in targets if isinstance(t, ast.Name)})
            elif isinstance(node, ast.If | ast.Try):
                walk(node.body)
                walk(node.orelse)
                for handler in getattr(node, "handlers", ()):
                    walk(handler.body)
    walk(ast.parse(source).body)
    return found


def shadowing(package: str, parts: list[str], bindings: dict[str, str | None], exported=()) -> list[str]:
    """Submodules of ``package`` whose name the package also uses for something else it exports (a public name
    its ``__init__`` binds, or one in ``__all__`` that it gives on first use)."""
    found = []
    for part in parts:
        if part.startswith("_"):
            continue
        own = f"{package}.{part}"
        if (part in bindings or part in exported) and bindings.get(part) != own:
            found.append(f"{package} exports '{part}', which is not its submodule {own}: rename the module "
                         "(a later `import` of it would replace the exported name with the module)")
    return found


def test_no_package_exports_a_name_that_is_one_of_its_modules():
    import importlib

    found = []
    for package, init in packages().items():
        exported = tuple(getattr(importlib.import_module(package), "__all__", ()))
        found += shadowing(package, submodules(init), face_bindings(init.read_text(), package), exported)
    assert len(packages()) >= 15
    assert found == [], "\n".join(found)


@pytest.mark.parametrize(("source", "parts", "exported"), [
    # what the microscope's face was: the function profile and the module profile.py
    ("from gpucourse.microscope.profile import Profile, profile\n", ["launch", "profile"], ()),
    ("from gpucourse.microscope.launch import trace as launch\n", ["launch"], ()),
    ("def races():\n    pass\n", ["races"], ()),
    ("races = None\n", ["races"], ()),
    ("", ["report"], ("report",)),  # a name given on first use (__getattr__) that is also a module
])
def test_a_planted_module_named_like_an_exported_name_is_caught(source, parts, exported):
    found = shadowing("gpucourse.microscope", parts, face_bindings(source, "gpucourse.microscope"), exported)
    assert len(found) == 1 and "not its submodule" in found[0], found


@pytest.mark.parametrize(("package", "source", "parts", "exported"), [
    ("gpucourse.microscope", "from gpucourse.microscope.launch import profile, trace\nfrom gpucourse.microscope "
     "import analysis\n", ["analysis", "launch", "nsight"], ("analysis", "profile", "trace")),
    ("gpucourse.lessons.races", "from gpucourse.lessons.races import weakmemory\nfrom . import model\n",
     ["model", "weakmemory"], ("model", "weakmemory")),
])
def test_a_package_may_export_its_own_modules(package, source, parts, exported):
    assert shadowing(package, parts, face_bindings(source, package), exported) == []


# --- no module over MAX_LINES ---------------------------------------------------------------------------------------

MAX_LINES = 700  # the house rule: a longer module is split by what it holds (races/weakmemory/ was one file of 807)


def too_long(line_counts: dict[str, int], limit: int = MAX_LINES) -> list[str]:
    return [f"{name}: {count} lines (at most {limit}: split it by what it holds)"
            for name, count in sorted(line_counts.items()) if count > limit]


def test_no_module_is_over_700_lines():
    counts = {name: len(path.read_text().splitlines()) for name, path in all_modules().items()}
    assert too_long(counts) == [], too_long(counts)
    assert too_long({"gpucourse.lessons.races.weakmemory": 807, "gpucourse.hardware": 77}) == [
        "gpucourse.lessons.races.weakmemory: 807 lines (at most 700: split it by what it holds)"]
