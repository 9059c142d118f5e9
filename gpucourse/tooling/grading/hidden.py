"""The hidden tests' side of grading, in the learner's kernel (every lab imports ``check`` from here).

``check()`` fails a hidden test with one generic line; ``run_hidden_tests()`` runs a test cell's hidden
part (the autograder rewrites each hidden block into one call of it: ``rewrite.py``) with the snapshot
put back (``snapshot.py``), its output muted, the grader's own ``check`` bound, and any failure turned
into that same generic line. A notebook that changed the course's own code fails with ``GraderIntegrity``
instead, and the grader then scores every graded cell of it 0.

Runs in the learner's kernel: standard library only (and NumPy where it is there).
"""

from __future__ import annotations

import contextlib
import os
import sys

from gpucourse.measure.tritonmode import TRITON_MISSING, TritonMissing, triton_available
from gpucourse.tooling.grading.frozen import AnswerRefused
from gpucourse.tooling.grading.frozen import call as _call
from gpucourse.tooling.grading.frozen import call_each as _call_each
from gpucourse.tooling.grading.frozen import freeze as _freeze
from gpucourse.tooling.grading.frozen import launch as _launch
from gpucourse.tooling.grading.frozen import observe as _observe
from gpucourse.tooling.grading.snapshot import custom_comparisons, of_the_course, restore_snapshot
from gpucourse.tooling.grading.traced import trace_launch as _trace_launch
from gpucourse.tooling.grading.tripwire import armed, boundary, held_by_wrapper

GENERIC_FAILURE = "a hidden test failed: re-read the specification"
# a hidden test that compiles with Triton, graded where Triton is missing (macOS, Windows): the grader's fault
CANNOT_CHECK = f"this grader cannot check this cell: {TRITON_MISSING}; grade it where Triton is (Linux)"


class HiddenTestFailed(AssertionError):
    """A hidden test failed; the message is generic by design."""

    def _render_traceback_(self) -> list[str]:
        return [f"HiddenTestFailed: {self}"]


class HiddenTestRefused(HiddenTestFailed):
    """A hidden test refused the answer (not plain data) or caught a forbidden call: the message says why
    and reveals no hidden input or expected value, so feedback shows it (``SanitizeFeedback``)."""

    def _render_traceback_(self) -> list[str]:
        return [f"{REFUSED}: {self}"]


REFUSED = HiddenTestRefused.__name__


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
    if id(fn) in seen:
        return False
    seen.add(id(fn))
    held = held_by_wrapper(fn)  # functools.partial(course_fn), a bound method, functools.cache(course_fn)
    if held:
        return any(_home_is(obj, package) or reaches_package(obj, package, seen) for obj in held)
    if not isinstance(fn, types.FunctionType):
        return False
    codes, names = [fn.__code__], set()
    while codes:
        code = codes.pop()
        names |= set(code.co_names)
        codes += [c for c in code.co_consts if isinstance(c, types.CodeType)]
    if any(package in n or n in ("__import__", "importlib", "sys", "eval", "exec", "globals") for n in names):
        return True
    return any(_home_is(fn.__globals__.get(name), package) or reaches_package(fn.__globals__.get(name), package, seen)
               for name in names)


def _home_is(obj, package: str) -> bool:
    """A module, class or function whose home is ``package``."""
    import types

    home = obj.__name__ if isinstance(obj, types.ModuleType) else getattr(obj, "__module__", None) or ""
    return isinstance(home, str) and home.startswith(package)


_CHECK = check  # the grader's own check, bound for hidden tests even if a learner redefines `check`


class GraderIntegrity(HiddenTestFailed):
    """The notebook changed the course's own code (the grader, the microscope, a lesson) while it ran;
    the grader then scores every graded cell 0 (``preprocessors.FinalizeGrades``)."""

    def _render_traceback_(self) -> list[str]:
        return [f"{INTEGRITY}: {self}"]


INTEGRITY = GraderIntegrity.__name__  # the error's name in a cell's output and in the kernel's reply


def integrity_message(changes: list[str]) -> str:
    return "the course's own code was changed: " + ", ".join(changes[:3]) + (", …" if len(changes) > 3 else "")


