"""Answers frozen to plain data before a hidden test compares them (in the learner's kernel).

A hidden test that compares a learner's object with an expected value runs the learner's code while it
compares: a mapping whose ``__getitem__`` or ``__eq__`` runs, a property, ``__iter__``, a subclass of
``float``. That code can read the expected value (it is in the comparing frame) or decide the comparison.
So a hidden block never touches a learner's object directly; it goes through this module first:

* ``freeze(value, what)`` → a copy made only of plain data, built without running any of the learner's
  code: exact ``bool``, ``int``, ``float``, ``complex``, ``str``, ``bytes``, ``None``; exact ``dict``,
  ``list``, ``tuple``, ``set``, ``frozenset`` of those (recursively; an exact ``collections.Counter`` or
  ``OrderedDict`` becomes a ``dict``); an exact NumPy scalar becomes its
  Python number; an exact ``numpy.ndarray`` of a plain dtype (bool, int, uint, float, complex) becomes a
  fresh contiguous copy; a Numba device array (or the simulator's) is copied to the host first; an exact
  ``torch.Tensor`` becomes a fresh CPU tensor (detached). Anything else (a learner's class, a lazy
  object, a subclass of a builtin, an object array, a cycle) raises ``AnswerRefused`` with a message that
  says what it was; ``run_hidden_tests`` shows that message, and the cell scores 0.
* ``call(fn, *args, **kwargs)`` → ``freeze(fn(*args, **kwargs))``, with ``fn`` (the learner's function) run
  on a fresh thread: no frame of the grader is on its stack, so walking up frames finds nothing of the
  test. ``call_each(fn, cases)`` runs ``fn(*case)`` for each case on one thread; ``launch(kernel, grid,
  block, *args)`` runs a learner's Numba kernel there, and ``observe(kernel, grid, block, *args, **trace_options)``
  runs the course's microscope trace of it there (below). Never pass a function written in the hidden block
  (a lambda): its globals are the block's namespace, readable from the learner's frame (ValueError).
  The result is frozen and the rest of the
  learner's objects are released there too (their finalizers run on that thread). Afterwards the call is
  refused if the learner's code left a thread running, or installed a tracer, a profiler, a GC callback or
  an import hook (each of which would run learner code later, inside the comparison). An exception from
  ``fn`` becomes an ``AnswerRefused`` that names only its type. While it runs, ``sys._current_frames()``
  leaves out the grader's waiting thread (whose stack holds the hidden block): importing this module
  replaces ``sys._current_frames`` for good (before any learner code: the grader's header imports it).

``observe`` returns the course's own ``microscope.Report`` (so a hidden block keeps its checks:
``report.race_count()``, ``report.branches()``, a lab's ``counts(report)``), but REBUILT on the grader's
side from plain data: on the fresh thread the trace runs, its lazy analysis is forced, and the report's
whole state is frozen (``freeze``: strings, numbers, tuples, lists, dicts); the grader then builds a new
``Report`` from that frozen state. The report it returns holds no tracer, no kernel, no learner object:
its methods are the course's code working on plain data, so nothing the learner wrote runs when a
check reads it. What the kernel wrote is in the grader's own arrays, as with ``launch``.

Use in a hidden block (``run_hidden_tests`` binds ``freeze``, ``call``, ``call_each``, ``launch`` and
``observe``, the grader's own)::

    got = call(occupancy_by_hand, 96, 90, 0, (9, 0))        # BEFORE or after expected values: no matter,
    answer = freeze(answers, "answers")                      # no learner code runs after this line
    expected = reference(...)
    check(got["blocks"] == expected.active_blocks)

Standard library only (NumPy, Numba and PyTorch are read only when the value is one of theirs).
"""

from __future__ import annotations

import collections
import gc
import sys
import threading

from gpucourse.tooling.grading.tripwire import handed_in, is_learner_code, is_numba_kernel, learner_on_stack

_SCALARS = (bool, int, float, complex, str, bytes, type(None))
_CONTAINERS = (dict, list, tuple, set, frozenset)
# A class's name, module and bases read through type's own descriptors, and classes told apart by identity:
# ``kind in (bool, …)`` or ``kind.__module__`` would run a learner's metaclass (its __eq__, __hash__ or a
# property), here on the grader's thread
_MODULE_OF, _NAME_OF, _QUALNAME_OF, _MRO_OF = (type.__dict__[a] for a in ("__module__", "__name__", "__qualname__",
                                                                           "__mro__"))


def _one_of(kind, kinds) -> bool:
    return any(kind is k for k in kinds)


def _module(kind) -> str:
    module = _MODULE_OF.__get__(kind, type)
    return module if type(module) is str else ""


