"""Run-time tripwires: functions an exercise forbids record every call that comes from the learner's code.

A ban by spelling (a name in ``co_names``, a list of imports) misses a name built at run time
(``getattr(module, "all_" + "reduce")``), a default argument, a closure, an alias. A tripwire does not read
names: while ``armed``, each target is wrapped where it lives, on the object itself where it can be:

* a Python function (a module's, or a class's method, static or class method): its ``__code__`` is swapped
  for a trampoline that records the call and runs the original; every reference to that function object,
  wherever it was taken (an alias, a default, a closure, a bound method, a dict), reaches the trampoline;
* a class: its own ``__init__`` (and ``__new__`` when the class defines one in Python) the same way, or an
  ``__init__`` set on the class while armed;
* anything else (a builtin, a C function, an object): the attribute is replaced by a recording wrapper, so a
  reference taken before arming escapes (say so in the exercise's reason if it matters).

A call is recorded when the call stack holds a frame of LEARNER code: code that is not in the Python
installation (stdlib, site-packages), not in the ``gpucourse`` package and not generated (``<string>``,
``<frozen …>``, the hidden tests): a notebook cell, a rank script. Walking up stops at a frame registered
with ``boundary`` (``run_hidden_tests``: the test cell that called the hidden block is not the learner's work).

API (kept stable: labs 09–11 code against it)::

    with armed({"torch.nn.parallel:DistributedDataParallel": "the exercise is to write the reducer",
                "gpucourse.lessons.occupancy.model:SpeedModel.relative_speed": "compute it yourself"}) as trips:
        ...                       # run the learner's code
    trips.tripped                 # bool
    trips.calls                   # ["torch.nn.parallel:DistributedDataParallel: the exercise is …", …]

Wrappers are removed on exit, even on error. A hidden block declares its targets with a top-level literal
``FORBIDDEN = {"module:qualname": "reason", …}`` (``hidden.run_hidden_tests`` arms them around the block).

Standard library only.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import os
import sys
import sysconfig
import types
from collections.abc import Iterator, Mapping

_REGISTRY = "__gpucourse_tripwire__"  # the name the trampolines look up in their function's globals
_BOUNDARIES: set = set()  # code objects above which the call stack is not the learner's
_ARMED: dict[int, str] = {}  # id of each armed target object (and its function) -> "target: reason", while armed


def boundary(fn):
    """Register ``fn``'s code as a boundary: frames above it (its callers) are not searched for learner
    code. Returns ``fn`` (usable as a decorator)."""
    _BOUNDARIES.add(fn.__code__)
    return fn


def _library_roots() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    roots = {paths.get(key, "") for key in ("stdlib", "platstdlib", "purelib", "platlib")}
    roots |= {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    roots.add(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))  # gpucourse/
    return tuple(sorted(os.path.join(os.path.realpath(r), "") for r in roots if r))


_ROOTS = _library_roots()
_VERDICTS: dict[str, bool] = {}


def is_learner_code(code: types.CodeType) -> bool:
    """Whether ``code`` is the learner's (module docstring): not installed, not the course's, not generated."""
    filename = code.co_filename
    verdict = _VERDICTS.get(filename)
    if verdict is None:
        if filename.startswith("<"):
            verdict = filename.startswith("<ipython-input")
        else:
            verdict = not os.path.join(os.path.realpath(filename), "").startswith(_ROOTS)
        _VERDICTS[filename] = verdict
    return verdict


def learner_on_stack(frame) -> bool:
    """Whether this frame or one of its callers (up to a boundary) runs learner code."""
    while frame is not None:
        code = frame.f_code
        if code in _BOUNDARIES:
            return False
        if is_learner_code(code):
            return True
        frame = frame.f_back
    return False


class Trips:
    """What the armed targets recorded: ``calls`` (one line per distinct target called), ``tripped``."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    @property
    def tripped(self) -> bool:
        return bool(self.calls)

    def _record(self, target: str, reason: str) -> None:
        line = f"{target}: {reason}"
        if line not in self.calls:
            self.calls.append(line)


