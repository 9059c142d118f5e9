"""Grading pieces without running nbgrader: hidden tests, the tamper scan, the sandbox, the
feedback filter, the configuration, the header. (Whole submissions: tests/test_hostile.py.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

from gpucourse.tooling import grading
from gpucourse.tooling.build import ROOT, lab_names, to_notebook
from gpucourse.tooling.grading import (
    GENERIC_FAILURE,
    HiddenTestFailed,
    batch,
    check,
    guard_hidden_tests,
    imported_names,
    kernel_environment,
    lab_helpers,
    landlock_abi,
    sandbox_command,
    sandbox_paths,
    scan_learner_code,
    strip_hidden_tests,
)
from gpucourse.tooling.grading import header as header_room
from gpucourse.tooling.grading.notes import add_note

LOCKED = {"np": "numpy", "runtime": "gpucourse.measure.runtime", "check": "gpucourse.tooling.grading.check"}
TEST_CELL = '''"""Check that f doubles."""
assert f(1) == 2, "f(1) should be 2"
### BEGIN HIDDEN TESTS
for x in [7919, 104729]:
    check(f(x) == 2 * x)
### END HIDDEN TESTS
'''


def test_check_fails_with_one_generic_line():
    check(True)
    check(lambda: 1 + 1 == 2)
    with pytest.raises(HiddenTestFailed) as info:
        check(lambda: 1 / 0)  # an exception inside the condition is a failure, not a traceback
    assert info.value._render_traceback_() == [f"HiddenTestFailed: {GENERIC_FAILURE}"]
    assert info.value.__cause__ is None


def test_hidden_blocks_run_muted_with_the_graders_check(capfd):
    guarded = guard_hidden_tests(TEST_CELL)
    assert "BEGIN HIDDEN TESTS" in guarded and "END HIDDEN TESTS" in guarded
    assert "7919" not in strip_hidden_tests(guarded) and "assert f(1) == 2" in strip_hidden_tests(guarded)

    def leaky(x):
        print("called with", x)
        os.write(1, f"fd write {x}\n".encode())
        return 2 if x == 1 else 0

    def noop_check(*args, **kwargs):
        pass

    namespace = {"f": leaky, "check": noop_check}
    with pytest.raises(HiddenTestFailed):
        exec(compile(guarded, "<cell>", "exec"), namespace)
    printed = capfd.readouterr()
    assert "called with 1" in printed.out  # the visible part prints normally
    assert "7919" not in printed.out + printed.err  # the hidden part was muted, down to the file descriptor
    assert namespace["check"] is noop_check  # the learner's binding is back afterwards

    namespace = {"f": lambda x: 2 * x}
    exec(compile(guarded, "<cell>", "exec"), namespace)  # a right answer passes, and nothing leaks
    assert "check" not in namespace


def test_an_exception_inside_hidden_tests_becomes_the_generic_line():
    namespace = {"f": lambda x: {1: 2}[x]}  # KeyError on hidden inputs: its traceback would show them
    with pytest.raises(HiddenTestFailed) as info:
        exec(compile(guard_hidden_tests(TEST_CELL), "<cell>", "exec"), namespace)
    assert str(info.value) == GENERIC_FAILURE and info.value.__context__ is None


@pytest.mark.parametrize("lab", lab_names())
def test_every_lab_can_be_hardened(lab):
    """Each lab's hidden blocks still compile once rewritten, and no solution cell trips the tamper scan."""
    nb = to_notebook(ROOT / "solutions" / lab / f"{lab}.py")
    imported = imported_names(c.source for c in nb.cells if c.cell_type == "code")
    trusted = [c.source for c in nb.cells if c.cell_type == "code" and c.metadata.get("nbgrader", {}).get("locked")]
    locked = imported_names(trusted)
    helpers = lab_helpers(trusted, [c.source for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade")])
    hidden = 0
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if cell.cell_type != "code":
            continue
        if meta.get("grade"):
            compile(guard_hidden_tests(cell.source), f"{lab}:{meta['grade_id']}", "exec")
            hidden += "BEGIN HIDDEN TESTS" in cell.source
        if not meta.get("locked"):
            assert scan_learner_code(cell.source, imported, locked, helpers) == ([], []), meta.get("grade_id")
    assert hidden > 0, f"{lab} has no hidden tests"


@pytest.mark.parametrize("code", [
    "import gpucourse.tooling.grading as g\ng.check = lambda *a: None",
    "from gpucourse.tooling import grading\nsetattr(grading, 'check', print)",
    "check.__code__ = (lambda *a: None).__code__",
    "np.allclose = lambda *a, **k: True",
    "np.testing.assert_allclose = print",
    "import numpy\nnumpy.allclose = lambda *a, **k: True",
    "__builtins__.print = None",
    "import builtins\nbuiltins.len = lambda x: 0",
    "import sys\nsys.modules['gpucourse.tooling.grading'] = None",
    "exec(open('x').read())",
    "eval('1')",
    "import ctypes",
    "import inspect\ninspect.currentframe()",
    "import sys\nf = sys._getframe(1)",
    "globals()['__builtins__'] = {}",
    "get_ipython().display_pub = None",
    "del np.allclose",
    "import types\nnp = types.SimpleNamespace(allclose=lambda *a, **k: True)",  # hidden tests would use it
    "import torch as np",
    "def f():\n    global np\n    np = None",
    "import sys as s\ns.modules.clear()",
    "frame = getattr(f, 'f_' + 'back')",  # names folded from constants (issue 46)
    "object.__getattribute__(f, 'kcab_f'[::-1])",
    "vars(fn)['__glo' + 'bals__']",
])
def test_tampering_is_found(code):
    tampering, _ = scan_learner_code(code, {"np", "check", "cuda"}, LOCKED)
    assert tampering, code


@pytest.mark.parametrize("code", [
    "def warps(n):\n    return (n + 31) // 32",
    "out = np.zeros_like(a)\nout[0] = 1\nresult = {}\nresult['x'] = 2",
    "@cuda.jit\ndef k(a, out):\n    i = cuda.grid(1)\n    if i < out.size:\n        out[i] = a[i]",
    "import math\nimport numpy as np\nx = np.float32(math.pi)",
    "%%time\nx = 1",
    "globals()['helper'] = 3",
    "def f(:\n",  # a syntax error is its own verdict when it runs
    "import numpy as np\nfrom gpucourse.measure import runtime",  # the same imports as the lab's setup cell
    "for layer in net.modules():\n    pass",
    "def g(np_like):\n    np = np_like\n    return np",  # a local name, not the notebook's
])
def test_ordinary_code_is_not_tampering(code):
    assert scan_learner_code(code, {"np", "check", "cuda"}, LOCKED) == ([], [])


# Changes the scan cannot recognise (it reads patterns, not meaning): each makes a wrong answer pass
# NumPy's check, unless hidden tests run against the snapshot the grader's header took.
UNSEEN_TAMPERING = {
    "alias": "m = np\nm.allclose = lambda *a, **k: True",
    "vars": "import operator\noperator.setitem(vars(np), 'allclose', lambda *a, **k: True)",
    "list": "fns = [np]\nfns[0].allclose = lambda *a, **k: True",
    "default argument": "def helper(m=np):\n    m.allclose = lambda *a, **k: True\n\n\nhelper()",
    "starred setattr": "setattr(*[np, 'allclose', lambda *a, **k: True])",
    "function code": ("code, fn = '__co' + 'de__', textwrap.indent\n"
                      "setattr(fn, code, getattr(lambda *a, **k: 'right', code))"),
    "builtins": "import operator\nb = vars(operator)['__builtins__']\nb['all'] = lambda *a: True",
    "rebound name": ("g = globals()\n"
                     "g.update(np=type('N', (), {'allclose': staticmethod(lambda *a, **k: True),\n"
                     "                           'zeros': staticmethod(abs), 'ones': staticmethod(abs)}))"),
}
UNSEEN_HIDDEN = {"function code": "check(textwrap.indent('wrong', '') == 'right')",
                 "builtins": "check(all([wrong()[0] == 1]))"}

SNAPSHOT_PROBE = r'''
import json, sys, textwrap
import numpy as np
from gpucourse.tooling import grading
from gpucourse.tooling.grading import snapshot as snap

patterns, hidden_for = json.loads(sys.argv[1]), json.loads(sys.argv[2])
grading.snapshot_environment([("np", "numpy"), ("textwrap", "textwrap"), ("check", "gpucourse.tooling.grading.check")])
snapshot, result = snap._SNAPSHOT, {}
for name, code in patterns.items():
    for guarded in (False, True):
        snap._SNAPSHOT = snapshot
        snap.restore_snapshot({})  # a clean start for each case
        ns = {"np": np, "textwrap": textwrap}
        exec(code, ns)
        exec("def wrong():\n    return np.zeros(3)", ns)
        snap._SNAPSHOT = snapshot if guarded else None
        try:
            grading.run_hidden_tests(hidden_for.get(name, "check(np.allclose(wrong(), np.ones(3)))"), ns)
            result[f"{name}, {guarded}"] = "passed"
        except grading.HiddenTestFailed:
            result[f"{name}, {guarded}"] = "failed"
print(json.dumps(result))
'''


# names built at run time (``getattr(fn, code)``, ``vars(m)['__builtins__']``): the scan flags them now, the
# snapshot puts them back all the same (next test)
SEEN_SINCE = {"function code", "builtins"}


@pytest.mark.parametrize("name", sorted(SEEN_SINCE))
def test_the_scan_now_sees_names_built_at_run_time(name):
    tampering, _ = scan_learner_code(UNSEEN_TAMPERING[name], {"np", "check", "textwrap"}, LOCKED)
    assert tampering, name


@pytest.mark.parametrize("name", sorted(set(UNSEEN_TAMPERING) - SEEN_SINCE))
def test_the_scan_does_not_see_these_changes(name):
    tampering, _ = scan_learner_code(UNSEEN_TAMPERING[name], {"np", "check", "textwrap"}, LOCKED)
    assert not tampering, name  # so grading must not rely on the scan for them (next test)


def test_hidden_tests_run_against_the_headers_snapshot_whatever_the_submission_changed():
    """Each change makes a wrong answer pass its hidden test without the snapshot (so the case is
    real), and fail with it."""
    done = subprocess.run([sys.executable, "-c", SNAPSHOT_PROBE, json.dumps(UNSEEN_TAMPERING),
                           json.dumps(UNSEEN_HIDDEN)], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    for name in UNSEEN_TAMPERING:
        assert result[f"{name}, False"] == "passed", (name, "the change does not cheat: a useless case")
        assert result[f"{name}, True"] == "failed", (name, "the wrong answer passed despite the snapshot")


HEADER_PROBE = r"""
import json, sys
exec(open(sys.argv[1]).read())  # as IPython runs a startup file: in the notebook's namespace
from gpucourse.tooling.grading import snapshot
left = sorted(name for name in globals() if name.startswith("_gpucourse"))
import gc
frozen = gc.get_freeze_count()
cycle = []
cycle.append(cycle)
del cycle
print(json.dumps({"bindings": sorted(snapshot._SNAPSHOT["bindings"]), "left": left, "frozen": frozen,
                  "collects": gc.isenabled() and gc.collect() >= 1}))
"""


@pytest.mark.parametrize("lab", lab_names())
def test_the_header_snapshots_each_labs_imports(lab, tmp_path):
    """The grader's header runs, in a fresh interpreter, with what each lab's locked cells import
    (a library object whose attribute access raises must not stop it), reports "ok", binds every
    imported name and leaves nothing in the notebook's namespace."""
    nb = to_notebook(ROOT / "solutions" / lab / f"{lab}.py")
    locked = imported_names(c.source for c in nb.cells if c.cell_type == "code"
                            and c.metadata.get("nbgrader", {}).get("locked")
                            and c.metadata.get("nbgrader", {}).get("grade_id"))
    header_room.write_header(tmp_path, [[name, what] for name, what in locked.items()])
    header = tmp_path / "home/.ipython/profile_default/startup/00-gpucourse-grader.py"
    done = subprocess.run([sys.executable, "-c", HEADER_PROBE, str(header)], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-2000:]
    assert (tmp_path / header_room.HEADER_STATUS).read_text() == "ok"
    assert header_room.header_note(tmp_path) is None
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["bindings"] == sorted(locked) and result["left"] == [], result
    # the header freezes what it loaded (issue 50: fewer objects for each full collection to walk), and the
    # learner's own garbage is still collected
    assert result["frozen"] > 10_000 and result["collects"] is True, result


def test_the_snapshot_sets_off_no_collection_and_leaves_the_collector_as_it_found_it():
    """Its ~150,000 new tuples would set off a full collection of every library's objects, about 0.15 s of each
    grading kernel's start (issue 50): the collector is off while it is taken, then as it was."""
    code = ("import gc, json\nfrom gpucourse.tooling import grading\nimport numpy, pandas\nstarted = []\n"
            "gc.callbacks.append(lambda phase, info: phase == 'start' and started.append(info['generation']))\n"
            "grading.snapshot_environment([('np', 'numpy')])\non = gc.isenabled()\ngc.disable()\n"
            "grading.snapshot_environment([])\nprint(json.dumps([started, on, gc.isenabled()]))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert json.loads(done.stdout.strip().splitlines()[-1]) == [[], True, False], done.stderr[-2000:]


def test_the_snapshot_survives_objects_whose_attributes_raise(tmp_path):
    """As numba's CUDA driver object does without a driver: any attribute access raises."""
    (tmp_path / "touchy.py").write_text(
        "class Raising:\n    def __getattr__(self, name):\n        raise RuntimeError('no driver')\n\n\n"
        "class Holder:\n    member = Raising()\n\n    def method(self):\n        return 1\n\n\n"
        "driver = Raising()\n")
    code = ("import touchy\nfrom gpucourse.tooling import grading\n"
            "grading.snapshot_environment([('touchy', 'touchy')])\n"
            "touchy.Holder.method = lambda self: 2\ngrading.snapshot.restore_snapshot({})\n"
            "assert touchy.Holder().method() == 1\nprint('ok')\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(tmp_path)])})
    assert done.stdout.strip() == "ok", done.stderr[-2000:]


def test_check_passes_only_a_real_true():
    import numpy as np

    check(np.bool_(True))
    check(np.array([1, 2]).sum() == 3)
    for not_a_bool in (1, "yes", [0], np.array([True, True]), object()):
        with pytest.raises(HiddenTestFailed):
            check(not_a_bool)
    with pytest.raises(HiddenTestFailed):
        check(lambda: "True")


class _AlwaysEqual:
    """What a submission could return to pass every ``==`` check."""

    def __eq__(self, other):
        return self  # truthy, not a bool

    __hash__ = None


def test_a_comparison_that_returns_no_bool_fails():
    with pytest.raises(HiddenTestFailed):
        check(_AlwaysEqual() == 3)


CUSTOM_EQ_PROBE = r"""
import json
from gpucourse.tooling import grading
grading.snapshot_environment([])
cases = {
    "custom __eq__": "class R:\n    def __eq__(self, other):\n        return True\n    __hash__ = None\n"
                     "def answer():\n    return R()",
    "lambda __eq__ made in the function": "def answer():\n    return type('R', (), {'__eq__': lambda s, o: True})()",
    "a builtin as __eq__": "class R(int):\n    __eq__ = int.__ne__\n    __hash__ = int.__hash__\n"
                          "def answer():\n    return R(5)",
    "a dataclass (honest)": "from dataclasses import dataclass\n@dataclass\nclass R:\n    x: int\n"
                            "def answer():\n    return 6",
    "plain value (honest)": "def answer():\n    return 6",
}
result = {}
for name, code in cases.items():
    grading.snapshot._SNAPSHOT["classes"] = {id(c) for c in grading.snapshot._all_classes()}  # a clean start
    ns = {"__name__": "__main__"}
    exec(compile(code, "/tmp/ipykernel_0/cell.py", "exec"), ns)
    try:
        grading.run_hidden_tests("check(answer() == 6)", ns)
        result[name] = "passed"
    except grading.HiddenTestFailed:
        result[name] = "failed"
print(json.dumps(result))
"""


def test_results_that_decide_their_own_comparisons_fail_hidden_tests():
    done = subprocess.run([sys.executable, "-c", CUSTOM_EQ_PROBE], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result == {"custom __eq__": "failed", "lambda __eq__ made in the function": "failed",
                      "a builtin as __eq__": "failed", "a dataclass (honest)": "passed",
                      "plain value (honest)": "passed"}, result


CHECKERS_MODULE = """
def _make(tolerance):
    def close(a, b):
        return abs(a - b) <= tolerance

    return close


close = _make(1e-6)


def within(a, b, tolerance=1e-6):
    return abs(a - b) <= tolerance


class Exact:
    def __init__(self, value):
        self.value = value

    def __eq__(self, other):
        return self.value == other.value if isinstance(other, Exact) else NotImplemented
"""
CHECKERS_PROBE = r"""
import checkers, json, sys
from gpucourse.tooling import grading
grading.snapshot_environment([("checkers", "checkers")])
changes = {
    "closure cell": "cell = getattr(checkers.close, '__clo' + 'sure__')[0]\ncell.cell_contents = 1e9",
    "default argument value": "setattr(checkers.within, '__defa' + 'ults__', (1e9,))",
    "builtin constant": "vars(checkers)['__builtins__']['NotImplemented'] = True",
}
hidden = {"closure cell": "check(checkers.close(0, 5))", "default argument value": "check(checkers.within(0, 5))",
          "builtin constant": "check(checkers.Exact(6) == 5)"}
result = {}
for name, code in changes.items():
    grading.snapshot.restore_snapshot({})
    ns = {"checkers": checkers}
    exec(code, ns)
    result[name + ", works unguarded"] = bool(eval(hidden[name][6:-1], ns))
    try:
        grading.run_hidden_tests(hidden[name], ns)
        result[name] = "passed"
    except grading.HiddenTestFailed:
        result[name] = "failed"
print(json.dumps(result))
"""


def test_the_snapshot_restores_closure_cells_defaults_and_builtin_constants(tmp_path):
    """Checkers that keep their tolerance in a closure or a default, or compare through a builtin
    constant (``NotImplemented``): changing any would make them accept anything (changes the scan does
    not see: the names are computed or reached through a module's ``__builtins__``)."""
    (tmp_path / "checkers.py").write_text(CHECKERS_MODULE)
    done = subprocess.run([sys.executable, "-c", CHECKERS_PROBE], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(tmp_path)])})
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result == {"closure cell, works unguarded": True, "closure cell": "failed",
                      "default argument value, works unguarded": True, "default argument value": "failed",
                      "builtin constant, works unguarded": True, "builtin constant": "failed"}, result


def test_reaches_package_follows_the_notebooks_functions():
    from gpucourse.tooling.grading import reaches_package

    ns = {}
    exec("import gpucourse.lessons.occupancy.calculator as occ\n"
         "def direct(t):\n    return occ.occupancy(t, 32, 0, (9, 0))\n"
         "def helper(t):\n    return direct(t)\n"
         "def by_hand(t):\n    return min(t // 32, 64)\n"
         "def sneaky(t):\n    return __import__('gpu' + 'course')\n", ns)
    assert reaches_package(ns["direct"]) and reaches_package(ns["helper"]) and reaches_package(ns["sneaky"])
    assert not reaches_package(ns["by_hand"]) and not reaches_package(len)


def test_a_header_that_failed_or_never_ran_is_reported(tmp_path):
    assert "did not run" in header_room.header_note(tmp_path)
    (tmp_path / header_room.HEADER_STATUS).write_text("CudaSupportError: no driver")
    assert "CudaSupportError" in header_room.header_note(tmp_path)


def test_redefining_a_lab_helper_the_tests_use_is_tampering():
    """Lab 00a's hole: `floats` redefined to return zeros made a kernel that writes 10 pass `out == a + 10`."""
    setup = "def floats(*shape):\n    return 1\n\ndef show(kernel):\n    pass\n\nclass Data:\n    pass\n"
    graded = ["out = floats(4)\nassert (out == Data()).all()"]
    helpers = lab_helpers([setup], graded)
    assert helpers == {"floats", "Data"}  # `show` is never used by a graded cell: a learner may reuse the name
    for code in ("def floats(*shape):\n    return 0", "floats = lambda *s: 0", "globals()['floats'] = print",
                 "def f():\n    global floats\n    floats = print"):
        tampering, _ = scan_learner_code(code, {"np"}, {}, helpers)
        assert tampering and "floats" in tampering[0], code
    assert scan_learner_code("def show(x):\n    pass\nresult = floats(3)", {"np"}, {}, helpers) == ([], [])


def test_redefining_check_is_only_noted():
    tampering, notes = scan_learner_code("def check(*args):\n    pass", {"np"})
    assert not tampering and notes and "`check`" in notes[0]


def test_kernel_environment_is_scrubbed(monkeypatch, tmp_path):
    monkeypatch.setenv("JUPYTERHUB_API_TOKEN", "secret-token")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret-key")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    env = kernel_environment(tmp_path)
    assert "secret-token" not in json.dumps(env) and "secret-key" not in json.dumps(env)
    assert env["CUDA_VISIBLE_DEVICES"] == "0"
    assert Path(env["HOME"]).is_relative_to(tmp_path) and Path(env["TMPDIR"]).is_dir()
    assert env["PYTHONWARNINGS"] == "ignore"  # a warning on stderr would cost a correct test cell its points


@pytest.mark.skipif(not landlock_abi(), reason="this Linux kernel has no Landlock (grading then runs unsandboxed "
                                                "and says so)")
def test_the_sandbox_hides_everything_but_the_notebook_folder(tmp_path):
    course = tmp_path / "course"
    notebook_dir = course / "autograded" / "alice" / "lab01_warps"
    notebook_dir.mkdir(parents=True)
    (course / "gradebook.db").write_text("secret gradebook")
    private = tmp_path / "private"
    private.mkdir()
    probe = r'''
import os, sys
from pathlib import Path
import gpucourse.tooling.grading  # the library is readable
report = {}
for name, path in [("gradebook", sys.argv[1]), ("solutions", sys.argv[2]), ("own folder", "mine.txt")]:
    try:
        Path(path).read_text() if name != "own folder" else Path(path).write_text("ok")
        report[name] = "allowed"
    except OSError as exc:
        report[name] = type(exc).__name__
try:
    os.kill(os.getppid(), 0)
    report["signal grader"] = "allowed"
except OSError as exc:
    report["signal grader"] = type(exc).__name__
print(report)
'''
    spec = sandbox_paths(notebook_dir, private, protected=[course])
    argv = [sys.executable, "-c", probe, str(course / "gradebook.db"),
            str(ROOT / "solutions" / "lab01_warps" / "lab01_warps.py")]
    done = subprocess.run(sandbox_command(argv, spec), cwd=notebook_dir, capture_output=True, text=True,
                          env=kernel_environment(private), timeout=120)
    assert done.returncode == 0, done.stderr
    report = eval(done.stdout.strip().splitlines()[-1])
    assert report["gradebook"] == "PermissionError" and report["solutions"] == "PermissionError", report
    assert report["own folder"] == "allowed", report
    if landlock_abi() >= 6:
        assert report["signal grader"] == "PermissionError", report
    assert not any(str(course) == p or str(ROOT) == p for p in spec["read"])


# Landlock stacks at most 16 rulesets: a process that already carries 16 cannot add the grader's,
# which is how "Landlock is there but could not be applied" happens for real in this test.
SIXTEEN_LAYERS = r"""
import os, sys
from gpucourse.tooling import sandbox
for _ in range(16):
    sandbox._restrict_self([], ["/"], [])  # everything allowed: only the count matters
os.execv(sys.argv[1], sys.argv[1:])
"""


@pytest.mark.skipif(not landlock_abi(), reason="this Linux kernel has no Landlock")
@pytest.mark.parametrize("mode", ["auto", "required"])
def test_a_sandbox_that_cannot_be_applied_is_recorded(tmp_path, mode):
    from gpucourse.tooling.sandbox import sandbox_note

    spec = {**sandbox_paths(tmp_path, tmp_path, mode=mode), "status_file": str(tmp_path / "sandbox.json")}
    kernel = [sys.executable, "-c", "print('kernel ran')"]
    done = subprocess.run([sys.executable, "-c", SIXTEEN_LAYERS, *sandbox_command(kernel, spec)],
                          capture_output=True, text=True, timeout=120, env=kernel_environment(tmp_path))
    if mode == "required":
        assert done.returncode == 70 and "kernel ran" not in done.stdout, done
        return
    assert done.returncode == 0 and "kernel ran" in done.stdout, done.stderr
    status = json.loads((tmp_path / "sandbox.json").read_text())
    assert status["abi"] == 0 and "landlock_restrict_self" in status["error"], status
    assert "WITHOUT the Landlock sandbox" in sandbox_note(tmp_path / "sandbox.json")
    # an applied sandbox writes its ABI and no note
    done = subprocess.run(sandbox_command(kernel, spec), capture_output=True, text=True, timeout=120,
                          env=kernel_environment(tmp_path))
    assert "kernel ran" in done.stdout and json.loads((tmp_path / "sandbox.json").read_text())["abi"] > 0
    assert sandbox_note(tmp_path / "sandbox.json") is None


@pytest.mark.slow
@pytest.mark.skipif(not landlock_abi(), reason="this Linux kernel has no Landlock")
def test_the_grade_report_says_when_a_submission_ran_unsandboxed(tmp_path):
    """The batch still reports the Landlock ABI (it is there), but this grader cannot stack one more
    ruleset: each submission's row in grades.csv says it was graded without the sandbox."""
    import csv

    import test_hostile

    root = test_hostile._course(tmp_path)
    folder = root / "submitted" / "alice" / test_hostile.LAB
    folder.mkdir(parents=True)
    nbformat.write(to_notebook(root / "solutions" / test_hostile.LAB / f"{test_hostile.LAB}.py"),
                   folder / f"{test_hostile.LAB}.ipynb")
    grade = ("import os, sys; from gpucourse.tooling import sandbox\n"
             "for _ in range(16):\n    sandbox._restrict_self([], ['/'], [])\n"
             "from gpucourse.tooling.grading import grade_all\nsys.exit(grade_all(sys.argv[1], jobs=1, quiet=True))\n")
    done = subprocess.run([sys.executable, "-c", grade, str(root)], cwd=root, capture_output=True, text=True,
                          timeout=600, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stdout + done.stderr
    assert "sandbox: Landlock ABI" in done.stdout
    with open(root / "grades.csv") as handle:
        row = next(csv.DictReader(handle))
    assert "WITHOUT the Landlock sandbox" in row["note"], row
    assert float(row["score"]) == 6, row  # graded all the same


def _autograded_notebook() -> nbformat.NotebookNode:
    visible_error = new_output("error", ename="AssertionError", evalue="f(1) should be 2",
                               traceback=["Traceback", "----> 2 assert f(1) == 2, 'f(1) should be 2'"])
    hidden_error = new_output("error", ename="KeyError", evalue="7919",
                              traceback=["----> 4 for x in [7919, 104729]:", "KeyError: 7919"])
    test = new_code_cell(guard_hidden_tests(TEST_CELL), outputs=[new_output("stream", name="stdout",
                                                                            text="called with 7919\n"),
                                                                 hidden_error])
    test.metadata["nbgrader"] = {"grade": True, "grade_id": "ex1_test", "locked": True, "points": 2,
                                 "solution": False, "schema_version": 3, "task": False}
    visible = new_code_cell("assert f(1) == 2, 'f(1) should be 2'", outputs=[visible_error])
    visible.metadata["nbgrader"] = {**test.metadata["nbgrader"], "grade_id": "ex2_test"}
    learner = new_code_cell("def f(x):\n    print(x)", outputs=[new_output("stream", name="stdout",
                                                                           text="104729\n")])
    learner.metadata["nbgrader"] = {"grade": False, "grade_id": "ex1_solution", "locked": False,
                                    "solution": True, "schema_version": 3, "task": False}
    timed_out = new_code_cell("spin()", outputs=[])
    add_note(timed_out, "TimeLimitExceeded", "this cell ran longer than its 120 s limit")
    nb = new_notebook(cells=[new_markdown_cell("# lab"), learner, test, visible, timed_out])
    nb.metadata["gpucourse"] = {"summary": ["ex9_test — TimeLimitExceeded: <b>stopped</b>"]}
    return nb


def test_feedback_shows_verdicts_not_hidden_tests():
    nb, _ = grading.SanitizeFeedback().preprocess(_autograded_notebook(), {})
    text = nbformat.writes(nb)
    for leak in ("7919", "104729", "BEGIN HIDDEN", "run_hidden_tests", "----> "):
        assert leak not in text, leak
    cells = {c.metadata.get("nbgrader", {}).get("grade_id"): c for c in nb.cells}
    assert [o.ename for o in cells["ex1_test"].outputs] == ["HiddenTestFailed"]  # it names a hidden input
    assert cells["ex2_test"].outputs[0].evalue == "f(1) should be 2"  # a visible failure keeps its message
    assert cells["ex1_solution"].outputs == []  # outputs of the learner's own cells are not repeated
    assert "TimeLimitExceeded" in json.dumps(nb.cells[-1].outputs)
    assert "How to read this feedback" in nb.cells[0].source and "\\<b\\>" in nb.cells[0].source


def test_hidden_test_failure_in_feedback_is_generic():
    nb = _autograded_notebook()
    nb.cells[2].outputs = [new_output("error", ename="HiddenTestFailed", evalue="anything",
                                      traceback=["HiddenTestFailed: anything"])]
    nb, _ = grading.SanitizeFeedback().preprocess(nb, {})
    assert nb.cells[3].outputs[0].evalue == GENERIC_FAILURE


def test_a_refused_answer_says_why_in_feedback():
    """A refusal (not plain data, a forbidden call) is one line the feedback keeps: it holds no hidden data."""
    nb = _autograded_notebook()
    reason = "exact fractions round for you"  # declared in the hidden block: its words are the block's own
    nb.cells[2].source = guard_hidden_tests(TEST_CELL.replace(
        "### BEGIN HIDDEN TESTS\n", f"### BEGIN HIDDEN TESTS\nFORBIDDEN = {{'fractions:Fraction': {reason!r}}}\n"))
    why = f"your code called what this exercise forbids: fractions:Fraction: {reason}"
    nb.cells[2].outputs = [new_output("error", ename="HiddenTestRefused", evalue=why,
                                      traceback=[f"HiddenTestRefused: {why}"])]
    nb, _ = grading.SanitizeFeedback().preprocess(nb, {})
    assert nb.cells[3].outputs[0].evalue == why


def test_nbgrader_configuration():
    from traitlets.config.loader import PyFileConfigLoader

    config = PyFileConfigLoader("nbgrader_config.py", path=str(ROOT)).load_config()
    assert config.Execute.timeout >= 60 and config.Execute.raise_on_iopub_timeout is False
    # deleted locked cells are put back by RestoreLockedCells, before OverwriteCells; nbgrader's own
    # add_missing_cells fails a submission whose deleted test follows a locked cell that is not graded
    sanitize = config.Autograde.sanitize_preprocessors
    assert config.OverwriteCells.add_missing_cells is False
    assert sanitize.index("gpucourse.tooling.grading.RestoreLockedCells") < sanitize.index(
        "nbgrader.preprocessors.OverwriteCells")
    assert "gpucourse.tooling.grading.GuardedExecute" in config.Autograde.autograde_preprocessors
    assert "gpucourse.tooling.grading.GuardSubmission" in config.Autograde.sanitize_preprocessors
    assert "gpucourse.tooling.grading.SanitizeFeedback" in config.GenerateFeedback.preprocessors
    assert Path(config.IncludeHeaderFooter.header) == ROOT / "instructor" / "header.ipynb"
    for name in ("RestoreLockedCells", "GuardSubmission", "GuardedExecute", "FinalizeGrades", "SanitizeFeedback"):
        assert isinstance(getattr(grading, name), type)


def test_the_header_opens_every_released_lab():
    header = nbformat.read(ROOT / "instructor" / "header.ipynb", as_version=4)
    assert [c.cell_type for c in header.cells] == ["markdown"]
    assert "120 s" in header.cells[0].source
    for lab in lab_names():
        released = nbformat.read(ROOT / "labs" / lab / f"{lab}.ipynb", as_version=4)
        assert released.cells[0].source == header.cells[0].source, f"labs/{lab}: run `make labs`"
        assert "How this lab works" not in to_notebook(ROOT / "solutions" / lab / f"{lab}.py").cells[0].source


def test_grade_exits_non_zero_only_when_the_grader_fails(tmp_path, monkeypatch, capsys):
    assert grading.grade_all(tmp_path) == 0  # nothing submitted: nothing to do
    (tmp_path / "solutions" / "lab01_warps").mkdir(parents=True)
    (tmp_path / "solutions" / "lab01_warps" / "lab01_warps.py").write_text("")
    for student in ("alice", "bob"):
        (tmp_path / "submitted" / student / "lab01_warps").mkdir(parents=True)
        nbformat.write(new_notebook(), tmp_path / "submitted" / student / "lab01_warps" / "lab01_warps.ipynb")

    class FakePool:
        def __init__(self, root, jobs, name="grading", env=None):
            self.jobs = jobs

        def run(self, tasks, quiet=False):
            return {task: {"success": task[2] == "alice", "error": "nbgrader crashed"} for task in tasks}

    monkeypatch.setattr(batch, "WorkerPool", FakePool)
    monkeypatch.setattr(batch, "_ensure_assignments", lambda root, labs: [])
    monkeypatch.setattr(batch, "read_scores", lambda root: [
        {"student": "alice", "lab": "lab01_warps", "cell": "ex1_test", "score": 2.0, "max_score": 2.0}])
    assert grading.grade_all(tmp_path, jobs=2) == 1
    assert "GRADER FAILURE: lab01_warps/bob" in capsys.readouterr().err
    monkeypatch.setattr(FakePool, "run", lambda self, tasks, quiet=False: {t: {"success": True} for t in tasks})
    assert grading.grade_all(tmp_path, jobs=2) == 0
    assert "alice,lab01_warps,2.0,2.0" in (tmp_path / "grades.csv").read_text()


def test_unreadable_submissions_are_named():
    import tempfile

    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        folder = root / "submitted" / "carol" / "lab01_warps"
        folder.mkdir(parents=True)
        assert "no lab01_warps.ipynb" in grading.unreadable_reason(root, "lab01_warps", "carol")
        (folder / "lab01_warps.ipynb").write_bytes(b"\x00\x01 not json")
        assert "not a readable notebook" in grading.unreadable_reason(root, "lab01_warps", "carol")


# -- issue 32: a patched course, a displayed "score", deleted locked cells --------------------------------

COURSE_PATCH_PROBE = r"""
import json, sys
import numpy as np
import gpucourse.microscope
from gpucourse.tooling import grading
from gpucourse.tooling.grading import hidden, rewrite, snapshot
snapshot.snapshot_environment([("np", "numpy"), ("check", "gpucourse.tooling.grading.check")])
call = rewrite.guard_hidden_tests("### BEGIN HIDDEN TESTS\ncheck(answer() == 6)\n### END HIDDEN TESTS")
changes = {
    "numpy only": "np.allclose = lambda *args, **kwargs: True",
    "the way in": "tooling = sys.modules['gpucourse.tooling']\ntooling.grading = type(sys)('fake')",
    "a course check": "sys.modules['gpucourse.microscope'].check_shared_memory = print",
    "during the tests": ("def answer():\n    sys.modules['gpucourse.tooling.grading.hidden'].check = print\n"
                         "    return 6"),
}
result = {}
for name, code in changes.items():
    snapshot.restore_snapshot({})
    ns = {"np": np, "sys": sys, "answer": lambda: 6}
    exec(code, ns)
    try:
        exec(call, ns)  # the rewritten hidden block, as a test cell runs it
        result[name] = "passed"
    except hidden.GraderIntegrity as error:
        result[name] = f"GraderIntegrity: {error}"
    except Exception as error:
        result[name] = type(error).__name__
print(json.dumps(result))
"""


def test_a_change_to_the_course_itself_is_caught_at_run_time():
    """Changes the scan cannot read: one to a library (NumPy) is only put back, as before; one to the
    course's own modules, even to the package attribute a hidden block used to be reached through, or
    made by the learner's code while the hidden tests run, raises GraderIntegrity."""
    done = subprocess.run([sys.executable, "-c", COURSE_PATCH_PROBE], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["numpy only"] == "passed", result
    assert result["the way in"].startswith("GraderIntegrity") and "gpucourse.tooling.grading" in result["the way in"]
    assert "gpucourse.microscope.check_shared_memory" in result["a course check"], result
    assert "gpucourse.tooling.grading.hidden.check" in result["during the tests"], result


def _graded(grade_id: str, *outputs) -> nbformat.NotebookNode:
    cell = new_code_cell("pass", outputs=list(outputs))
    cell.metadata["nbgrader"] = {"grade": True, "grade_id": grade_id, "locked": True, "points": 2,
                                 "solution": False, "schema_version": 3, "task": False}
    cell.execution_count = 1
    return cell


def test_a_displayed_value_is_no_score_and_a_run_time_integrity_error_zeroes_the_notebook():
    """nbgrader reads a graded cell's displayed value before an error as its (partial) credit."""
    from nbgrader.utils import determine_grade

    shown = new_output("execute_result", data={"text/plain": "2.0"}, execution_count=1)
    failed = new_output("error", ename="AssertionError", evalue="f(1) should be 2", traceback=[])
    caught = new_output("error", ename="GraderIntegrity", evalue="the course's own code was changed: x", traceback=[])
    nb = new_notebook(cells=[_graded("ex1_test", shown, failed), _graded("ex2_test"), _graded("ex3_test", caught)])
    nb.metadata["gpucourse"] = {"tampering": [], "notes": []}
    assert determine_grade(nb.cells[0]) == (2, 2)  # what nbgrader alone would give
    nb, _ = grading.FinalizeGrades().preprocess(nb, {})
    assert [determine_grade(c)[0] for c in nb.cells] == [0, 0, 0]
    assert nb.cells[0].outputs[0].output_type == "display_data"  # still shown in the autograded notebook
    assert "ex3_test, at run time: the course's own code was changed" in json.dumps(nb.metadata["gpucourse"])


def test_deleted_locked_cells_are_put_back_in_their_places():
    from nbgrader.utils import compute_checksum

    from gpucourse.tooling.grading.locked import put_back_locked_cells

    def cell(grade_id, kind="code"):
        made = new_code_cell(grade_id) if kind == "code" else new_markdown_cell(grade_id)
        made.metadata["nbgrader"] = {"grade_id": grade_id}
        return made

    lab = [("setup", "code", True), ("ex1_solution", "code", False), ("ex1_show", "code", True),
           ("ex1_hint", "markdown", True), ("ex1_test", "code", True), ("ex2_solution", "code", False),
           ("ex2_test", "code", True)]
    points = {"ex1_test": 2.0, "ex2_test": 1.0}
    source_cells = [(g, kind, locked, f"source of {g}", None) for g, kind, locked in lab]
    nb = new_notebook(cells=[cell("ex2_solution"), cell("ex1_solution"), cell("ex1_show")])  # moved, deleted
    assert put_back_locked_cells(nb, source_cells, points) == ["setup", "ex1_hint", "ex1_test", "ex2_test"]
    assert [c.metadata["nbgrader"]["grade_id"] for c in nb.cells] == [
        "setup", "ex2_solution", "ex2_test", "ex1_solution", "ex1_show", "ex1_hint", "ex1_test"]
    test = nb.cells[-1]
    assert test.source == "source of ex1_test" and test.metadata["nbgrader"]["points"] == 2.0
    assert nb.cells[-2].cell_type == "markdown" and not nb.cells[-2].metadata["nbgrader"]["grade"]
    # as nbgrader saved it: OverwriteCells compares this checksum with the cell's own
    source_cells = [(g, kind, locked, f"source of {g}", compute_checksum(made)) for (g, kind, locked), made in
                    zip(lab, [_as_saved(g, kind, locked, points) for g, kind, locked in lab])]
    nb = new_notebook(cells=[cell("ex1_solution"), cell("ex2_solution")])
    put_back_locked_cells(nb, source_cells, points)
    for made in nb.cells:
        if "checksum" in made.metadata["nbgrader"]:
            assert compute_checksum(made) == made.metadata["nbgrader"]["checksum"], made.metadata


def _as_saved(grade_id, kind, locked, points):
    made = new_code_cell(f"source of {grade_id}") if kind == "code" else new_markdown_cell(f"source of {grade_id}")
    made.metadata["nbgrader"] = {"grade": grade_id in points, "grade_id": grade_id, "locked": locked,
                                 "solution": not locked, "points": points.get(grade_id, 0)}
    return made


def test_reaches_package_sees_through_functools_partial_and_cache():
    """A notebook's name bound to functools.partial(course_fn) (or a cache of it, or a bound method) is the
    course's code, called directly or from a helper of the notebook."""
    from gpucourse.tooling.grading import reaches_package

    ns = {}
    exec("import functools\nfrom gpucourse.lessons.attention import model as _m\n"
         "wrapped = functools.partial(getattr(_m, 'naive_' + 'bytes'))\n"
         "cached = functools.cache(getattr(_m, 'naive_' + 'bytes'))\n"
         "del _m\n"
         "def helper(n, d):\n    return wrapped(n, d)\n"
         "def by_hand(n, d):\n    return (4 * n * d + 4 * n * n) * 2\n"
         "mine = functools.partial(by_hand, 64)\n", ns)
    assert reaches_package(ns["wrapped"]) and reaches_package(ns["cached"]) and reaches_package(ns["helper"])
    assert not reaches_package(ns["by_hand"]) and not reaches_package(ns["mine"])
