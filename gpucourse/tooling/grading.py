"""Hardened grading: hidden-test checks, a sandboxed autograder, `make grade` and `make feedback`.

Three layers, each usable alone:

* **In the learner's kernel** (imported by every lab): ``check()`` fails a hidden test with one
  generic line; ``run_hidden_tests()`` runs a test cell's hidden part with its output muted and
  turns any failure into that same generic line, and with the grader's own ``check`` bound.
* **nbgrader preprocessors** (named in ``nbgrader_config.py``, built lazily so the kernel never
  imports nbgrader): ``GuardSubmission`` (scan the learner's code for tampering, rewrite hidden
  tests, drop execution-skipping tags), ``GuardedExecute`` (the kernel runs in a sandbox with a
  private home and a scrubbed environment; a cell over the time limit is interrupted and, if it
  does not stop, the kernel is killed; a kernel that dies is a note, not a grader failure; output
  is capped), ``FinalizeGrades`` (cells that never ran or a tampered notebook score 0 with a note)
  and ``SanitizeFeedback`` (feedback shows code, scores and one-line verdicts, never hidden tests,
  their tracebacks or output).
* **The sandbox** (``gpucourse.tooling.sandbox``, Linux Landlock): the grading kernel reads only the Python
  installation, the package and ``data/``, and writes only its notebook folder and a private home.
"""

from __future__ import annotations

import ast
import contextlib
import csv
import json
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path

from gpucourse.tooling.sandbox import (  # noqa: F401  (re-exported: grading's public API)
    PACKAGE_DIR,
    ROOT,
    kernel_environment,
    landlock_abi,
    sandbox_command,
    sandbox_note,
    sandbox_paths,
    sandbox_status,
)

GENERIC_FAILURE = "a hidden test failed: re-read the specification"
BEGIN_HIDDEN, END_HIDDEN = "BEGIN HIDDEN TESTS", "END HIDDEN TESTS"


# ---------------------------------------------------------------------------------------------
# In the learner's kernel
# ---------------------------------------------------------------------------------------------


class HiddenTestFailed(AssertionError):
    """A hidden test failed; the message is generic by design."""

    def _render_traceback_(self) -> list[str]:
        return [f"HiddenTestFailed: {self}"]


def check(condition, message: str = GENERIC_FAILURE) -> None:
    """Fail a hidden test with a generic message (``condition`` may be a bool or a callable).

    Only a real ``bool`` or NumPy ``bool_`` passes: a comparison that returns anything else (an
    object whose ``__eq__`` returns itself, a string, an array) fails, whatever its truth value."""
    try:
        ok = condition() if callable(condition) else condition
    except Exception:
        ok = False
    if type(ok) not in _BOOLS or not ok:
        raise HiddenTestFailed(message) from None


def _bool_types() -> tuple:
    try:
        import numpy

        return (bool, numpy.bool_)
    except ImportError:  # pragma: no cover - numpy is in the course's environment
        return (bool,)


_BOOLS = _bool_types()


def reaches_package(fn, package: str = "gpucourse", seen=None) -> bool:
    """For hidden tests: True when ``fn``, or a function of the notebook that it calls, uses code of
    ``package`` (or reaches for imports, ``eval``/``exec`` or ``globals`` to hide such a use).

    Follows the names each function's code (nested code included) reads from its globals; a
    module, class or function whose home is ``package`` counts, and so does any name containing it."""
    import types

    seen = set() if seen is None else seen
    if id(fn) in seen or not isinstance(fn, types.FunctionType):
        return False
    seen.add(id(fn))
    codes, names = [fn.__code__], set()
    while codes:
        code = codes.pop()
        names |= set(code.co_names)
        codes += [c for c in code.co_consts if isinstance(c, types.CodeType)]
    if any(package in n or n in ("__import__", "importlib", "sys", "eval", "exec", "globals") for n in names):
        return True
    for name in names:
        obj = fn.__globals__.get(name)
        home = obj.__name__ if isinstance(obj, types.ModuleType) else getattr(obj, "__module__", None) or ""
        if home.startswith(package) or reaches_package(obj, package, seen):
            return True
    return False


_CHECK = check  # the grader's own check, bound for hidden tests even if a learner redefines `check`


def run_hidden_tests(code: str, namespace: dict, local_namespace: dict | None = None) -> None:
    """Run the hidden part of a test cell (the autograder rewrites hidden blocks into this call).

    First everything the grader's header snapshotted before any learner code ran is put back
    (``snapshot_environment``): hidden tests see the real NumPy, builtins and imported names
    whatever the submission changed. Output is muted while it runs (so a learner's function cannot
    print the hidden inputs), the grader's ``check`` is bound, and any failure — an assertion, an
    exception raised by the learner's code, an interrupt — becomes one generic ``HiddenTestFailed``
    line.
    """
    _restore_snapshot(namespace)
    missing = object()
    saved_check = namespace.get("check", missing)
    namespace["check"] = _CHECK
    failed = False
    try:
        with _muted():
            exec(compile(code, "<hidden tests>", "exec"), namespace, local_namespace)  # noqa: S102
        failed = bool(custom_comparisons())  # results that decide their own comparisons prove nothing
    except BaseException:  # noqa: B036  (an interrupt or sys.exit inside hidden tests also fails them)
        failed = True
    finally:
        if saved_check is missing:
            namespace.pop("check", None)
        else:
            namespace["check"] = saved_check
    if failed:
        raise HiddenTestFailed(GENERIC_FAILURE) from None


# -- the snapshot: what hidden tests rely on, captured before any learner code runs ----------------
#
# A scan of the source can only recognise patterns (``np.allclose = …``); the same change made
# through an alias, ``vars()``, a list or a default argument reads differently. So the grader's
# header (an IPython startup file, run before the first cell) imports the modules the lab's locked
# cells import and remembers, for every loaded module, its functions, classes and submodules, each
# function's code and defaults, the methods of its classes, and the names the locked cells bind.
# Before each hidden block they are put back. (The grader's own module is in the snapshot too, but
# a submission that replaces the entry point itself is only caught by the scan.)

_SNAPSHOT: dict | None = None