FORBIDDEN_NAME = "FORBIDDEN"  # a hidden block's top-level literal: {"module:qualname": "why it is forbidden"}


def forbidden_targets(code: str) -> dict[str, str]:
    """The tripwire targets a hidden block declares: its top-level ``FORBIDDEN = {…}`` literal (a dict of
    strings), or none. ValueError for a declaration that is not such a literal (a lab's own mistake)."""
    import ast

    found: dict[str, str] = {}
    for node in ast.parse(code).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == FORBIDDEN_NAME
                                                for t in node.targets):
            value = ast.literal_eval(node.value)
            if not (isinstance(value, dict) and all(isinstance(k, str) and isinstance(v, str)
                                                    for k, v in value.items())):
                raise ValueError(f"{FORBIDDEN_NAME} in a hidden block must be a dict of strings")
            found.update(value)
    return found


def run_hidden_tests(code: str, namespace: dict, local_namespace: dict | None = None) -> None:
    """Run the hidden part of a test cell (the autograder rewrites hidden blocks into this call).

    First everything the grader's header snapshotted before any learner code ran is put back
    (``snapshot_environment``): hidden tests see the real NumPy, builtins and imported names
    whatever the submission changed. The block runs in a PRIVATE namespace (a copy of the notebook's
    names, with the grader's ``check``, ``freeze``, ``call``, ``call_each``, ``launch``, ``observe`` and
    ``trace_launch`` (``traced.py``) bound): nothing it binds — expected values above all — is visible to the
    learner's functions, whose globals are the notebook's. Learner values and calls go through
    ``freeze``/``call``/``launch``/``observe``/``trace_launch``, so no learner code runs where expected values
    live. The targets the block declares in
    ``FORBIDDEN = {"module:qualname": "why"}`` are armed (``tripwire.py``) while it runs: a call from the
    learner's code fails the block with that reason.
    Output is muted while it runs (so a learner's function cannot print the hidden inputs), and any other
    failure — an assertion, an exception raised by the learner's code, an interrupt — becomes one generic
    ``HiddenTestFailed`` line; a refused answer (``AnswerRefused``) or a tripped wire says why. A change to
    the course's own modules, found before or after the block ran, raises ``GraderIntegrity`` (nothing of
    the course rebinds them: only the notebook can have).
    """
    changes = of_the_course(restore_snapshot(namespace))
    if changes:
        raise GraderIntegrity(integrity_message(changes)) from None
    private = dict(namespace)
    if local_namespace is not None and local_namespace is not namespace:
        private.update(local_namespace)
    private.update(check=_CHECK, freeze=_freeze, call=_call, call_each=_call_each, launch=_launch,
                   observe=_observe, trace_launch=_trace_launch)
    failed, why, trips = False, None, None
    try:
        targets = forbidden_targets(code)
        with _muted(), armed(targets) as trips:
            exec(compile(code, "<hidden tests>", "exec"), private)  # noqa: S102
        failed = bool(custom_comparisons())  # results that decide their own comparisons prove nothing
    except AnswerRefused as refused:
        failed, why = True, str(refused)
    except TritonMissing:  # the grader's machine lacks Triton: say so, not "re-read the specification"
        failed, why = True, (CANNOT_CHECK if not triton_available() else None)
    except BaseException:  # noqa: B036  (an interrupt or sys.exit inside hidden tests also fails them)
        failed = True
    finally:
        private.clear()  # the expected values go now, before any more learner code runs
    changes = of_the_course(restore_snapshot(namespace))  # what the learner's code did meanwhile
    if changes:
        raise GraderIntegrity(integrity_message(changes)) from None
    if trips is not None and trips.tripped:
        raise HiddenTestRefused("your code called what this exercise forbids: " + "; ".join(trips.calls)) from None
    if why:
        raise HiddenTestRefused(why) from None
    if failed:
        raise HiddenTestFailed(GENERIC_FAILURE) from None


boundary(run_hidden_tests)  # the test cell that calls a hidden block is not the learner's work


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