def resolve(target: str):
    """``"package.module:Class.attr"`` → (owner, attribute name, the object). ValueError if it is not there."""
    module_name, sep, qualname = target.partition(":")
    if not sep or not qualname:
        raise ValueError(f"a tripwire target is 'package.module:qualname', not {target!r}")
    try:
        owner = importlib.import_module(module_name)
    except ImportError as error:
        raise ValueError(f"tripwire target {target!r}: cannot import {module_name}: {error}") from None
    *path, name = qualname.split(".")
    for part in path:
        owner = getattr(owner, part, None)
        if owner is None:
            raise ValueError(f"tripwire target {target!r}: no {part!r} on the way")
    if isinstance(owner, type):
        obj = next((vars(c)[name] for c in owner.__mro__ if name in vars(c)), None)
    else:
        obj = getattr(owner, name, None)
    if obj is None:
        raise ValueError(f"tripwire target {target!r}: no attribute {name!r}")
    return owner, name, obj


def _trampoline_code(nfree: int, key: int) -> types.CodeType:
    """A code object with ``nfree`` free variables (as ``__code__`` assignment requires) that hands its
    call to ``globals()[_REGISTRY][key]``."""
    names = [f"_free{i}" for i in range(nfree)]
    source = "def _outer():\n"
    source += "".join(f"    {name} = None\n" for name in names)
    source += "    def _tripwire(*args, **kwargs):\n"
    source += "".join(f"        {name}\n" for name in names)
    source += f"        return {_REGISTRY}[{key}](args, kwargs)\n"
    source += "    return _tripwire\n"
    scope: dict = {}
    exec(compile(source, "<gpucourse tripwire>", "exec"), scope)  # noqa: S102
    return scope["_outer"]().__code__


class _Armed:
    def __init__(self, trips: Trips) -> None:
        self.trips = trips
        self.undo: list = []
        self.wrapped: set[int] = set()  # functions already swapped (two targets may name one function)

    def recorder(self, target: str, reason: str, original):
        trips = self.trips

        def record_then_call(args, kwargs):
            if learner_on_stack(sys._getframe(1)):
                trips._record(target, reason)
            return original(*args, **kwargs)

        return record_then_call

    def swap_code(self, fn: types.FunctionType, target: str, reason: str) -> None:
        """Wrap a Python function in place: its code becomes a trampoline to a copy of the original."""
        if id(fn) in self.wrapped:
            return
        self.wrapped.add(id(fn))
        original = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)
        original.__kwdefaults__ = fn.__kwdefaults__
        original.__dict__.update(fn.__dict__)
        registry = fn.__globals__.get(_REGISTRY)
        created = registry is None
        if created:
            registry = fn.__globals__[_REGISTRY] = {}
        key = id(fn)
        registry[key] = self.recorder(target, reason, original)
        saved = fn.__code__
        fn.__code__ = _trampoline_code(len(saved.co_freevars), key)

        def undo() -> None:
            fn.__code__ = saved
            self.wrapped.discard(id(fn))
            registry.pop(key, None)
            if created and not registry:
                fn.__globals__.pop(_REGISTRY, None)

        self.undo.append(undo)

    def replace_attribute(self, owner, name: str, target: str, reason: str) -> None:
        had = name in vars(owner)
        saved = vars(owner).get(name)
        current = getattr(owner, name)
        record = self.recorder(target, reason, current)

        def wrapper(*args, **kwargs):
            return record(args, kwargs)

        if isinstance(owner, type):
            wrapper = staticmethod(wrapper) if isinstance(saved, staticmethod) else wrapper
            type.__setattr__(owner, name, wrapper)
        else:
            setattr(owner, name, wrapper)

        def undo() -> None:
            if had:
                (type.__setattr__ if isinstance(owner, type) else setattr)(owner, name, saved)
            else:
                (type.__delattr__ if isinstance(owner, type) else delattr)(owner, name)

        self.undo.append(undo)

    def arm(self, target: str, reason: str) -> None:
        owner, name, obj = resolve(target)
        inner = obj.__func__ if isinstance(obj, staticmethod | classmethod) else obj
        for key in {id(obj), id(inner)}:  # what handed_in() recognises
            _ARMED[key] = f"{target}: {reason}"
            self.undo.append(functools.partial(_ARMED.pop, key, None))
        if isinstance(inner, types.FunctionType):
            self.swap_code(inner, target, reason)
        elif isinstance(inner, type):
            armed_any = False
            for method in ("__init__", "__new__"):
                member = vars(inner).get(method)
                member = member.__func__ if isinstance(member, staticmethod | classmethod) else member
                if isinstance(member, types.FunctionType):
                    self.swap_code(member, target, reason)
                    armed_any = True
            if not armed_any:  # a C or inherited __init__: one set on the class while armed
                self.replace_attribute(inner, "__init__", target, reason)
        else:
            self.replace_attribute(owner, name, target, reason)