def snapshot_environment(imports=()) -> None:
    """Called once by the grader's kernel header, before any learner code. ``imports``: the
    ``(name, what)`` pairs that the lab's locked cells import (``imported_names``), in order."""
    import importlib
    import types

    global _SNAPSHOT
    bindings = {}
    for name, what in imports:
        try:
            bindings[name] = _resolve(importlib, what)
        except Exception:  # noqa: BLE001  (an import that fails will fail in its own cell too)
            continue
    modules = {name: module for name, module in list(sys.modules.items())
               if isinstance(module, types.ModuleType) and name not in ("__main__", "__mp_main__")}
    attrs, class_attrs, functions, cells = [], [], {}, []

    def remember_function(value) -> None:
        if isinstance(value, types.FunctionType) and id(value) not in functions:
            functions[id(value)] = (value, value.__code__, value.__defaults__, value.__kwdefaults__)
            for cell in value.__closure__ or ():  # what a checker's closure refers to
                with contextlib.suppress(ValueError):  # an empty cell
                    cells.append((cell, cell.cell_contents))

    for name, module in modules.items():
        try:  # only type checks and dict reads: a library object's own __getattr__ may raise
            entries = list(vars(module).items())
        except TypeError:
            continue
        for key, value in entries:
            if not (callable(value) or isinstance(value, types.ModuleType)):
                continue
            attrs.append((module, key, value))
            remember_function(value)
            if isinstance(value, type) and value.__dict__.get("__module__") == name:
                for attr, member in list(vars(value).items()):
                    inner = member.__func__ if isinstance(member, classmethod | staticmethod) else member
                    if isinstance(inner, types.FunctionType) or isinstance(member, property):
                        class_attrs.append((value, attr, member))
                        remember_function(inner)
    _SNAPSHOT = {"modules": modules, "builtins": dict(vars(modules["builtins"])), "attrs": attrs,
                 "class_attrs": class_attrs, "functions": list(functions.values()), "cells": cells,
                 "bindings": bindings, "classes": {id(c) for c in _all_classes()}}


def _resolve(importlib, what: str):
    """The object an import statement binds: ``numpy`` → the module, ``a.b.c`` → ``c`` of ``a.b``."""
    try:
        return importlib.import_module(what)
    except ImportError:
        module, _, attr = what.rpartition(".")
        return getattr(importlib.import_module(module), attr)


def _all_classes() -> list[type]:
    """Every class in the interpreter, through ``__subclasses__`` from ``object`` (and ``type``)."""
    seen, todo, out = set(), [object, type], []
    while todo:
        cls = todo.pop()
        if id(cls) in seen:
            continue
        seen.add(id(cls))
        out.append(cls)
        with contextlib.suppress(TypeError):
            todo.extend(type.__subclasses__(cls) if isinstance(cls, type) else ())
    return out


# The operations a hidden test's comparison goes through: a class that defines its own can make any
# comparison come out true (``__eq__`` returning True), or fake what NumPy sees.
_COMPARISON_DUNDERS = ("__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__", "__bool__", "__len__",
                       "__array__", "__array_ufunc__", "__array_function__", "__array_interface__",
                       "__float__", "__int__", "__index__", "__abs__", "__sub__", "__rsub__", "__hash__")


def _written_in_the_notebook(cls: type, code) -> bool:
    """Whether a class (or one of its methods) comes from the notebook's cells rather than a library:
    made in ``__main__`` (classes made by ``type()`` in a cell's function are too), or with its
    method's code in an IPython cell file."""
    if cls.__module__ == "__main__":
        return True
    filename = getattr(code, "co_filename", "")
    return "ipykernel_" in filename or filename.startswith("<ipython-input")


def custom_comparisons() -> list[str]:
    """Classes made since the snapshot by the notebook's own code that define how they compare
    (``class R: __eq__ = lambda self, other: True``): hidden tests cannot trust such results.

    A class counts when it is new since the snapshot, comes from the notebook, and defines one of the
    operations a comparison goes through (a dataclass's generated ``__eq__``, which compares fields,
    does not count). Empty without a snapshot."""
    snap = _SNAPSHOT
    if snap is None:
        return []
    found = []
    for cls in _all_classes():
        if id(cls) in snap["classes"]:
            continue
        own = cls.__dict__
        for name in _COMPARISON_DUNDERS:
            member = own.get(name)
            if member is None or (name == "__hash__" and "__eq__" not in own):
                continue
            inner = member.__func__ if isinstance(member, classmethod | staticmethod) else member
            inner = inner.fget if isinstance(inner, property) else inner
            code = getattr(inner, "__code__", None)
            if code is not None and code.co_filename == "<string>" and "__dataclass_fields__" in own:
                continue  # generated by @dataclass: compares the fields
            if _written_in_the_notebook(cls, code):
                found.append(f"{cls.__qualname__}.{name}")
    return found


def _restore_snapshot(namespace: dict) -> set[str]:
    """Put back everything in the snapshot; returns what had changed (empty without a snapshot)."""
    snap = _SNAPSHOT
    if snap is None:
        return set()
    missing = object()
    changed = set()
    builtins_dict = snap["modules"]["builtins"].__dict__
    for key, value in snap["builtins"].items():  # first: the loops below use builtins
        if builtins_dict.get(key, missing) is not value:
            builtins_dict[key] = value
            changed.add(f"builtins.{key}")
    for name, module in snap["modules"].items():
        if sys.modules.get(name) is not module:
            sys.modules[name] = module
            changed.add(f"sys.modules[{name!r}]")
    for module, key, value in snap["attrs"]:
        if module.__dict__.get(key, missing) is not value:
            module.__dict__[key] = value
            changed.add(f"{module.__name__}.{key}")
    for cls, key, value in snap["class_attrs"]:
        if cls.__dict__.get(key, missing) is not value:
            with contextlib.suppress(Exception):
                type.__setattr__(cls, key, value)
                changed.add(f"{cls.__module__}.{cls.__qualname__}.{key}")
    for function, code, defaults, kwdefaults in snap["functions"]:
        if (function.__code__ is not code or function.__defaults__ is not defaults
                or function.__kwdefaults__ is not kwdefaults):
            function.__code__, function.__defaults__, function.__kwdefaults__ = code, defaults, kwdefaults
            changed.add(f"{function.__module__}.{function.__qualname__} (its code or defaults)")
    for cell, value in snap["cells"]:
        try:
            same = cell.cell_contents is value
        except ValueError:  # emptied
            same = False
        if not same:
            cell.cell_contents = value
            changed.add("a closure cell of a library function")
    for name, value in snap["bindings"].items():
        if namespace.get(name, missing) is not value:
            namespace[name] = value
            changed.add(f"the name `{name}`")
    sys.settrace(None)  # a tracer could rewrite the hidden tests' frames
    sys.setprofile(None)
    return changed


