"""Grading kernels forked from the template (gpucourse/tooling/grading/forkkernel.py, issue 50) are the kernels a
launch gives: the same working folder, environment, import path, arguments and flags, their own session, the same
Landlock sandbox, and nothing of the template reachable; a template a learner killed is replaced; only the
simulator's sandboxed launcher is ever forked."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

import nbformat
import pytest

from gpucourse.measure import runtime
from gpucourse.tooling.grading import forkkernel
from gpucourse.tooling.grading.execute import GuardedExecute
from gpucourse.tooling.sandbox import landlock_abi, parse_sandbox_command, sandbox_command

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="kernels are forked on Linux only")
# a grader on a GPU launches every kernel (forkkernel.forkable): these need the simulator
forking = pytest.mark.skipif(runtime.MODE != "sim", reason="kernels are forked in simulator mode only")

# What a kernel can tell of itself, as one JSON line. The gradebook sits in the course folder, which the
# sandbox protects; the kernel writes into its own notebook folder.
PROBE = r'''
import json, os, sys
from pathlib import Path
facts = {"cwd": os.getcwd(), "path": sys.path, "argv": sys.argv[1:2] + sys.argv[3:], "flags": list(sys.flags),
         "executable": sys.executable, "env": {k: v for k, v in os.environ.items() if k != "JPY_PARENT_PID"},
         "own_session": os.getsid(0) == os.getpid(), "ppid": os.getppid(), "pid": os.getpid(),
         "main": sys.modules["__main__"].__name__, "template_names": sorted({"kernel", "requests", "reap", "control",
                                                                            "wake_r"} & set(globals())),
         "fds": sorted(os.readlink(f"/proc/self/fd/{n}") for n in os.listdir("/proc/self/fd")
                       if os.path.exists(f"/proc/self/fd/{n}")),
         "grading_modules": sorted(m for m in sys.modules if m.startswith("gpucourse.tooling.grading.fork"))}
for name, attempt in [("gradebook", lambda: Path(GRADEBOOK).read_text()),
                      ("own folder", lambda: Path("mine.txt").write_text("ok"))]:
    try:
        attempt()
        facts[name] = "allowed"
    except OSError as error:
        facts[name] = type(error).__name__
# as an attacker: walk up to the template's own code (its loop is below the kernel on this stack) and ask it
# for a kernel without a sandbox
facts["template_asked"] = "no template code on the stack"
for frame in sys._current_frames().values():  # every thread's stack
    while frame is not None and "send" not in frame.f_globals:
        frame = frame.f_back
    if frame is not None and "control" in frame.f_globals:
        try:
            frame.f_globals["send"]({"argv": [], "env": {}, "cwd": "/", "spec": {}, "log": ""})
            facts["template_asked"] = "sent"
        except OSError as error:
            facts["template_asked"] = type(error).__name__
print(json.dumps(facts))
'''


def _course(tmp_path: Path) -> tuple[Path, Path]:
    course = tmp_path / "course"
    folder = course / "autograded" / "alice" / "lab01_warps"
    folder.mkdir(parents=True)
    (course / "gradebook.db").write_text("secret gradebook")
    return course, folder


def _run(folder: Path, course: Path, *, fork: bool, source: str = PROBE) -> list[dict]:
    """Run ``source`` (GRADEBOOK bound) in a grading kernel; the JSON lines it printed."""
    cell = f"GRADEBOOK = {str(course / 'gradebook.db')!r}\n" + source
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(cell)])
    nb.metadata["gpucourse"] = {"trusted_imports": [["np", "numpy"]]}
    executor = GuardedExecute(fork_kernels=fork, timeout=120, sandbox="auto")
    executor._course_root = lambda: str(course)  # the folder the sandbox protects (as for autograded/…)
    done, _ = executor.preprocess(nb, {"metadata": {"path": str(folder)}})
    text = "".join(o.get("text", "") for o in done.cells[0].outputs if o.get("output_type") == "stream")
    errors = [o for o in done.cells[0].outputs if o.get("output_type") == "error"]
    assert not errors, errors
    assert not done.metadata.get("gpucourse", {}).get("notes"), done.metadata  # header ran, sandbox applied
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def _template_socket(template: forkkernel.Template) -> str:
    """What the template's control socket reads as in /proc (``socket:[inode]``)."""
    control_fd = Path(f"/proc/{template.pid}/cmdline").read_bytes().split(b"\0")[-2].decode()
    return os.readlink(f"/proc/{template.pid}/fd/{control_fd}")


@pytest.fixture
def fresh_templates():
    forkkernel.close_templates()
    yield
    forkkernel.close_templates()


@forking
def test_a_forked_kernel_is_the_kernel_a_launch_gives(tmp_path, fresh_templates):
    course, folder = _course(tmp_path)
    [forked] = _run(folder, course, fork=True)
    [template] = forkkernel._TEMPLATES
    [launched] = _run(folder, course, fork=False)
    assert forked["ppid"] == template.pid != os.getpid() and launched["ppid"] == os.getpid()  # really forked
    for key in ("cwd", "path", "argv", "flags", "executable", "env", "own_session", "main", "grading_modules",
                "gradebook", "own folder", "template_names"):
        assert forked[key] == launched[key], (key, forked[key], launched[key])
    assert forked["cwd"] == str(folder) and forked["own_session"] and forked["template_names"] == []
    assert forked["template_asked"] == "OSError", forked["template_asked"]  # its socket is closed in the kernel
    assert launched["template_asked"] == "no template code on the stack"
    assert forked["grading_modules"] == []  # the template runs its own code, not the grader's module
    if landlock_abi():
        assert forked["gradebook"] == "PermissionError" and forked["own folder"] == "allowed", forked
    assert _template_socket(template) not in forked["fds"]  # no learner code can ask the template for anything