def _library_class(kind, module: str, name: str) -> bool:
    """``kind`` IS the class ``name`` of the loaded module ``module`` (not a class that spells its names)."""
    owner = sys.modules.get(module)
    return owner is not None and kind is vars(owner).get(name)
_PLAIN_KINDS = "biufc"  # NumPy dtype kinds: bool, int, uint, float, complex
MAX_DEPTH = 32
_FUNCTION = type(lambda: None)
# taken when the grader is imported (before any learner code: the grader's kernel header imports it), the
# real one; ``sys._current_frames`` itself becomes ``_current_frames`` below for good, so a reference the
# learner takes at any time is to that one
_ALL_FRAMES = getattr(sys._current_frames, "real", sys._current_frames)
_WAITING: set = set()  # the grader's threads that wait for a learner's call: their stacks hold a hidden block


def _current_frames() -> dict:
    """``sys._current_frames()`` without the grader's threads that wait for a learner's call."""
    frames = _ALL_FRAMES()
    for ident in list(_WAITING):
        frames.pop(ident, None)
    return frames


_current_frames.real = _ALL_FRAMES  # a second import (a reload) keeps the real one
sys._current_frames = _current_frames


class AnswerRefused(AssertionError):
    """An answer that is not plain data (or a call that left learner code behind); its message says why
    and is shown to the learner (it reveals nothing of the expected values). ``run_hidden_tests`` turns it
    into a ``HiddenTestFailed`` with that message."""

    def _render_traceback_(self) -> list[str]:
        return [f"HiddenTestFailed: {self}"]


def freeze(value, what: str = "your answer"):
    """A copy of ``value`` made of plain data only, built without running learner code (module docstring).
    ``what`` names the value in the refusal message (``"answers['A']"``)."""
    return _freeze(value, what, 0, set())


def _freeze(value, what: str, depth: int, active: set):
    kind = type(value)  # type() runs no learner code (``__class__`` may be a property: not read)
    if _one_of(kind, _SCALARS):
        return value
    if depth > MAX_DEPTH:
        raise AnswerRefused(f"{what} is nested more than {MAX_DEPTH} levels deep: hand in plain data")
    if kind is collections.Counter or kind is collections.OrderedDict:  # the stdlib's own (a course helper's
        kind = dict                                                      # counts): read as the dict they are
    if _one_of(kind, _CONTAINERS):
        if id(value) in active:
            raise AnswerRefused(f"{what} contains itself: hand in plain data without cycles")
        active.add(id(value))
        try:
            if kind is dict:
                return {_freeze(k, f"a key of {what}", depth + 1, active):
                        _freeze(v, f"a value of {what}", depth + 1, active)  # no key: learner data
                        for k, v in dict.items(value)}
            items = list.__iter__(value) if kind is list else iter(value)  # exact builtins: C iteration
            frozen = [_freeze(v, f"an element of {what}", depth + 1, active) for v in items]
            return frozen if kind is list else kind(frozen)
        finally:
            active.discard(id(value))
    module = _module(kind)  # the class's own, read without its metaclass
    if module == "numpy":
        return _numpy(value, kind, what)
    if module.startswith("numba.cuda") and any(_library_class(kind, module, name)
                                               for name in ("DeviceNDArray", "FakeCUDAArray")):
        return _numpy(value.copy_to_host(), None, what)
    if _library_class(kind, "torch", "Tensor"):
        return _torch(value, kind, what)
    raise AnswerRefused(_refusal(kind, what))


def _refusal(kind: type, what: str) -> str:
    # the learner's own class is named by kind only: its name is the learner's to choose, and a function the
    # grader calls could spell its hidden inputs there (the message reaches the feedback)
    plain = next((_NAME_OF.__get__(base, type) for base in _MRO_OF.__get__(kind, type)[1:]
                  if _one_of(base, _SCALARS + _CONTAINERS)), None)
    module = _module(kind)
    if plain:
        why = f"an object of a subclass of {plain}, which can change how it compares"
    elif module == "builtins":
        why = f"a `{_NAME_OF.__get__(kind, type)}`, not data"
    elif module == "__main__" or "ipykernel" in module or not _known_module(module):
        why = "an object of a class of your own"
    else:
        why = f"a `{_QUALNAME_OF.__get__(kind, type)}` from {module}"
    return (f"{what} is {why}; the grader compares plain data only: hand in numbers, strings, "
            "True/False/None, and dicts, lists, tuples or sets of them (or a NumPy array)")


