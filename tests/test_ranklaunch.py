"""The rank launcher of lessons 09 and 10 (gpucourse.measure.ranklaunch): the rendezvous settings, a time limit that
stops every rank, and a failure said in one line by the rank's own exception, not a peer's teardown. Plain
Python processes stand in for torch ranks (the gloo runs are in test_collectives_gloo and test_dataparallel).
Each behaviour holds both ways a rank starts: a process of its own, and forked from one parent that imported
the ``preload`` module (Linux; ``colorsys`` here: a module no bare ``python -c`` imports)."""

import json
import os
import re
import sys
import time
from pathlib import Path

import pytest

from gpucourse.errors import CourseError
from gpucourse.measure import ranklaunch

PY = sys.executable
# each way a rank starts: a process of its own (no preload), forked from a parent that imported colorsys (Linux)
STARTS = [None, pytest.param("colorsys", marks=pytest.mark.skipif(sys.platform != "linux", reason="forks on Linux"))]


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


@pytest.mark.parametrize("preload", STARTS)
def test_the_rank_that_raised_is_named_even_when_a_peer_aborts_first(tmp_path, preload):
    # rank 1 writes its exception and is still tearing down (it never exits: killed after the grace); only
    # then does rank 0 abort with "terminate called …", like gloo after its peer left. Ordered by a file,
    # not by sleeps, so a busy machine cannot swap them
    flag = tmp_path / "raised"
    raises = ("import os, sys, time, pathlib; sys.stderr.write(\"ValueError: the learner's own mistake\\n\"); "
              f"sys.stderr.flush(); pathlib.Path({str(flag)!r}).write_text(f'{{os.getpid()}} {{os.getppid()}}'); "
              "time.sleep(600)")
    abort = (f"import sys, time, pathlib\nwhile not pathlib.Path({str(flag)!r}).exists(): time.sleep(0.01)\n"
             "sys.stderr.write('terminate called without an active exception\\n'); sys.exit(134)")
    with pytest.raises(ranklaunch.LaunchError, match=r"^rank 1 of two ranks failed: ValueError: the learner's") as info:
        ranklaunch.run([[PY, "-c", abort], [PY, "-c", raises]], timeout_s=120, what="two ranks",
                       preload=preload)
    assert isinstance(info.value, CourseError) and "\n" not in str(info.value)
    # rank 1 (and a forking parent) was stopped with the run: no process of it is left
    pids = {int(pid) for pid in flag.read_text().split()} - {os.getpid()}
    assert len(pids) == (2 if preload else 1)
    deadline = time.monotonic() + 60  # killed: each ends as soon as the kernel delivers the signal
    while not all(map(_gone, pids)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert all(map(_gone, pids)), [pid for pid in pids if not _gone(pid)]


def _gone(pid: int) -> bool:
    if sys.platform != "linux":
        return True  # read from /proc
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return True
    return "\nState:\tZ" in status  # ended, not yet reaped by whoever inherited it


@pytest.mark.parametrize("preload", STARTS)
def test_a_course_error_line_is_said_without_its_prefix(preload):
    course = "import sys; sys.stderr.write('error: your Reducer failed: KeyError: 3\\n'); sys.exit(2)"
    with pytest.raises(ranklaunch.LaunchError, match=r"^rank 0 of r failed: your Reducer failed: KeyError: 3$"):
        ranklaunch.run([[PY, "-c", course], [PY, "-c", "pass"]], timeout_s=60, what="r", preload=preload)


@pytest.mark.parametrize("preload", STARTS)
def test_a_hanging_rank_is_stopped_at_the_limit_with_every_other(preload):
    start = time.monotonic()
    hang = "import time; time.sleep(600)"
    with pytest.raises(ranklaunch.LaunchError, match="did not finish within 1 s: every rank was stopped"):
        ranklaunch.run([[PY, "-c", hang], [PY, "-c", hang]], timeout_s=1, what="two ranks", preload=preload)
    assert time.monotonic() - start < 30


@pytest.mark.parametrize("preload", STARTS)
def test_each_rank_gets_the_rendezvous_and_its_own_variables(tmp_path, preload):
    show = ("import os, sys; open(sys.argv[1], 'w').write(' '.join(os.environ[k] for k in "
            "('MASTER_ADDR', 'RANK', 'OMP_NUM_THREADS')))")
    ranklaunch.run([[PY, "-c", show, str(tmp_path / f"r{r}")] for r in range(2)], timeout_s=60, what="env",
                   rank_envs=[{"RANK": "0"}, {"RANK": "1"}], preload=preload)
    assert [(tmp_path / f"r{r}").read_text() for r in range(2)] == ["127.0.0.1 0 1", "127.0.0.1 1 1"]


def test_a_port_taken_meanwhile_is_tried_once_more(monkeypatch):
    calls = []

    def once(commands, timeout_s, what, rank_envs, preload):
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


def test_a_forked_rank_runs_its_program_as_python_c_does(tmp_path):
    # forked after the parent imported colorsys: __main__, sys.argv, no stdin, its own process; not the test's
    show = ("import json, os, sys; json.dump({'name': __name__, 'argv': sys.argv, 'stdin': sys.stdin.read(),\n"
            "  'preloaded': 'colorsys' in sys.modules, 'pid': os.getpid(), 'ppid': os.getppid(),\n"
            "  'leftover': sorted(k for k in ('spec', 'ranks', 'rank', 'entry') if k in globals())},\n"
            "  open(sys.argv[1], 'w'))")
    commands = [[PY, "-c", show, str(tmp_path / f"r{r}")] for r in range(2)]
    assert ranklaunch.forks(commands, "colorsys") is (sys.platform == "linux")
    assert not ranklaunch.forks(commands, None) and not ranklaunch.forks([["python3", "-c", "pass"]], "colorsys")
    ranklaunch.run(commands, timeout_s=60, what="show", preload="colorsys")
    got = [json.loads((tmp_path / f"r{r}").read_text()) for r in range(2)]
    assert [g["argv"] for g in got] == [["-c", str(tmp_path / f"r{r}")] for r in range(2)]
    assert all(g["name"] == "__main__" and g["stdin"] == "" and g["leftover"] == [] for g in got)
    if sys.platform == "linux":
        assert all(g["preloaded"] for g in got), "the ranks were not forked from the parent that imported colorsys"
        assert got[0]["pid"] != got[1]["pid"] and got[0]["ppid"] == got[1]["ppid"] != os.getpid()
    # without a preload each rank is a fresh Python of its own
    ranklaunch.run(commands, timeout_s=60, what="show")
    got = [json.loads((tmp_path / f"r{r}").read_text()) for r in range(2)]
    assert not any(g["preloaded"] for g in got) and all(g["ppid"] == os.getpid() for g in got)


@pytest.mark.parametrize("preload", STARTS)
@pytest.mark.parametrize(("program", "said"), [
    ("import sys; sys.exit(3)", "exit 3"),
    ("import sys; sys.exit('my own words')", "my own words"),
    ("raise KeyError('k')", "KeyError: 'k'"),
])
def test_an_exit_code_a_message_or_an_exception_is_what_fails_the_rank(preload, program, said):
    with pytest.raises(ranklaunch.LaunchError, match=f"^rank 1 of r failed: {re.escape(said)}$"):
        ranklaunch.run([[PY, "-c", "pass"], [PY, "-c", program]], timeout_s=60, what="r", preload=preload)


@pytest.mark.skipif(sys.platform != "linux", reason="forks on Linux")
def test_a_parent_that_cannot_import_its_preload_says_why():
    with pytest.raises(ranklaunch.LaunchError, match=r"^rank 0 of r failed: ModuleNotFoundError: No module named "
                                                     r"'no_such_module_here'$"):
        ranklaunch.run([[PY, "-c", "pass"], [PY, "-c", "pass"]], timeout_s=60, what="r",
                       preload="no_such_module_here")


def test_the_lessons_gloo_ranks_fork_from_one_torch_import(monkeypatch):
    from gpucourse.lessons.collectives import distworker
    from gpucourse.lessons.dataparallel import experiments

    asked = []

    def launch(commands, **kwargs):
        asked.append((kwargs["what"], kwargs.get("preload"), ranklaunch.forks(commands, kwargs.get("preload"))))
        raise ranklaunch.LaunchError("stopped here")

    monkeypatch.setattr(ranklaunch, "run", launch)
    for call in (lambda: experiments.run_ranks(["flat"]), lambda: distworker.launch("check")):
        with pytest.raises(ranklaunch.LaunchError, match="stopped here"):
            call()
    linux = sys.platform == "linux"
    assert [(preload, forked) for _, preload, forked in asked] == [("torch.distributed", linux)] * 2, asked
