"""Run-time tripwires: while armed, a call from the learner's code to a forbidden function is recorded, however
the learner reached it (a name built at run time, a default argument, a closure, an alias taken before).

    with tripwire.armed({"gpucourse.lessons.dataparallel.kernels:assign_buckets": "the lesson's bucketing"}) as trips:
        answer = learners_function(...)
    if trips.tripped: ...  # trips.calls: one line per forbidden call, with its reason

A target is ``"package.module:qualname"``, resolved to the object itself when armed. The tripwire watches calls
(``sys.setprofile`` on this thread and on threads started while armed), not names: a Python function is
recognised by its code object (the function a decorator wraps, too), a built-in by identity. A call counts
as the learner's when the nearest calling frame outside the Python installation (standard library and
installed packages) nor the course's own code is the learner's, unless a course function named in ``through``
comes first: the grader's communicator calling ``torch.distributed.all_reduce`` for the learner does not trip
it; the learner calling it directly, through a library (``DistributedDataParallel``) or through another of
the course's functions does. Frames above the one that armed the tripwire (the grader's) are never looked at.

Limits (a check in the learner's own process): code that removes the profile function (``sys.setprofile``)
or reaches a target from C without a Python frame (``map(f, …)`` over a built-in target) is not seen; the
tamper scan and the grader's integrity checks answer the first.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import sys
import sysconfig
import threading
import types
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from gpucourse.errors import InvalidConfig

_COURSE = str(Path(__file__).resolve().parents[2]) + "/"  # the gpucourse package directory
_LIBRARY = tuple(sorted({str(Path(p).resolve()) + "/" for key in ("stdlib", "platstdlib", "purelib", "platlib")
                         if (p := sysconfig.get_paths().get(key))}))


@dataclass
class Trips:
    """What the armed tripwire saw: one line per call from the learner's code to a target."""

    calls: list[str] = field(default_factory=list)

    @property
    def tripped(self) -> bool:
        return bool(self.calls)


def resolve(target: str):
    """The object a ``"package.module:qualname"`` target names."""
    if not isinstance(target, str) or target.count(":") != 1:
        raise InvalidConfig(f"a tripwire target is 'package.module:qualname', got {target!r}")
    module_name, qualname = target.split(":")
    obj = importlib.import_module(module_name)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def _codes(obj) -> list[types.CodeType]:
    """The code objects that run when ``obj`` is called (a class: its ``__init__``; a wrapper: what it wraps)."""
    if isinstance(obj, type):
        init = obj.__dict__.get("__init__") or getattr(obj, "__init__", None)
        return _codes(init) if isinstance(init, types.FunctionType) else []
    if isinstance(obj, (types.MethodType, staticmethod, classmethod)):
        return _codes(obj.__func__)
    codes = []
    while isinstance(obj, types.FunctionType):
        codes.append(obj.__code__)
        obj = getattr(obj, "__wrapped__", None)
    return codes


@functools.lru_cache(maxsize=4096)
def _kind(filename: str) -> str:
    """'course', 'library' or 'learner': who wrote the code in ``filename``."""
    try:
        path = str(Path(filename).resolve())
    except (OSError, ValueError):
        return "learner"
    if path.startswith(_COURSE):
        return "course"
    if path.startswith(_LIBRARY) or filename.startswith("<frozen"):
        return "library"
    return "learner"


def _nested(code: types.CodeType) -> set[types.CodeType]:
    """``code`` and every code object defined in it (its comprehensions, lambdas and local functions)."""
    found, todo = set(), [code]
    while todo:
        one = todo.pop()
        found.add(one)
        todo += [c for c in one.co_consts if isinstance(c, types.CodeType)]
    return found


def _learners(frame, through: frozenset, graders: frozenset) -> bool:
    """True when the call from ``frame`` is the learner's: walking up (no further than the grader's code that
    armed the tripwire, ``graders``), the first frame that is neither a library's nor the course's is the
    learner's, and no course function the learner may call (``through``) came first."""
    while frame is not None and frame.f_code not in graders:
        if frame.f_code in through:
            return False
        if _kind(frame.f_code.co_filename) == "learner":
            return True
        frame = frame.f_back
    return False


@contextlib.contextmanager
def armed(targets: Mapping[str, str], through: Iterable[str] = ()) -> Iterator[Trips]:
    """Record every call from the learner's code to one of ``targets`` (target → the reason it is forbidden).
    ``through``: the course's functions by which the learner may reach a target (a grader's communicator)."""
    if not isinstance(targets, Mapping) or not targets:
        raise InvalidConfig("armed() needs a mapping of at least one 'package.module:qualname' → reason")
    by_code: dict[types.CodeType, str] = {}
    builtins: list[tuple[object, str]] = []
    for target, reason in targets.items():
        obj = resolve(target)
        codes = _codes(obj)
        line = f"{target.split(':')[1]} was called from your code: {reason}"
        if codes:
            by_code.update(dict.fromkeys(codes, line))
        else:
            builtins.append((obj, line))
    allowed = frozenset(code for target in through for code in _codes(resolve(target)))
    stop = sys._getframe(1)
    while stop is not None and stop.f_code.co_filename == contextlib.__file__:
        stop = stop.f_back
    # the grader's code that armed the tripwire (and what it defines): it and the frames above it are not the learner's
    graders = frozenset(_nested(stop.f_code)) if stop is not None else frozenset()
    trips = Trips()

    def watch(frame, event, arg):
        if event == "call" and frame.f_code in by_code and _learners(frame.f_back, allowed, graders):
            trips.calls.append(by_code[frame.f_code])
        elif event == "c_call" and builtins:
            for obj, line in builtins:
                if (arg is obj or arg == obj) and _learners(frame, allowed, graders):
                    trips.calls.append(line)
        if previous is not None:
            previous(frame, event, arg)

    previous, previous_threads = sys.getprofile(), threading.getprofile()
    sys.setprofile(watch)
    threading.setprofile(watch)
    try:
        yield trips
    finally:
        sys.setprofile(previous)
        threading.setprofile(previous_threads)