_KERNEL_TYPES = {("numba.cuda.simulator.kernel", "FakeCUDAKernel"), ("numba.cuda.dispatcher", "CUDADispatcher")}


def handed_in(value) -> str | None:
    """``"target: reason"`` when ``value`` IS an armed target — the forbidden function or class itself, or a
    Numba kernel made from its Python function (``cuda.jit(lesson_kernel.py_func)``): handed to the grader as
    the learner's own, it would run with no learner frame on the stack, so no call would be recorded. Reads
    only ``id()`` and, for Numba's own kernel classes, ``py_func`` (no learner code runs)."""
    if not _ARMED:
        return None
    seen: set[int] = set()
    todo = [value]
    while todo and len(seen) < _MAX_UNWRAPPED:
        value = todo.pop()
        if id(value) in seen:
            continue
        seen.add(id(value))
        found = _ARMED.get(id(value))
        if found is None and is_numba_kernel(value):
            found = _ARMED.get(id(value.py_func))
        if found is not None:
            return found
        todo += held_by_wrapper(value)
    return None


_MAX_UNWRAPPED = 64  # objects looked at through wrappers of wrappers: a deeper nest is no hand-in of a function
_PARTIAL_FIELDS = tuple(vars(functools.partial)[name] for name in ("func", "args", "keywords"))
_METHOD_FIELDS = tuple(vars(types.MethodType)[name] for name in ("__func__", "__self__"))
_LRU_WRAPPER = type(functools.lru_cache(len))
_MRO_OF = vars(type)["__mro__"]


def held_by_wrapper(value) -> list:
    """What a callable wrapper made by the standard library holds, so that ``handed_in`` and
    ``hidden.reaches_package`` see the function inside it: ``functools.partial`` (or a subclass of it) → its
    function, arguments and keyword arguments; a bound method → its function and ``self``; a static or class
    method → its function; ``functools.cache``/``lru_cache``'s wrapper → ``__wrapped__``. Each is read through
    the wrapper TYPE's own descriptors (C slots), never ``getattr`` on the object, so no learner code runs
    (a learner's subclass may define ``__getattribute__``). Called by the grader's thread: a forbidden function
    inside ``functools.partial`` would otherwise run with no learner frame on the stack. Anything else: []."""
    kind = type(value)
    if functools.partial in _MRO_OF.__get__(kind, type):  # type's own slot: no learner metaclass runs
        func, args, keywords = (field.__get__(value, kind) for field in _PARTIAL_FIELDS)
        held = [func]
        held += list(args) if type(args) is tuple else []
        held += list(dict.values(keywords)) if type(keywords) is dict else []
        return held
    if kind is types.MethodType:
        return [field.__get__(value, kind) for field in _METHOD_FIELDS]
    if kind is staticmethod or kind is classmethod:
        return [vars(kind)["__func__"].__get__(value, kind)]
    if kind is _LRU_WRAPPER:
        inner = vars(kind)["__dict__"].__get__(value, kind)
        return [dict.get(inner, "__wrapped__")] if type(inner) is dict else []
    return []


def is_numba_kernel(value) -> bool:
    """Whether ``value``'s class IS one of Numba's kernel classes (by identity: a learner's class that spells
    the same names is not), so reading its ``py_func`` runs no learner code."""
    kind = type(value)
    for module_name, class_name in _KERNEL_TYPES:
        module = sys.modules.get(module_name)
        if module is not None and kind is getattr(module, class_name, None):
            return True
    return False


@contextlib.contextmanager
def armed(targets: Mapping[str, str]) -> Iterator[Trips]:
    """Wrap each ``"module:qualname"`` target (→ its reason) while the block runs (module docstring)."""
    trips = Trips()
    state = _Armed(trips)
    try:
        for target, reason in dict(targets).items():
            state.arm(target, reason)
        yield trips
    finally:
        for undo in reversed(state.undo):
            with contextlib.suppress(Exception):
                undo()