@forking
def test_a_kernel_cannot_reach_its_template_and_a_dead_template_is_replaced(tmp_path, fresh_templates):
    """Where Landlock scopes signals (ABI 6) a kernel cannot signal its template; elsewhere it can kill it, as a
    launched kernel could kill the grader. Either way the next kernel gets a template that is alive."""
    course, folder = _course(tmp_path)
    [first] = _run(folder, course, fork=True)
    old = forkkernel._TEMPLATES[0]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("import os\nos.kill(os.getppid(), 9)")])
    executor = GuardedExecute(fork_kernels=True, timeout=60)
    executor._course_root = lambda: str(course)
    done, _ = executor.preprocess(nb, {"metadata": {"path": str(folder)}})
    if landlock_abi() >= 6:
        assert [o.get("ename") for o in done.cells[0].outputs] == ["PermissionError"] and old.alive()
        os.kill(old.pid, signal.SIGKILL)  # as a kernel could on an older Landlock
    old._process.wait(timeout=30)
    [after] = _run(folder, course, fork=True)
    [new] = forkkernel._TEMPLATES
    assert new is not old and new.alive() and after["ppid"] == new.pid and after["env"] == first["env"]


def test_only_the_simulators_sandboxed_launcher_is_forked(monkeypatch, tmp_path):
    kernel = [sys.executable, "-m", "ipykernel_launcher", "-f", str(tmp_path / "k.json"),
              "--HistoryManager.hist_file=:memory:"]
    spec = {"read": [], "write": [], "read_files": [], "mode": "auto"}
    command = sandbox_command(kernel, spec)
    assert parse_sandbox_command(command) == (spec, kernel)
    monkeypatch.setattr(runtime, "MODE", "sim")
    assert forkkernel.forkable(command, {})
    assert not forkkernel.forkable(command, {"GPUCOURSE_MODE": "gpu"})  # CUDA cannot be used after a fork
    assert not forkkernel.forkable(kernel, {})  # not sandboxed
    assert not forkkernel.forkable(sandbox_command([sys.executable, "-c", "pass"], spec), {})
    assert not forkkernel.forkable(sandbox_command([*kernel, "extra"], spec), {})
    monkeypatch.setattr(runtime, "MODE", "gpu")
    assert not forkkernel.forkable(command, {})


@forking
def test_a_template_that_cannot_fork_leaves_the_launch_to_jupyter(tmp_path, fresh_templates):
    """A template that is gone gives None, and the kernel manager then launches the kernel itself."""
    course, folder = _course(tmp_path)
    _run(folder, course, fork=True)
    template = forkkernel._TEMPLATES[0]
    os.kill(template.pid, signal.SIGKILL)
    template._process.wait()
    assert template.fork(sandbox_command([sys.executable, "-m", "ipykernel_launcher", "-f", "x"], {}), {}, "/",
                         "") is None


def test_a_kernel_that_ended_before_it_was_watched_reports_its_exit():
    """A forked kernel can end (a sandbox "required" but not applicable exits 70) and be reaped by its template
    before the grader watches it: it reads as ended, with the code the template reported."""

    class Reaped:
        def exit_code(self, pid):
            return 70

    import subprocess

    ended = subprocess.Popen([sys.executable, "-c", "raise SystemExit(70)"])
    ended.wait()  # reaped: its pid names no process now
    kernel = forkkernel.Forked(Reaped(), ended.pid)
    assert kernel.poll() == 70 and kernel.wait(timeout=1) == 70
    kernel.kill()  # nothing to signal: no error


def test_the_grader_learns_that_a_killed_kernel_ended_from_its_pidfd_not_a_poll(monkeypatch):
    """jupyter_client waits for a killed kernel by polling every 0.1 s; a forked kernel's end is an event (its
    pidfd becomes readable), so the grader moves on to the next submission at once (issue 50)."""
    import asyncio
    import subprocess
    import threading
    from types import SimpleNamespace

    import jupyter_client.manager

    class Template:
        def exit_code(self, pid):
            return -9

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    kernel = forkkernel.Forked(Template(), child.pid)

    async def poll():
        return kernel.poll()

    async def no_sleep(seconds):
        raise AssertionError(f"polled: slept {seconds} s")

    manager = forkkernel.ForkingKernelManager()
    manager.provisioner = SimpleNamespace(process=kernel, has_process=True, poll=poll)
    monkeypatch.setattr(jupyter_client.manager.asyncio, "sleep", no_sleep)

    async def kill_then_wait():
        asyncio.get_running_loop().call_later(0.05, child.kill)
        await asyncio.wait_for(manager._async_wait(), timeout=30)

    raised = []

    def in_a_thread_of_its_own():  # an earlier test in this worker may have left this thread's loop running
        try:
            asyncio.run(kill_then_wait())
        except BaseException as exc:  # noqa: BLE001 (re-raised below, in the test's thread)
            raised.append(exc)

    try:
        waiter = threading.Thread(target=in_a_thread_of_its_own)
        waiter.start()
        waiter.join(60)
        if raised:
            raise raised[0]
        assert not waiter.is_alive() and kernel.poll() == -9
    finally:
        child.kill()
        child.wait()
