"""The layer rule of ARCHITECTURE.md, checked on every module's imports (read with ast, nothing imported):

    notebooks/labs -> gpucourse.lessons -> (measure, viz, microscope) -> (errors, hardware, validate)

with gpucourse.tooling (and ``python -m gpucourse``) on top. A module may import its own layer and the
layers below it, never a layer above. Inside a lesson package the parts are layered too:
kernels -> model -> experiments -> figures -> __init__ (a part imports only the parts before it;
the lesson's whole-file helpers, e.g. races/weakmemory.py, sit below all four; reductions/compiled.py,
which compiles the lesson's kernels as an experiment does, sits at experiments' rank). The grading package's
rooms are layered the same way (GRADING_ROOMS): no room imports one after it, nor the package's face."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "gpucourse"

# (layer, top-level names of gpucourse in it), lowest first.
LAYERS = (
    ("foundation", ("errors", "hardware", "validate")),
    ("measuring, microscope and charts", ("measure", "viz", "microscope")),
    ("lessons", ("lessons",)),
    ("tooling", ("tooling", "__main__")),
)
LESSON_PARTS = ("kernels", "model", "experiments", "figures", "__init__")
# parts that run kernels' code the way experiments do, at experiments' rank (they may import kernels, model)
BESIDE_EXPERIMENTS = ("compiled",)
GRADING = "gpucourse.tooling.grading"
# lowest first: the learner's kernel imports the first two (with the face, __init__); nbgrader's side next
GRADING_ROOMS = ("snapshot", "hidden", "rewrite", "scan", "notes", "header", "locked", "execute", "preprocessors",
                 "report", "workers", "batch", "__init__")


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
    assert sorted(flat) == ["__init__.py", "__main__.py", "errors.py", "hardware.py", "validate.py"], flat


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
])
def test_downward_and_sideways_imports_pass(module, source):
    assert violations(source, module) == []