@contextlib.contextmanager
def _muted():
    """Silence Python-level and file-descriptor-level output and IPython displays."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    saved_streams = sys.stdout, sys.stderr
    devnull = open(os.devnull, "w")  # noqa: SIM115
    saved_fds = []
    for fd in (1, 2):
        with contextlib.suppress(OSError):
            saved_fds.append((fd, os.dup(fd)))
            os.dup2(devnull.fileno(), fd)
    publisher, saved_methods = None, {}
    with contextlib.suppress(Exception):
        from IPython import get_ipython

        shell = get_ipython()
        publisher = shell.display_pub if shell is not None else None
    if publisher is not None:
        for name in ("publish", "clear_output"):
            saved_methods[name] = publisher.__dict__.get(name)
            setattr(publisher, name, lambda *args, **kwargs: None)
    sys.stdout = sys.stderr = devnull
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved_streams
        for fd, copy in saved_fds:
            with contextlib.suppress(OSError):
                os.dup2(copy, fd)
                os.close(copy)
        for name, method in saved_methods.items():
            if method is None:
                with contextlib.suppress(AttributeError):
                    delattr(publisher, name)
            else:
                setattr(publisher, name, method)
        devnull.close()


# ---------------------------------------------------------------------------------------------
# Source transforms and checks (pure functions; the preprocessors below apply them)
# ---------------------------------------------------------------------------------------------


def guard_hidden_tests(source: str) -> str:
    """Rewrite each ``### BEGIN HIDDEN TESTS`` … ``### END HIDDEN TESTS`` block into one call of
    ``run_hidden_tests`` (markers kept, so feedback can still strip the block)."""
    out: list[str] = []
    block: list[str] | None = None
    indent = ""
    for line in source.split("\n"):
        if BEGIN_HIDDEN in line and block is None:
            block, indent = [], line[: len(line) - len(line.lstrip())]
            out.append(line)
        elif END_HIDDEN in line and block is not None:
            out.append(_hidden_call(block, indent))
            out.append(line)
            block = None
        elif block is not None:
            block.append(line)
        else:
            out.append(line)
    if block is not None:  # an unterminated block: everything after the marker is hidden
        out.append(_hidden_call(block, indent))
    return "\n".join(out)


def _hidden_call(block: list[str], indent: str) -> str:
    code = textwrap.dedent("\n".join(block))
    run = "__import__('gpucourse.tooling.grading').tooling.grading.run_hidden_tests"
    return f"{indent}{run}({code!r}, globals(), locals())"


def strip_hidden_tests(source: str) -> str:
    """The source without its hidden-test blocks (markers included)."""
    out, hidden = [], False
    for line in source.split("\n"):
        if BEGIN_HIDDEN in line:
            hidden = True
        elif END_HIDDEN in line:
            hidden = False
        elif not hidden:
            out.append(line)
    return "\n".join(out).rstrip("\n")


PROTECTED_NAMES = ("check", "HiddenTestFailed", "run_hidden_tests")
# introspection that reaches into other code's frames, functions or objects
_FORBIDDEN_ATTRS = {"__code__", "__globals__", "__closure__", "__builtins__", "__subclasses__", "__bases__",
                    "__mro__", "__dict__", "__setattr__", "__delattr__", "_getframe", "f_back", "f_globals",
                    "f_locals", "f_builtins", "gi_frame", "tb_frame", "display_pub"}
_FORBIDDEN_CALLS = {"exec", "eval", "compile", "__import__"}
_FORBIDDEN_MODULES = {"ctypes", "gc", "inspect", "builtins", "importlib", "nbgrader", "nbclient",
                      "jupyter_client", "ipykernel"}


def imported_names(sources) -> dict[str, str]:
    """Name → what it was imported as (``np`` → ``numpy``, ``check`` → ``gpucourse.tooling.grading.check``),
    for every import in these cells."""
    names: dict[str, str] = {}
    for source in sources:
        try:
            tree = ast.parse(_as_python(source))
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    top = alias.name.split(".")[0]
                    names[alias.asname or top] = alias.name if alias.asname else top
            elif isinstance(node, ast.ImportFrom):
                for alias in node.names:
                    names[alias.asname or alias.name] = f"{node.module or ''}.{alias.name}"
    return names


def scan_learner_code(source: str, imported=None, locked: dict[str, str] | None = None
                      ) -> tuple[list[str], list[str]]:
    """(tampering, notes) for one cell written by a learner.

    Tampering makes every graded cell of the notebook score 0: modifying an imported module or
    object (``np.allclose = …``, ``gpucourse.tooling.grading.check = …``, ``check.__code__ = …``);
    rebinding a name that a locked cell imported (``np = fake``: hidden tests would use it);
    running code the grader cannot read (``exec``, ``eval``); importing ``ctypes``, ``gc``,
    ``inspect``, ``builtins``, ``importlib``; reaching into frames, function internals or
    ``sys.modules``. Redefining ``check`` is only noted: hidden tests use the grader's own.

    ``imported``: names imported by any cell (``imported_names``); ``locked``: those imported by
    the notebook's locked cells, with what they were imported as.
    """
    try:
        tree = ast.parse(_as_python(source))
    except SyntaxError:
        return [], []  # it fails when it runs; that is its verdict
    locked = dict(locked or {})
    mine = imported_names([source])
    protected_names = set(imported or ()) | set(mine) | set(locked) | set(PROTECTED_NAMES) | {"__builtins__"}
    sys_names = {"sys"} | {name for name, what in {**locked, **mine}.items() if what == "sys"}
    tampering, notes = [], []

    def root_of(expr):
        while isinstance(expr, ast.Attribute | ast.Subscript | ast.Call):
            expr = expr.func if isinstance(expr, ast.Call) else expr.value
        return expr

    def protected(expr) -> bool:
        root = root_of(expr)
        return isinstance(root, ast.Name) and (root.id in protected_names or root.id in {
            "globals", "vars", "locals", "get_ipython", "type"})

    for node in ast.walk(tree):
        line = getattr(node, "lineno", 0)
        targets = []
        if isinstance(node, ast.Assign | ast.Delete):
            targets = node.targets
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = [node.target]
        for target in targets:
            for sub in ast.walk(target):
                if isinstance(sub, ast.Attribute | ast.Subscript) and protected(sub):
                    if isinstance(sub, ast.Subscript) and _is_plain_binding(sub):
                        continue  # globals()["x"] = … binds a name (checked below)
                    tampering.append(f"line {line} modifies `{_dotted(sub)}`")
                    break
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            if node.func.id in _FORBIDDEN_CALLS:
                tampering.append(f"line {line} calls `{node.func.id}()`")
            elif node.func.id in {"setattr", "delattr"} and node.args and protected(node.args[0]):
                tampering.append(f"line {line} calls `{node.func.id}()` on `{_dotted(node.args[0])}`")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr in {"update", "pop", "popitem", "setdefault", "clear", "__setitem__",
                                  "__delitem__"} and isinstance(root_of(node.func.value), ast.Name) and (
                    root_of(node.func.value).id in {"globals", "vars", "locals", "__builtins__"}):
                tampering.append(f"line {line} calls `{_dotted(node.func)}()`")
        if isinstance(node, ast.Attribute) and (node.attr in _FORBIDDEN_ATTRS or (
                node.attr == "modules" and isinstance(node.value, ast.Name) and node.value.id in sys_names)):
            tampering.append(f"line {line} uses `.{node.attr}`")
        if isinstance(node, ast.Name) and node.id == "__builtins__":
            tampering.append(f"line {line} uses `__builtins__`")
        if isinstance(node, ast.Global):
            tampering += [f"line {line} rebinds `{name}`, imported by the lab" for name in node.names
                          if name in locked and name not in PROTECTED_NAMES]
        if isinstance(node, ast.Import | ast.ImportFrom):
            modules = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            for module in modules:
                if module.split(".")[0] in _FORBIDDEN_MODULES:
                    tampering.append(f"line {line} imports `{module}`")
    for name, how in _top_level_bindings(tree).items():
        if name in PROTECTED_NAMES:
            notes.append(f"your notebook defines `{name}`, a name the hidden tests use; the grader used its own")
        elif name in locked and how != locked[name]:
            tampering.append(f"rebinds `{name}`, which the lab imported")
    return sorted(set(tampering)), sorted(set(notes))


def _is_plain_binding(node) -> bool:
    """``globals()["name"]`` with a constant identifier that is not a dunder name."""
    key = node.slice
    return (isinstance(node.value, ast.Call) and isinstance(node.value.func, ast.Name)
            and node.value.func.id in {"globals", "vars", "locals"} and isinstance(key, ast.Constant)
            and isinstance(key.value, str) and key.value.isidentifier() and not key.value.startswith("__"))


def _as_python(source: str) -> str:
    """IPython syntax (magics, `!cmd`) as plain Python, so `ast` can read it."""
    try:
        from IPython.core.inputtransformer2 import TransformerManager

        return TransformerManager().transform_cell(source)
    except Exception:
        return source


def _dotted(node) -> str:
    try:
        return ast.unparse(node)[:60]
    except Exception:
        return type(node).__name__


def _top_level_bindings(tree) -> dict[str, str]:
    """Names a cell binds at the top level → what to: an import's source, or "" for anything else."""
    names: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names[node.name] = ""
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names.update(imported_names([ast.unparse(node)]))
        else:
            for sub in ast.walk(node):
                if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store | ast.Del):
                    names[sub.id] = ""
                elif isinstance(sub, ast.Subscript) and _is_plain_binding(sub):
                    names[str(sub.slice.value)] = ""  # globals()["check"] = …
                elif isinstance(sub, ast.NamedExpr):
                    names[sub.target.id] = ""
    return names