def _known_module(name: str) -> bool:
    """A module that the course or a library installed (its classes' names are not the learner's)."""
    module = sys.modules.get(name)
    return module is not None and not name.startswith("__") and getattr(module, "__file__", None) is not None


def _numpy(value, kind, what: str):
    import numpy

    if kind is not None and kind is not numpy.ndarray:
        if _one_of(kind, _numpy_scalar_types(numpy)):  # exact NumPy scalar types only (no isinstance: __class__)
            if value.dtype.kind not in _PLAIN_KINDS:
                raise AnswerRefused(f"{what} is a NumPy {value.dtype} scalar: hand in a number")
            return numpy.generic.item(value)
        raise AnswerRefused(_refusal(kind, what))
    dtype = value.dtype
    if dtype.kind not in _PLAIN_KINDS or dtype.fields is not None or dtype.subdtype is not None:
        raise AnswerRefused(f"{what} is a NumPy array of dtype {dtype}: hand in numbers (bool, int, float)")
    return numpy.array(value, dtype=dtype, copy=True, order="C", subok=False)


def _numpy_scalar_types(numpy) -> set:
    codes = "?" + numpy.typecodes["AllInteger"] + numpy.typecodes["AllFloat"]
    return {numpy.dtype(code).type for code in codes}


def _torch(value, kind, what: str):
    import torch

    with _suppress():  # a mode pushed by the notebook intercepts every tensor operation
        if torch._C._len_torch_function_stack() or torch._C._len_torch_dispatch_stack():
            raise AnswerRefused(f"{what} was read while a PyTorch mode of the notebook was active")
    return torch.Tensor.clone(torch.Tensor.cpu(torch.Tensor.detach(value)))


class _suppress:
    """contextlib.suppress(AttributeError) without importing contextlib's generators here."""

    def __enter__(self):
        return self

    def __exit__(self, kind, value, tb):
        return kind is AttributeError


def _hooks_state() -> tuple:
    """What would run learner code later, outside the call: tracers, profilers, GC callbacks, import hooks."""
    return (threading._trace_hook, threading._profile_hook, tuple(gc.callbacks), tuple(sys.meta_path),
            tuple(sys.path_hooks))


def call(fn, *args, **kwargs):
    """``freeze(fn(*args, **kwargs))`` with ``fn`` run on a fresh thread (module docstring)."""
    _not_forbidden(fn, *args, *kwargs.values())
    return _on_a_thread(lambda: fn(*args, **kwargs), fn)


def call_each(fn, cases) -> list:
    """``[freeze(fn(*case)) for case in cases]``, all on one fresh thread (cheaper than one ``call`` each)."""
    _not_forbidden(fn)
    cases = [tuple(case) for case in cases]
    return _on_a_thread(lambda: [fn(*case) for case in cases], fn)


def launch(kernel, grid, block, *args) -> None:
    """``kernel[grid, block](*args)`` on a fresh thread (a Numba kernel of the learner's); what it wrote is
    in the grader's own arrays, read after it returns. Returns None (frozen)."""
    _not_forbidden(kernel)
    return _on_a_thread(lambda: kernel[grid, block](*args), kernel)


def _code_of(fn):
    """The Python code of a function or of a Numba kernel (its ``py_func``), else None. type() first:
    getattr on a learner's own object could run its ``__getattr__`` here, on the grader's stack."""
    if type(fn) is not _FUNCTION:
        if not is_numba_kernel(fn):
            return None
        fn = fn.py_func  # Numba's own class: its attributes run no learner code
    return fn.__code__ if type(fn) is _FUNCTION else None


def observe(kernel, grid, block, *args, **trace_options):
    """The microscope's ``trace(kernel, grid, block, *args, **trace_options)`` of a learner's kernel, run on a
    fresh thread like ``launch``; returns a ``Report`` rebuilt from its state frozen there (module docstring).
    A kernel that fails under the microscope (an access out of bounds, a deadlock at a barrier) is
    refused with the error's name."""

    _not_forbidden(kernel)

    def run():
        from gpucourse.microscope.launch import trace
        from gpucourse.microscope.report import Report

        report = trace(kernel, grid, block, *args, **trace_options)
        if type(report) is not Report:  # the course's trace returns its own Report (integrity-checked code)
            raise TypeError("the microscope's trace did not return its Report")
        report._analyse()  # the lazy part (warp issues) is worked out here, while the tracer still exists
        state = dict(vars(report))  # frozen by _on_a_thread: the tracer is gone (None) after _analyse
        # a race's example names its two threads by the scheduler's objects: kept as their text
        state["_races"] = [{key: repr(value) if key in _SHOWN else value for key, value in race.items()}
                           for race in state["_races"]]
        return state

    return _report_from(_on_a_thread(run, kernel, "the microscope's report of your kernel"))


