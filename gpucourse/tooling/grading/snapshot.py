"""The snapshot: what hidden tests rely on, captured before any learner code runs, and put back.

A scan of the source can only recognise patterns (``np.allclose = …``); the same change made through an
alias, ``vars()``, a list or a default argument reads differently. So the grader's header (an IPython
startup file, run before the first cell: ``header.py``) imports the modules the lab's locked cells import
and remembers, for every loaded module, its functions, classes and submodules, each function's code and
defaults, the methods of its classes, and the names the locked cells bind. Before each hidden block they
are put back (``restore_snapshot``), and what had changed is reported with its owner: a change to the
course's own modules is tampering (``hidden.run_hidden_tests``).

Runs in the learner's kernel: standard library only.
"""

from __future__ import annotations

import contextlib
import sys

_SNAPSHOT: dict | None = None


def snapshot_environment(imports=()) -> None:
    """Called once by the grader's kernel header, before any learner code. ``imports``: the
    ``(name, what)`` pairs that the lab's locked cells import (``imported_names``), in order."""
    import gc

    collecting = gc.isenabled()
    gc.disable()  # its ~150,000 new tuples would set off a full collection of every library's objects (issue 50)
    try:
        _take_snapshot(imports)
    finally:
        if collecting:
            gc.enable()


def _take_snapshot(imports) -> None:
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
                    cells.append((cell, cell.cell_contents, value.__module__ or ""))

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


def restore_snapshot(namespace: dict) -> dict[str, str]:
    """Put back everything in the snapshot. Returns what had changed, each with the module that owns
    it (``{"gpucourse.tooling.grading.hidden.check": "gpucourse.tooling.grading.hidden"}``); empty
    without a snapshot."""
    snap = _SNAPSHOT
    if snap is None:
        return {}
    missing = object()
    changed: dict[str, str] = {}
    builtins_dict = snap["modules"]["builtins"].__dict__
    for key, value in snap["builtins"].items():  # first: the loops below use builtins
        if builtins_dict.get(key, missing) is not value:
            builtins_dict[key] = value
            changed[f"builtins.{key}"] = "builtins"
    for name, module in snap["modules"].items():
        if sys.modules.get(name) is not module:
            sys.modules[name] = module
            changed[f"sys.modules[{name!r}]"] = name
    for module, key, value in snap["attrs"]:
        if module.__dict__.get(key, missing) is not value:
            module.__dict__[key] = value
            changed[f"{module.__name__}.{key}"] = module.__name__
    for cls, key, value in snap["class_attrs"]:
        if cls.__dict__.get(key, missing) is not value:
            with contextlib.suppress(Exception):
                type.__setattr__(cls, key, value)
                changed[f"{cls.__module__}.{cls.__qualname__}.{key}"] = cls.__module__
    for function, code, defaults, kwdefaults in snap["functions"]:
        if (function.__code__ is not code or function.__defaults__ is not defaults
                or function.__kwdefaults__ is not kwdefaults):
            function.__code__, function.__defaults__, function.__kwdefaults__ = code, defaults, kwdefaults
            changed[f"{function.__module__}.{function.__qualname__} (its code or defaults)"] = function.__module__ or ""
    for cell, value, owner in snap["cells"]:
        try:
            same = cell.cell_contents is value
        except ValueError:  # emptied
            same = False
        if not same:
            cell.cell_contents = value
            changed[f"a closure cell of a function of {owner or 'a library'}"] = owner
    for name, value in snap["bindings"].items():
        if namespace.get(name, missing) is not value:
            namespace[name] = value
            changed[f"the name `{name}`"] = "__main__"
    sys.settrace(None)  # a tracer could rewrite the hidden tests' frames
    sys.setprofile(None)
    return changed


def of_the_course(changed: dict[str, str]) -> list[str]:
    """The changes (from ``restore_snapshot``) to the course's own modules: the grader, the microscope,
    the lessons. Nothing of the course rebinds them once imported, so only a notebook can have."""
    return sorted(what for what, owner in changed.items() if owner == "gpucourse" or owner.startswith("gpucourse."))