# ---------------------------------------------------------------------------------------------
# nbgrader preprocessors (built on first use: the learner's kernel never imports nbgrader)
# ---------------------------------------------------------------------------------------------

NOTE_KEY = "gpucourse"
_PREPROCESSORS: dict[str, type] = {}


def __getattr__(name: str):
    if name in ("GuardSubmission", "GuardedExecute", "FinalizeGrades", "SanitizeFeedback"):
        if not _PREPROCESSORS:
            _PREPROCESSORS.update(_build_preprocessors())
        return _PREPROCESSORS[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _note_output(ename: str, evalue: str):
    from nbformat.notebooknode import NotebookNode

    return NotebookNode(output_type="error", ename=ename, evalue=evalue, traceback=[f"{ename}: {evalue}"])


def _add_note(cell, ename: str, evalue: str, *, as_error: bool = True) -> None:
    """A note from the grader on a cell: recorded in trusted metadata (feedback shows it) and, for
    an error, as an error output (nbgrader scores a graded cell with an error output 0)."""
    cell.metadata.setdefault(NOTE_KEY, {}).setdefault("notes", []).append(f"{ename}: {evalue}")
    if as_error and cell.cell_type == "code":
        cell.outputs.append(_note_output(ename, evalue))


def _is_grade(cell) -> bool:
    return bool(cell.metadata.get("nbgrader", {}).get("grade")) and cell.cell_type == "code"


def _is_locked(cell) -> bool:
    return bool(cell.metadata.get("nbgrader", {}).get("locked"))


def _build_preprocessors() -> dict[str, type]:
    import asyncio
    from queue import Empty

    from jupyter_client.kernelspec import KernelSpec
    from jupyter_core.utils import ensure_async, run_sync
    from nbclient.exceptions import DeadKernelError
    from nbgrader.preprocessors import Execute, NbGraderPreprocessor
    from traitlets import Enum, Integer, List, Unicode

    class GuardSubmission(NbGraderPreprocessor):
        """Sanitize step (after OverwriteCells): scan the learner's code, rewrite hidden tests,
        drop tags that would skip a cell, forget any grader metadata the learner supplied."""

        def preprocess(self, nb, resources):
            nb.metadata.pop(NOTE_KEY, None)
            nb.metadata.pop("widgets", None)
            tampering, notes = [], set()
            imported = imported_names(c.source for c in nb.cells if c.cell_type == "code")
            locked = imported_names(c.source for c in nb.cells if c.cell_type == "code" and _is_locked(c)
                                    and c.metadata.get("nbgrader", {}).get("grade_id"))
            for index, cell in enumerate(nb.cells):
                cell.metadata.pop(NOTE_KEY, None)
                tags = cell.metadata.get("tags")
                if tags:
                    cell.metadata["tags"] = [t for t in tags if t not in ("skip-execution", "raises-exception")]
                if cell.cell_type != "code":
                    continue
                # trusted: locked cells that OverwriteCells matched with the gradebook (it drops
                # unknown grade ids and restores the source of known locked cells)
                if _is_locked(cell) and cell.metadata.get("nbgrader", {}).get("grade_id"):
                    if _is_grade(cell):
                        cell.source = guard_hidden_tests(cell.source)
                    continue
                name = cell.metadata.get("nbgrader", {}).get("grade_id") or f"cell {index + 1}"
                found, cell_notes = scan_learner_code(cell.source, imported, locked)
                tampering += [f"{name}, {item}" for item in found]
                notes.update(cell_notes)
            # what the kernel header imports and snapshots before any learner code runs
            nb.metadata[NOTE_KEY] = {"tampering": tampering, "notes": sorted(notes),
                                     "trusted_imports": [[name, what] for name, what in locked.items()]}
            return nb, resources

    class GuardedExecute(Execute):
        """nbgrader's Execute, hardened: sandboxed kernel, time limits that always end, a dead
        kernel recorded as a note, output capped."""

        notebook_timeout = Integer(600, help="seconds for the whole notebook; later cells are not run").tag(
            config=True)
        interrupt_grace = Integer(10, help="seconds an interrupted cell may take to stop before the kernel "
                                           "is killed").tag(config=True)
        max_output_chars = Integer(100_000, help="characters of output kept per cell").tag(config=True)
        stop_output_chars = Integer(20_000_000, help="characters of output after which a cell is "
                                                     "interrupted").tag(config=True)
        sandbox = Enum(["auto", "required", "off"], "auto", help="Landlock sandbox for the kernel").tag(
            config=True)
        extra_read_paths = List(Unicode(), help="more folders the kernel may read").tag(config=True)
        kernel_log = Unicode("", help="a file that collects the kernels' own stdout/stderr (debugging)").tag(
            config=True)

        def preprocess(self, nb, resources=None, km=None):
            self._stopped, self._kernel_checked, self._kernel_notes = None, False, []
            self._started = time.monotonic()
            self._private = Path(tempfile.mkdtemp(prefix="gpucourse-kernel-"))
            self._notebook_dir = (resources or {}).get("metadata", {}).get("path") or os.getcwd()
            _write_header(self._private, nb.metadata.get(NOTE_KEY, {}).get("trusted_imports", []))
            try:
                nb, resources = super().preprocess(nb, resources, km)
                # e.g. the batch reports the Landlock ABI, but this kernel ran without it
                nb.metadata.setdefault(NOTE_KEY, {}).setdefault("notes", []).extend(self._kernel_notes)
                return nb, resources
            finally:
                shutil.rmtree(self._private, ignore_errors=True)

        # -- kernel launch: sandbox, private home, scrubbed environment, ipc transport -------
        def create_kernel_manager(self):
            km = super().create_kernel_manager()
            spec = km.kernel_spec
            argv = [sys.executable if a in ("python", "python3", f"python3.{sys.version_info[1]}") else a
                    for a in spec.argv]
            if self.sandbox != "off":
                argv = sandbox_command(argv, self._sandbox_spec())
            km._kernel_spec = KernelSpec(argv=argv, display_name=spec.display_name, language=spec.language,
                                         env={}, metadata=spec.metadata, interrupt_mode=spec.interrupt_mode)
            km.transport = "ipc"
            km.ip = str(self._private / "kernel")
            return km

        def _sandbox_spec(self) -> dict:
            spec = sandbox_paths(self._notebook_dir, self._private, extra_read=list(self.extra_read_paths),
                                 protected=[self._course_root()], mode=self.sandbox)
            return {**spec, "status_file": str(self._private / "sandbox.json")}

        def _course_root(self) -> str:
            # autograded/<student>/<lab>/ → the course root is three levels up
            folder = Path(self._notebook_dir).resolve()
            return str(folder.parents[2] if len(folder.parents) > 3 else folder.parent)

        async def async_start_new_kernel(self, **kwargs):
            kwargs.setdefault("env", kernel_environment(self._private))
            log = open(self.kernel_log, "a") if self.kernel_log else subprocess.DEVNULL  # noqa: SIM115
            kwargs.setdefault("stdout", log)
            kwargs.setdefault("stderr", log)
            try:
                await super().async_start_new_kernel(**kwargs)
            finally:
                if log is not subprocess.DEVNULL:
                    log.close()

        start_new_kernel = run_sync(async_start_new_kernel)  # nbclient binds the sync one to its own

        # -- time limits ------------------------------------------------------------------
        def _get_timeout(self, cell):
            timeout = super()._get_timeout(cell)
            left = self.notebook_timeout - (time.monotonic() - self._started)
            if timeout is None:
                return max(1, int(left))
            return max(1, int(min(timeout, left)))

        async def _async_handle_timeout(self, timeout, cell=None):
            self.log.warning("cell over its time limit (%s s): interrupting", timeout)
            with contextlib.suppress(Exception):
                await ensure_async(self.km.interrupt_kernel())
            stopped = False
            deadline = time.monotonic() + self.interrupt_grace
            while (left := deadline - time.monotonic()) > 0:
                try:
                    msg = await ensure_async(self.kc.shell_channel.get_msg(timeout=left))
                except Empty:
                    break
                if msg.get("msg_type") == "execute_reply":
                    stopped = True
                    break
            evalue = f"this cell ran longer than its {timeout} s limit (an endless loop?) and was stopped"
            if not stopped:
                evalue = (f"this cell ran longer than its {timeout} s limit and did not stop when "
                          "interrupted (a loop inside a compiled function or GPU kernel?); grading of this "
                          "notebook ended here, so this cell and the cells after it score 0")
                self._stopped = "the time limit of an earlier cell"
                self.iopub_timeout = 1  # no more output will come from a killed kernel
                with contextlib.suppress(Exception):
                    await ensure_async(self.km.shutdown_kernel(now=True))
            if cell is not None:
                cell.metadata.setdefault(NOTE_KEY, {}).setdefault("notes", []).append(
                    f"TimeLimitExceeded: {evalue}")
            return {"content": {"status": "error", "ename": "TimeLimitExceeded", "evalue": evalue,
                                "traceback": [f"TimeLimitExceeded: {evalue}"]}}

        # -- cells: stop after a dead kernel, cap output ----------------------------------------
        def preprocess_cell(self, cell, resources, index):
            if cell.cell_type != "code" or not cell.source.strip():
                return cell, resources
            if not self._kernel_checked:  # the kernel is up, no learner code ran yet: read its start
                self._kernel_checked = True
                notes = [header_note(self._private)]
                if self.sandbox != "off":
                    notes.append(sandbox_note(self._private / "sandbox.json"))
                self._kernel_notes = [note for note in notes if note]
            if self._stopped is None and time.monotonic() - self._started > self.notebook_timeout:
                self._stopped = f"the notebook's {self.notebook_timeout} s time limit"
            if self._stopped is not None:
                cell.outputs = []
                _add_note(cell, "NotRun", f"not run because of {self._stopped}; it scores 0")
                return cell, resources
            self._cell_chars, self._dropped_chars, self._interrupted = 0, 0, False
            try:
                cell, resources = super().preprocess_cell(cell, resources, index)
            except DeadKernelError:
                self._stopped = "an earlier cell that stopped the kernel"
                _add_note(cell, "KernelDied", "the Python process running this notebook stopped while "
                                              "this cell ran (os._exit, a crash, a segmentation fault or "
                                              "running out of memory); this cell and the cells after it "
                                              "score 0")
            if self._dropped_chars:
                from nbformat.notebooknode import NotebookNode

                text = (f"\n[grader: {self._dropped_chars:,} more characters of output were dropped; "
                        f"the limit is {self.max_output_chars:,} per cell]\n")
                cell.outputs.append(NotebookNode(output_type="stream", name="stdout", text=text))
                _add_note(cell, "OutputLimit", f"{self._dropped_chars:,} characters of output were dropped",
                          as_error=False)
            return cell, resources

        def output(self, outs, msg, display_id, cell_index):
            content = msg.get("content", {})
            size = len(content.get("text", "")) + sum(len(str(v)) for v in content.get("data", {}).values())
            size += sum(len(line) for line in content.get("traceback", []))
            room = self.max_output_chars - self._cell_chars
            self._cell_chars += size
            if size <= room or msg["msg_type"] == "error":
                return super().output(outs, msg, display_id, cell_index)
            self._dropped_chars += size - max(room, 0)
            if msg["msg_type"] == "stream" and room > 0:
                msg = {**msg, "content": {**content, "text": content["text"][:room]}}
                super().output(outs, msg, display_id, cell_index)
            if self._cell_chars > self.stop_output_chars and not self._interrupted:
                self._interrupted = True
                asyncio.ensure_future(ensure_async(self.km.interrupt_kernel()))
            return None

    class FinalizeGrades(NbGraderPreprocessor):
        """After execution: graded cells that did not run, or of a tampered notebook, score 0."""

        def preprocess(self, nb, resources):
            meta = nb.metadata.get(NOTE_KEY, {})
            tampering = meta.get("tampering", [])
            for cell in nb.cells:
                if not _is_grade(cell):
                    continue
                if cell.execution_count is None and not any(o.output_type == "error" for o in cell.outputs):
                    _add_note(cell, "NotRun", "this test cell did not run; it scores 0")
                if tampering:
                    _add_note(cell, "GraderIntegrity", "this notebook modifies the grading machinery ("
                              + "; ".join(tampering[:3]) + "), so every graded cell scores 0; "
                              "ask your instructor if this is a mistake")
            summary = list(meta.get("notes", []))
            for cell in nb.cells:
                for note in cell.metadata.get(NOTE_KEY, {}).get("notes", []):
                    grade_id = cell.metadata.get("nbgrader", {}).get("grade_id", "a cell")
                    summary.append(f"{grade_id} — {note}")
            nb.metadata[NOTE_KEY] = {**meta, "summary": _unique(summary)}
            return nb, resources

    class SanitizeFeedback(NbGraderPreprocessor):
        """Feedback shows the learner's code, scores and one-line verdicts. It never shows hidden
        tests (source, tracebacks, output), nor output of other cells (which could carry data the
        learner's code captured while hidden tests ran)."""

        max_verdict_chars = Integer(600).tag(config=True)

        def preprocess(self, nb, resources):
            from nbformat.v4 import new_markdown_cell

            nb.metadata.pop("widgets", None)
            for cell in nb.cells:
                if cell.cell_type != "code":
                    continue
                original = cell.source
                cell.source = strip_hidden_tests(cell.source)
                notes = cell.metadata.get(NOTE_KEY, {}).get("notes", [])
                verdicts = [_note_output(*n.split(": ", 1)) for n in notes if ": " in n]
                if _is_grade(cell) and not verdicts:
                    for output in cell.outputs:
                        if output.output_type == "error":
                            verdicts.append(self._verdict(output, original))
                            break
                cell.outputs = verdicts
                cell.execution_count = None
                cell.metadata.pop(NOTE_KEY, None)
            summary = nb.metadata.get(NOTE_KEY, {}).get("summary", [])
            text = ("**How to read this feedback.** It shows your code, your score for each test cell and "
                    "why a test cell failed. Hidden tests are not shown: a failed hidden test says only "
                    "*a hidden test failed*. Outputs of your own cells are not repeated here.")
            if summary:
                text += "\n\n**Notes from the grader:**\n\n"
                text += "\n".join(f"* {_md_escape(item)}" for item in summary)
            nb.cells.insert(0, new_markdown_cell(text))
            nb.metadata.pop(NOTE_KEY, None)
            return nb, resources

        def _verdict(self, output, source):
            if output.ename == "HiddenTestFailed" or _from_hidden_tests(output, source):
                return _note_output("HiddenTestFailed", GENERIC_FAILURE)
            if output.ename == "NotImplementedError" and not str(output.evalue).strip():
                return _note_output("NotImplementedError", "this exercise is not answered yet")
            evalue = "\n".join(line for line in str(output.evalue).splitlines() if line.strip())
            if len(evalue) > self.max_verdict_chars:
                evalue = evalue[: self.max_verdict_chars] + " …"
            return _note_output(str(output.ename)[:80], evalue)

    return {"GuardSubmission": GuardSubmission, "GuardedExecute": GuardedExecute,
            "FinalizeGrades": FinalizeGrades, "SanitizeFeedback": SanitizeFeedback}


def _write_header(private_dir: Path, trusted_imports: list) -> None:
    """The grader's kernel header: an IPython startup file in the kernel's private home, which runs
    before the first cell and snapshots what hidden tests rely on (``snapshot_environment``)."""
    startup = Path(private_dir) / "home" / ".ipython" / "profile_default" / "startup"
    startup.mkdir(parents=True, exist_ok=True)
    imports = [(str(name), str(what)) for name, what in trusted_imports]
    (startup / "00-gpucourse-grader.py").write_text(f"""\
try:
    import gpucourse.tooling.grading as _gpucourse_grading
    _gpucourse_grading.snapshot_environment({imports!r})
    _gpucourse_header = "ok"
except BaseException as _gpucourse_error:  # reported by the grader, not raised into the notebook
    _gpucourse_header = f"{{type(_gpucourse_error).__name__}}: {{_gpucourse_error}}"[:300]
with open({str(Path(private_dir) / HEADER_STATUS)!r}, "w") as _gpucourse_file:
    _gpucourse_file.write(_gpucourse_header)
for _gpucourse_name in [n for n in globals() if n.startswith("_gpucourse_")]:
    del globals()[_gpucourse_name]
del _gpucourse_name
""")


HEADER_STATUS = "header-status.txt"


def header_note(private_dir: Path) -> str | None:
    """A line for the grade report when the header did not snapshot (None when it did)."""
    try:
        status = (Path(private_dir) / HEADER_STATUS).read_text()
    except OSError:
        status = "it did not run"
    if status == "ok":
        return None
    return (f"the grader's kernel header failed ({status}): this submission's hidden tests ran without the "
            "snapshot that protects them from changes to NumPy, builtins and imported names")


def _from_hidden_tests(output, source: str) -> bool:
    """Whether an error (not already generic) may come from a hidden block: its traceback points at
    a line of the block, or its message contains a word or number that only the block contains."""
    if BEGIN_HIDDEN not in source:
        return False
    lines = source.split("\n")
    begin = next(i for i, line in enumerate(lines, 1) if BEGIN_HIDDEN in line)
    for line in output.get("traceback", []):
        match = re.search(r"Cell In\[\d+\], line (\d+)", re.sub(r"\x1b\[[0-9;]*m", "", line))
        if match:
            if int(match.group(1)) >= begin:
                return True
            break
    words = re.compile(r"\d{2,}|[A-Za-z_]\w{3,}")
    hidden_only = set(words.findall(source)) - set(words.findall(strip_hidden_tests(source)))
    message = f"{output.get('ename', '')} {output.get('evalue', '')}"
    return any(word in hidden_only for word in words.findall(message))


def _unique(items):
    seen, out = set(), []
    for item in items:
        if item not in seen:
            seen.add(item)
            out.append(item)
    return out


def _md_escape(text: str) -> str:
    return re.sub(r"([\\`*_<>\[\]#|])", r"\\\1", text)


# ---------------------------------------------------------------------------------------------
# `make grade` and `make feedback`
# ---------------------------------------------------------------------------------------------

SUBMITTED = "submitted"
NOTE_FIELDS = ["student", "lab", "score", "max_score", "note"]


def _lab_names(root: Path) -> list[str]:
    return sorted(p.name for p in (root / "solutions").glob("lab*") if (p / f"{p.name}.py").exists())


def submitted_labs(root: Path = ROOT) -> dict[str, list[str]]:
    """lab → students with a submission of it in submitted/<student>/<lab>/."""
    found: dict[str, list[str]] = {}
    for lab in _lab_names(root):
        students = sorted(p.parent.name for p in (root / SUBMITTED).glob(f"*/{lab}") if p.is_dir())
        if students:
            found[lab] = students
    return found


def read_scores(root: Path = ROOT) -> list[dict]:
    """Per student, lab and graded cell: score and max score, from the gradebook."""
    from nbgrader.api import Gradebook

    rows = []
    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gb:
        for assignment in gb.assignments:
            for submission in assignment.submissions:
                for notebook in submission.notebooks:
                    for grade in notebook.grades:
                        rows.append({
                            "student": submission.student_id, "lab": assignment.name, "cell": grade.name,
                            "score": grade.score, "max_score": grade.max_score,
                        })
    return rows


def _ensure_assignments(root: Path, labs: list[str]) -> list[str]:
    """Labs missing from the gradebook are generated (as `make labs` does). Returns problems."""
    from nbgrader.api import Gradebook, MissingEntry

    missing = []
    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gb:
        for lab in labs:
            try:
                gb.find_assignment(lab)
            except MissingEntry:
                missing.append(lab)
    problems = []
    if missing:
        from gpucourse.tooling import build
    for lab in missing:
        print(f"{lab} is not in the gradebook yet: generating it from solutions/ …", flush=True)
        build.write_notebook(root / "solutions" / lab / f"{lab}.py")
        done = build.nbgrader(["generate_assignment", lab, "--force", "--log-level=WARN"], root)
        if done.returncode != 0:
            problems.append(f"{lab}: nbgrader generate_assignment failed:\n{done.stderr[-2000:]}")
    return problems


def unreadable_reason(root: Path, lab: str, student: str) -> str | None:
    """Why a submission cannot be graded at all (not a notebook, wrong name), or None."""
    import nbformat

    folder = root / SUBMITTED / student / lab
    path = folder / f"{lab}.ipynb"
    if not path.is_file():
        others = sorted(p.name for p in folder.glob("*.ipynb"))
        found = f" (found: {', '.join(others)})" if others else ""
        return f"no {lab}.ipynb in the submission{found}"
    try:
        nb = nbformat.read(path, as_version=4)
        nbformat.validate(nb)
    except Exception as exc:  # JSON errors, schema errors, binary junk
        return f"{lab}.ipynb is not a readable notebook ({type(exc).__name__})"
    return None


def _record_zero(root: Path, lab: str, student: str) -> None:
    """Gradebook entries with score 0 for a submission nbgrader cannot read (as for a missing one)."""
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gb:
        gb.update_or_create_student(student)
        submission = gb.update_or_create_submission(lab, student)
        for notebook in submission.notebooks:
            for grade in notebook.grades:
                grade.auto_score = 0
                grade.needs_manual_grade = False
        gb.db.commit()
    shutil.rmtree(root / "autograded" / student / lab, ignore_errors=True)


def course_root() -> Path:
    """The course being graded: the current folder when it has an nbgrader_config.py (an instructor's
    clone on a hub), else this repository."""
    here = Path.cwd()
    return here if (here / "nbgrader_config.py").exists() else ROOT


def grade_all(root: Path | None = None, jobs: int | None = None, *, quiet: bool = False) -> int:
    """Autograde everything in submitted/, write grades.csv and grades_by_cell.csv, print a summary.

    Students are graded in parallel (``jobs`` worker processes, default: the number of CPUs). A
    submission that hangs, crashes its kernel, tampers or cannot be read scores what it earns (often
    0) with a note. Returns 1 only when the grader itself failed (and says for whom), else 0.
    """
    root = Path(root or course_root()).resolve()
    started = time.monotonic()
    labs = submitted_labs(root)
    if not labs:
        print(f"nothing to grade: put submissions in {SUBMITTED}/<student>/<lab>/<lab>.ipynb")
        return 0
    count = sum(len(students) for students in labs.values())
    pool = WorkerPool(root, min(jobs or os.cpu_count() or 1, count))  # they import nbgrader while we prepare
    failures = _ensure_assignments(root, list(labs))
    notes: dict[tuple[str, str], list[str]] = {}
    tasks = []
    for lab, students in labs.items():
        for student in students:
            reason = unreadable_reason(root, lab, student)
            if reason:
                _record_zero(root, lab, student)
                notes[(student, lab)] = [f"not graded: {reason}; it scores 0"]
            else:
                tasks.append((lab, student))
    total = len(tasks) + len(notes)
    print(f"grading {total} submission(s) of {len(labs)} lab(s) with {pool.jobs} worker(s); "
          f"sandbox: {sandbox_status()}", flush=True)
    results = pool.run([("autograde", lab, student) for lab, student in tasks], quiet=quiet)
    for (_, lab, student), result in results.items():
        if not result.get("success"):
            failures.append(f"{lab}/{student}: the grader failed: {result.get('error', '?').strip()[-1500:]}")
        else:
            notes.setdefault((student, lab), []).extend(_notebook_notes(root, lab, student))
    rows = [r for r in read_scores(root) if r["student"] in labs.get(r["lab"], ())]
    _write_csv(root / "grades_by_cell.csv", rows, ["student", "lab", "cell", "score", "max_score"])
    totals: dict[tuple[str, str], list[float]] = {}
    for row in rows:
        total_row = totals.setdefault((row["student"], row["lab"]), [0.0, 0.0])
        total_row[0] += row["score"] or 0.0
        total_row[1] += row["max_score"] or 0.0
    summary = [{"student": s, "lab": lab, "score": sc, "max_score": mx,
                "note": " | ".join(notes.get((s, lab), []))} for (s, lab), (sc, mx) in sorted(totals.items())]
    _write_csv(root / "grades.csv", summary, NOTE_FIELDS)
    _print_summary(summary, labs, verbose=len(summary) <= 40)
    print(f"wrote {root / 'grades.csv'} and {root / 'grades_by_cell.csv'} "
          f"in {time.monotonic() - started:.0f} s")
    for failure in failures:
        print(f"GRADER FAILURE: {failure}", file=sys.stderr)
    return 1 if failures else 0


def _notebook_notes(root: Path, lab: str, student: str) -> list[str]:
    import nbformat

    path = root / "autograded" / student / lab / f"{lab}.ipynb"
    try:
        nb = nbformat.read(path, as_version=4)
    except Exception:
        return []
    return list(nb.metadata.get(NOTE_KEY, {}).get("summary", []))


def _print_summary(summary: list[dict], labs: dict, verbose: bool) -> None:
    for lab in labs:
        rows = [r for r in summary if r["lab"] == lab]
        if not rows:
            continue
        scores = [r["score"] for r in rows]
        full = sum(1 for r in rows if r["max_score"] and r["score"] == r["max_score"])
        zero = sum(1 for r in rows if r["score"] == 0)
        print(f"{lab}: {len(rows)} graded, mean {sum(scores) / len(rows):.1f} / {rows[0]['max_score']:.0f}, "
              f"{full} full marks, {zero} zero, {sum(1 for r in rows if r['note'])} with notes")
    for row in summary:
        if verbose or row["note"]:
            note = f"  [{row['note'][:150]}]" if row["note"] else ""
            print(f"  {row['lab']:20s} {row['student']:20s} {row['score']:6.1f} / {row['max_score']:.1f}"
                  f"{note}")


# -- workers: one process each, nbgrader imported once, submissions fed one at a time ------------

WORKER_TASK_TIMEOUT_S = 1800  # a safety net: GuardedExecute ends every notebook well before this


class WorkerPool:
    """``jobs`` worker processes (started now, so they import nbgrader while the caller prepares);
    ``run(tasks)`` feeds them ``(op, lab, student)`` tasks, one at a time each, and stops them."""

    def __init__(self, root: Path, jobs: int, name: str = "grading"):
        self.root, self.jobs = Path(root), max(1, jobs)
        log_dir = self.root / "autograded"
        log_dir.mkdir(exist_ok=True)
        self.logs = [open(log_dir / f".{name}-worker-{i}.log", "w") for i in range(self.jobs)]  # noqa: SIM115
        self.workers = [_start_worker(self.root, log) for log in self.logs]

    def run(self, tasks: list[tuple[str, str, str]], *, quiet: bool = False) -> dict:
        todo: queue.Queue = queue.Queue()
        for task in tasks:
            todo.put(task)
        results: dict = {}
        lock = threading.Lock()

        def work(index: int) -> None:
            while True:
                try:
                    task = todo.get_nowait()
                except queue.Empty:
                    return
                started = time.monotonic()
                if self.workers[index].poll() is not None:
                    self.workers[index] = _start_worker(self.root, self.logs[index])
                result = _ask(self.workers[index], task)
                if result is None:  # the worker itself died: retry once in a fresh one
                    _stop_worker(self.workers[index])
                    self.workers[index] = _start_worker(self.root, self.logs[index])
                    result = _ask(self.workers[index], task) or {"success": False, "error": "grading worker died"}
                if not result.get("success") and "database is locked" in str(result.get("error")):
                    time.sleep(1.0)
                    result = _ask(self.workers[index], task) or result
                with lock:
                    results[task] = result
                    if not quiet:
                        state = "ok" if result.get("success") else "GRADER FAILURE"
                        print(f"  {task[0]} {task[1]}/{task[2]}: {time.monotonic() - started:.1f} s, {state}",
                              flush=True)

        threads = [threading.Thread(target=work, args=(i,), daemon=True) for i in range(self.jobs)]
        try:
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
        finally:
            for worker in self.workers:
                _stop_worker(worker)
            for log in self.logs:
                log.close()
        return results


def nbgrader_api(root) -> object:
    """nbgrader's Python API for the course at ``root``, configured by its nbgrader_config.py."""
    from nbgrader.apps.api import NbGraderAPI
    from nbgrader.coursedir import CourseDirectory
    from traitlets.config.loader import PyFileConfigLoader

    bin_dir = str(Path(sys.executable).parent)
    if bin_dir not in os.environ.get("PATH", "").split(os.pathsep):  # nbgrader runs `alembic` by name
        os.environ["PATH"] = os.pathsep.join([bin_dir, os.environ.get("PATH", "")])
    config = PyFileConfigLoader("nbgrader_config.py", path=str(root)).load_config()
    coursedir = CourseDirectory(config=config)
    coursedir.root = str(root)
    return NbGraderAPI(coursedir=coursedir, config=config)


def _start_worker(root: Path, log) -> subprocess.Popen:
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])  # for alembic
    code = "import sys; from gpucourse.tooling.grading import _worker_main; _worker_main(sys.argv[1])"
    return subprocess.Popen([sys.executable, "-c", code, str(root)], cwd=root, env=env, text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, start_new_session=True)


