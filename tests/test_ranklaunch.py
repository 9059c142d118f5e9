"""The rank launcher of lessons 09 and 10 (gpucourse.measure.ranklaunch): the rendezvous settings, a time limit that
stops every rank, and a failure said in one line by the rank's own exception, not a peer's teardown. Plain
Python processes stand in for torch ranks (the gloo runs are in test_collectives_gloo and test_dataparallel)."""

import sys
import time

import pytest

from gpucourse.errors import CourseError
from gpucourse.measure import ranklaunch

PY = sys.executable


def test_windows_and_address_settings(monkeypatch):
    monkeypatch.setattr(ranklaunch.sys, "platform", "win32")
    env = ranklaunch.rank_env(12345)
    assert env["USE_LIBUV"] == "0" and env["MASTER_ADDR"] == "127.0.0.1" and env["MASTER_PORT"] == "12345"
    assert env["OMP_NUM_THREADS"] == "1"
    monkeypatch.setattr(ranklaunch.sys, "platform", "linux")
    assert "USE_LIBUV" not in ranklaunch.rank_env(1) or ranklaunch.os.environ.get("USE_LIBUV")


def test_a_failed_rank_is_explained_by_its_python_exception_not_its_teardown():
    # CI once saw "terminate called without an active exception" (a rank torn down after its peer left)
    # in place of the learner's own error, which stood two lines above it
    text = ("Traceback (most recent call last):\n  File \"ring.py\", line 2\n"
            "RuntimeError: my ring is broken\nterminate called without an active exception\n")
    assert ranklaunch.reason(text, -6) == "RuntimeError: my ring is broken"
    assert ranklaunch.reason("terminate called without an active exception\n", -6).startswith("terminate")
    assert ranklaunch.reason("", 3) == "exit 3"
    # torch writes a rank's uncaught exception as "[rank1]: RuntimeError: …" (1 run in 8 was misreported)
    prefixed = ("[rank1]: Traceback (most recent call last):\n[rank1]: RuntimeError: my ring is broken\n"
                "terminate called without an active exception\n")
    assert ranklaunch.reason(prefixed, -6) == "RuntimeError: my ring is broken"
    # lesson 10's ranks print a CourseError as "error: …"
    assert ranklaunch.reason("error: your Reducer failed: KeyError: 3\nterminate called\n", 2) == \
        "error: your Reducer failed: KeyError: 3"


def test_the_rank_that_raised_is_named_even_when_a_peer_aborts_first(tmp_path):
    # rank 1 writes its exception and is still tearing down (it never exits: killed after the grace); only
    # then does rank 0 abort with "terminate called …", like gloo after its peer left. Ordered by a file,
    # not by sleeps, so a busy machine cannot swap them
    flag = tmp_path / "raised"
    raises = ("import sys, time, pathlib; sys.stderr.write(\"ValueError: the learner's own mistake\\n\"); "
              f"sys.stderr.flush(); pathlib.Path({str(flag)!r}).touch(); time.sleep(600)")
    abort = (f"import sys, time, pathlib\nwhile not pathlib.Path({str(flag)!r}).exists(): time.sleep(0.01)\n"
             "sys.stderr.write('terminate called without an active exception\\n'); sys.exit(134)")
    with pytest.raises(ranklaunch.LaunchError, match=r"^rank 1 of two ranks failed: ValueError: the learner's") as info:
        ranklaunch.run([[PY, "-c", abort], [PY, "-c", raises]], timeout_s=120, what="two ranks")
    assert isinstance(info.value, CourseError) and "\n" not in str(info.value)


def test_a_course_error_line_is_said_without_its_prefix():
    course = "import sys; sys.stderr.write('error: your Reducer failed: KeyError: 3\\n'); sys.exit(2)"
    with pytest.raises(ranklaunch.LaunchError, match=r"^rank 0 of r failed: your Reducer failed: KeyError: 3$"):
        ranklaunch.run([[PY, "-c", course], [PY, "-c", "pass"]], timeout_s=60, what="r")


def test_a_hanging_rank_is_stopped_at_the_limit_with_every_other():
    start = time.monotonic()
    hang = "import time; time.sleep(600)"
    with pytest.raises(ranklaunch.LaunchError, match="did not finish within 1 s: every rank was stopped"):
        ranklaunch.run([[PY, "-c", hang], [PY, "-c", hang]], timeout_s=1, what="two ranks")
    assert time.monotonic() - start < 30


def test_each_rank_gets_the_rendezvous_and_its_own_variables(tmp_path):
    show = ("import os, sys; open(sys.argv[1], 'w').write(' '.join(os.environ[k] for k in "
            "('MASTER_ADDR', 'RANK', 'OMP_NUM_THREADS')))")
    ranklaunch.run([[PY, "-c", show, str(tmp_path / f"r{r}")] for r in range(2)], timeout_s=60, what="env",
                   rank_envs=[{"RANK": "0"}, {"RANK": "1"}])
    assert [(tmp_path / f"r{r}").read_text() for r in range(2)] == ["127.0.0.1 0 1", "127.0.0.1 1 1"]


def test_a_port_taken_meanwhile_is_tried_once_more(monkeypatch):
    calls = []

    def once(commands, timeout_s, what, rank_envs):
        calls.append(what)
        if len(calls) == 1:
            raise ranklaunch.LaunchError("rank 0 of x failed: RuntimeError: EADDRINUSE")
    monkeypatch.setattr(ranklaunch, "_run_once", once)
    ranklaunch.run([[PY]], timeout_s=1, what="x")
    assert calls == ["x", "x"]


def test_a_lean_start_imports_this_course_without_its_packages_init(tmp_path):
    # issue 50: rank processes imported every lesson's charts, widgets and pandas through the packages' __init__;
    # the lean start must still import this very copy of the course (a worktree, a mutation copy), submodules
    # of every package, and the grader's tripwire that still tells the course's code from the learner's
    program = ranklaunch.lean_start(
        "import json, sys\n"
        "import gpucourse\n"
        "from gpucourse.lessons.collectives import distworker\n"
        "from gpucourse.tooling.grading import tripwire\n"
        "from gpucourse.errors import CourseError\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('pandas', 'numba', 'plotly', 'ipywidgets')\n"
        "               or m in ('gpucourse.measure.runtime', 'gpucourse.lessons.collectives.figures'))\n"
        "print(json.dumps({'distworker': distworker.__file__, 'errors': sys.modules['gpucourse.errors'].__file__,\n"
        "                  'course_is_learner': tripwire.is_learner_code(distworker.main.__code__),\n"
        "                  'launcher_is_course': issubclass(distworker.LaunchError, CourseError),\n"
        "                  'heavy': heavy, 'path': gpucourse.__path__}))\n")
    import json
    import subprocess

    from gpucourse.lessons.collectives import distworker

    done = subprocess.run([PY, "-c", program], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)
    assert got["distworker"] == distworker.__file__ and got["path"] == [str(ranklaunch.COURSE_DIR)]
    assert got["errors"] == str(ranklaunch.COURSE_DIR / "errors.py")
    assert got["course_is_learner"] is False and got["launcher_is_course"] is True
    assert got["heavy"] == []
    # the lessons' rank programs start lean
    from gpucourse.lessons.dataparallel import experiments

    preamble = ranklaunch.lean_start("")
    for start in (experiments.START, experiments.GUARDED_START, distworker.RANK_START):
        assert start.startswith(preamble) and "import sys" in start[len(preamble):]