def _report_from(state: dict):
    from gpucourse.microscope.report import Report

    report = Report.__new__(Report)  # no __init__: it reads a tracer; the state is complete already
    state["_races"] = [{key: _Shown(value) if key in _SHOWN else value for key, value in race.items()}
                       for race in state["_races"]]
    vars(report).update(state)
    return report


_SHOWN = ("thread_a", "thread_b")  # Report.races() shows them with repr()


class _Shown(str):
    """The text of a race's thread, which ``repr()`` shows as it is (as the scheduler's object showed it)."""

    def __repr__(self) -> str:
        return str.__str__(self)


def _not_forbidden(*handed) -> None:
    """Refuse a function or kernel that IS what the hidden block forbids (``tripwire.handed_in``): the
    course's reference handed in under the learner's name runs without a learner frame to record."""
    for value in handed:
        found = handed_in(value)
        if found:
            raise AnswerRefused(f"you handed in what this exercise forbids: {found}")


def _on_a_thread(run, fn, what: str = "what your function returned"):
    code = _code_of(fn)
    if code is not None and code.co_filename == "<hidden tests>":
        # its globals are the hidden block's namespace: the learner's code could read them from its frame
        raise ValueError("call() takes the learner's function itself, not a function of the hidden block")
    before_threads = set(_ALL_FRAMES())
    before_hooks = _hooks_state()
    outcome: dict = {}

    def worker() -> None:
        try:
            result = run()
            try:
                outcome["value"] = freeze(result, what)
            except AnswerRefused as refused:
                outcome["refused"] = str(refused)
            del result
        except BaseException as error:  # noqa: B036  (a learner's SystemExit fails the test too)
            kind = type(error)  # a builtin's or the course's by name; the learner's own could spell the inputs
            outcome["error"] = kind.__name__ if _named_exception(kind) else "an exception of its own"
            del error
        gc.collect()  # the learner's garbage is finalized here, not later inside the comparison
        sys.settrace(None)
        sys.setprofile(None)

    thread = threading.Thread(target=worker, name="gpucourse-graded-call", daemon=True)
    # the waiting grader's stack holds the hidden block: sys._current_frames() leaves it out meanwhile
    waiting = threading.get_ident()
    _WAITING.add(waiting)
    try:
        thread.start()
        thread.join()
    finally:
        _WAITING.discard(waiting)
    left = _learner_threads(before_threads, thread.ident)
    changed = _hooks_state() != before_hooks
    if changed:
        _put_back_hooks(before_hooks)
    if left:
        raise AnswerRefused("your code left a thread running after the grader's call returned: the grader "
                            "compares only after every thread of yours has ended")
    if changed:
        raise AnswerRefused("your code installed a tracer, a profiler, a garbage-collector callback or an "
                            "import hook while the grader called it: that is code running inside the test")
    if "refused" in outcome:
        raise AnswerRefused(outcome["refused"])
    if "error" in outcome:
        raise AnswerRefused(f"your function raised {outcome['error']} on the grader's inputs")
    return outcome["value"]


def _named_exception(kind: type) -> bool:
    """A builtin exception, or one the course defines (``MicroscopeError``): its name is not the learner's."""
    module = kind.__module__
    if module == "builtins":
        return True
    home = sys.modules.get(module) if module.startswith("gpucourse.") else None
    return home is not None and vars(home).get(kind.__name__) is kind


def _learner_threads(before: set, worker: int | None) -> list[int]:
    """Threads started since ``before`` that run the learner's code: one with a learner frame on its stack,
    or a ``threading.Thread`` whose target or ``run`` is the learner's (it may not have entered it yet). A
    library's idle thread is fine."""
    found = []
    for ident, top in _ALL_FRAMES().items():
        if ident in before or ident == worker:
            continue
        thread = threading._active.get(ident)
        target = getattr(thread, "_target", None)
        run = getattr(type(thread), "run", None)
        codes = [getattr(f, "__code__", None) for f in (target, getattr(target, "__func__", None), run)]
        if learner_on_stack(top) or any(c is not None and is_learner_code(c) for c in codes):
            found.append(ident)
    return found


def _put_back_hooks(state: tuple) -> None:
    trace, profile, callbacks, meta_path, path_hooks = state
    threading.settrace(trace) if trace is not None else setattr(threading, "_trace_hook", None)
    threading.setprofile(profile) if profile is not None else setattr(threading, "_profile_hook", None)
    gc.callbacks[:] = list(callbacks)
    sys.meta_path[:] = list(meta_path)
    sys.path_hooks[:] = list(path_hooks)