def _ask(worker: subprocess.Popen, task: tuple[str, str, str]) -> dict | None:
    import select

    try:
        worker.stdin.write(json.dumps(list(task)) + "\n")
        worker.stdin.flush()
        ready, _, _ = select.select([worker.stdout], [], [], WORKER_TASK_TIMEOUT_S)
        if not ready:
            _kill_tree(worker.pid)
            return {"success": False, "error": f"grading took longer than {WORKER_TASK_TIMEOUT_S} s"}
        line = worker.stdout.readline()
    except (BrokenPipeError, OSError):
        return None
    if not line:
        return None
    return json.loads(line)


def _kill_tree(pid: int) -> None:
    """Kill a process and its descendants (kernels run in their own sessions, so killpg is not enough)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    todo, found = [pid], []
    while todo:
        current = todo.pop()
        found.append(current)
        todo += children.get(current, [])
    for victim in found:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(victim, signal.SIGKILL)


def _stop_worker(worker: subprocess.Popen) -> None:
    with contextlib.suppress(Exception):
        worker.stdin.close()
    try:
        worker.wait(timeout=30)
    except subprocess.TimeoutExpired:
        _kill_tree(worker.pid)
        worker.wait()


def _worker_main(root: str) -> None:
    """A grading worker: reads ``[op, lab, student]`` lines, answers one JSON line each."""
    channel = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # anything else printed on stdout (by a kernel, a library) goes to the log
    os.chdir(root)
    api = nbgrader_api(root)
    for line in sys.stdin:
        op, lab, student = json.loads(line)
        try:
            if op == "autograde":
                result = api.autograde(lab, student, force=True, create=True)
            elif op == "feedback":
                result = api.generate_feedback(lab, student, force=True)
            else:
                result = {"success": False, "error": f"unknown operation {op!r}"}
        except Exception as exc:  # noqa: BLE001
            result = {"success": False, "error": f"{type(exc).__name__}: {exc}"}
        print(f"--- {op} {lab}/{student}\n{result.get('log', '')}{result.get('error', '')}", file=sys.stderr,
              flush=True)
        channel.write(json.dumps({k: result.get(k) for k in ("success", "error") if k in result}) + "\n")
        channel.flush()


def feedback_all(root: Path | None = None, jobs: int | None = None, *, quiet: bool = True) -> int:
    """Feedback for every graded submission (and a short note for those that could not be graded).
    Returns 1 only when the grader itself failed."""
    root = Path(root or course_root()).resolve()
    labs = submitted_labs(root)
    tasks, count = [], 0
    for lab, students in labs.items():
        for student in students:
            if (root / "autograded" / student / lab / f"{lab}.ipynb").exists():
                tasks.append(("feedback", lab, student))
            else:
                reason = unreadable_reason(root, lab, student) or "it could not be graded"
                _write_note_feedback(root / "feedback" / student / lab / f"{lab}.html", lab, reason)
                count += 1
    if not labs:
        print("no feedback to write: nothing in submitted/ (run `make grade` after collecting)")
        return 0
    jobs = min(jobs or os.cpu_count() or 1, max(1, len(tasks)))
    results = WorkerPool(root, jobs, "feedback").run(tasks, quiet=quiet) if tasks else {}
    failed = [task for task, result in results.items() if not result.get("success")]
    for _, lab, student in failed:
        print(f"GRADER FAILURE: feedback for {lab}/{student}: {results[('feedback', lab, student)].get('error')}",
              file=sys.stderr)
    print(f"feedback for {count + len(results) - len(failed)} submission(s) written to {root / 'feedback'}")
    return 1 if failed else 0


def _write_note_feedback(path: Path, lab: str, reason: str) -> None:
    import html

    path.parent.mkdir(parents=True, exist_ok=True)
    lab = html.escape(lab)
    path.write_text(f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{lab}</title></head><body>"
                    f"<h1>{lab}: 0 points</h1><p>Your submission was not graded: {html.escape(reason)}.</p>"
                    f"<p>Download the lab again, work in the notebook called <code>{lab}.ipynb</code>, save "
                    "it and submit it again.</p></body></html>\n")


def _write_csv(path: Path, rows: list[dict], fields: list[str]) -> None:
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)
