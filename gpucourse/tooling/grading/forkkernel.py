"""Grading kernels forked from one process that has already imported what they import (issue 50).

A grading kernel starts as a new Python: the sandbox launcher (``tooling/sandbox.py``) restricts itself and execs
``python -m ipykernel_launcher``, whose grader header (``header.py``) then imports the lab's libraries (torch,
NumPy, plotly, pandas, numba, the course) and takes the snapshot: about 2 s of CPU a submission on a 2-core
machine, as much as the lab's own cells. Here one *template* process per grader process, started with exactly
the environment its kernels get, imports IPython's kernel and the lab's libraries once; each kernel is a fork of
it that then does what the launcher and ``python -m ipykernel_launcher`` do, in the same order: its own session,
the kernel's working folder and environment, Landlock and no capabilities (``sandbox.restrict``), then the
launcher's code. The header still runs in every kernel (the snapshot is of that kernel), and the lab's imports
there find their modules already loaded, as they were when no learner code had run.

Only where it is the same kernel: Linux, the simulator (a fork after CUDA is initialised cannot use CUDA; the
template never initialises it because no kernel of a GPU grader is forked), the sandboxed
``python -m ipykernel_launcher -f FILE`` command, and an environment equal to the template's
(``GuardedExecute`` gives a grader process one private folder path, reused notebook after notebook, so every
kernel's environment is the same). Anything else, or a template that died (a learner's code can kill its
parent), starts the kernel as before. The template holds nothing of the grader: it is a fresh Python that
imported libraries; its kernels close their end of its socket first, so no learner code can ask it for
anything.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from gpucourse.tooling.sandbox import parse_sandbox_command

# The template: a plain ``python -c`` program (standard library, then the preloads); its kernels run
# ``gpucourse.tooling.sandbox.restrict`` and the launcher's code (``_kernel`` below). It reports each
# kernel's pid when forked and its exit status when reaped, one JSON line each.
TEMPLATE = r'''
import json, os, select, signal, socket, sys
if sys.path and sys.path[0] == "":
    del sys.path[0]  # `-c` put the working folder first; a kernel's imports never see the template's
control = socket.socket(fileno=int(sys.argv[1]))
wake_r, wake_w = os.pipe()
os.set_blocking(wake_w, False)
signal.set_wakeup_fd(wake_w)
signal.signal(signal.SIGCHLD, lambda *_: None)


def send(message):
    control.sendall((json.dumps(message) + "\n").encode())


def kernel(request):
    """In the forked child: what the sandbox launcher and `python -m ipykernel_launcher` do, in order."""
    code = 1
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        os.close(control.detach())  # first: no learner code can reach the template
        os.close(wake_r)
        os.close(wake_w)
        os.setsid()
        null = os.open(os.devnull, os.O_RDWR)
        log = os.open(request["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600) if request["log"] else null
        os.dup2(null, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        from gpucourse.tooling.sandbox import restrict
        restrict(request["spec"], request["argv"])
        import runpy
        sys.argv = [request["argv"][0], *request["argv"][3:]]
        sys.path.insert(0, os.getcwd())  # what `python -m` puts first (the launcher takes it out)
        runpy.run_module("ipykernel_launcher", run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
        if not isinstance(stop.code, (int, type(None))):
            print(stop.code, file=sys.stderr)
    except BaseException:
        import traceback
        traceback.print_exc()
    finally:
        import atexit
        atexit._run_exitfuncs()
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        os._exit(code)


def requests():
    """Each JSON line the grader sends; ends when it closes its end."""
    buffered = b""
    while True:
        ready, _, _ = select.select([control, wake_r], [], [])
        if wake_r in ready:
            os.read(wake_r, 512)
            reap()
        if control in ready:
            data = control.recv(1 << 16)
            if not data:
                return
            buffered += data
            while b"\n" in buffered:
                line, buffered = buffered.split(b"\n", 1)
                yield json.loads(line)


def reap():
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        send({"exited": pid, "code": os.waitstatus_to_exitcode(status)})


for request in requests():
    if "preload" in request:
        for name in request["preload"]:
            try:
                __import__(name)
            except BaseException:
                pass
        import gc
        gc.freeze()  # the libraries just loaded live as long as the kernels: no collection of theirs walks them
        send({"ready": os.getpid()})
        continue
    try:
        pid = os.fork()
    except OSError as error:
        send({"error": str(error)})
        continue
    if pid == 0:
        kernel(request)
    send({"pid": pid})
'''

START_S = 60.0  # the template's imports (torch, numba, plotly, …) on a loaded machine
FORK_S = 60.0  # a fork is milliseconds; past this the template is taken for dead


def forkable(argv: list[str], env: dict) -> bool:
    """Whether a kernel command can be a fork of the template: Linux, the simulator, the sandboxed launcher."""
    if not sys.platform.startswith("linux") or not hasattr(os, "pidfd_open"):
        return False
    from gpucourse.measure import runtime

    if runtime.MODE != "sim" or env.get("GPUCOURSE_MODE", "sim") != "sim":
        return False  # the template would probe (initialise) CUDA, and a fork cannot use it after that
    parsed = parse_sandbox_command(argv)
    return parsed is not None and _launcher_argv(parsed[1])


def _launcher_argv(kernel: list[str]) -> bool:
    """``python -m ipykernel_launcher -f FILE`` and options (nbclient adds ``--HistoryManager.hist_file=:memory:``)."""
    return (len(kernel) >= 5 and kernel[0] == sys.executable and kernel[1:3] == ["-m", "ipykernel_launcher"]
            and kernel[3] == "-f" and all(a.startswith("--") for a in kernel[5:]))


class Forked:
    """A forked kernel as jupyter_client's provisioner sees a Popen: ``pid``, ``poll``, ``wait``,
    ``send_signal``, ``kill`` (its own session: ``killpg`` of its pid reaches it and what it started)."""

    stdin = stdout = stderr = None

    def __init__(self, template: Template, pid: int):
        self.template, self.pid = template, pid
        self.returncode: int | None = None
        try:
            self._pidfd = os.pidfd_open(pid)
        except ProcessLookupError:  # it ended (and was reaped) already: a sandbox that could not be applied
            self._pidfd = None
            self.returncode = template.exit_code(pid)

    def poll(self) -> int | None:
        if self.returncode is None and select.select([self._pidfd], [], [], 0)[0]:
            self.returncode = self.template.exit_code(self.pid)
            os.close(self._pidfd)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(f"kernel {self.pid}", timeout)
            select.select([self._pidfd], [], [], 0.5)
        return self.returncode

    async def ended(self) -> None:
        """Until the kernel has ended: its pidfd becomes readable (an event, where jupyter_client's own wait
        polls every 0.1 s: a tenth of a second for every submission a grader kills; issue 50)."""
        if self.poll() is not None:
            return
        loop = asyncio.get_running_loop()
        readable = loop.create_future()
        loop.add_reader(self._pidfd, lambda: readable.done() or readable.set_result(None))
        try:
            await readable
        finally:
            loop.remove_reader(self._pidfd)

    def send_signal(self, signum: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, signum)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)


class Template:
    """One template process and the socket to it; ``fork`` a kernel, or None when it cannot."""

    def __init__(self, env: dict, preload: list[str]):
        self.env = dict(env)
        ours, theirs = socket.socketpair()
        self._process = subprocess.Popen([sys.executable, "-c", TEMPLATE, str(theirs.fileno())], env=self.env,
                                         cwd="/", stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                         stderr=subprocess.DEVNULL, pass_fds=(theirs.fileno(),),
                                         start_new_session=True)
        theirs.close()
        self._socket = ours
        self._lock = threading.Lock()  # one request at a time
        self._replies: list[dict] = []
        self._exits: dict[int, int] = {}
        self._changed = threading.Condition()
        self._closed = False
        threading.Thread(target=self._read, daemon=True, name="gpucourse-kernel-template").start()
        self._send({"preload": preload})
        self.pid = self._reply(START_S).get("ready")

    def _read(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            for line in self._socket.makefile("rb"):
                message = json.loads(line)
                with self._changed:
                    if "exited" in message:
                        self._exits[message["exited"]] = message["code"]
                    else:
                        self._replies.append(message)
                    self._changed.notify_all()
        with self._changed:
            self._closed = True
            self._changed.notify_all()

    def _send(self, message: dict) -> None:
        self._socket.sendall((json.dumps(message) + "\n").encode())

    def _reply(self, timeout_s: float) -> dict:
        with self._changed:
            self._changed.wait_for(lambda: self._replies or self._closed, timeout_s)
            return self._replies.pop(0) if self._replies else {}

    def alive(self) -> bool:
        return bool(self.pid) and not self._closed and self._process.poll() is None

    def fork(self, argv: list[str], env: dict, cwd: str, log: str) -> Forked | None:
        """A kernel forked from the template for this (forkable) command, or None (the caller starts it)."""
        spec, kernel = parse_sandbox_command(argv)
        request = {"argv": kernel, "env": env, "cwd": str(cwd), "spec": spec, "log": log}
        with self._lock:
            if not self.alive():
                return None
            try:
                self._send(request)
            except OSError:
                return None
            pid = self._reply(FORK_S).get("pid")
            if not pid:
                self.close()  # no answer: never fork from it again (a late fork would take this kernel's sockets)
                return None
        return Forked(self, pid)

    def exit_code(self, pid: int) -> int:
        """A forked kernel's exit status, as its template reaped it (-9 if the template is gone)."""
        with self._changed:
            self._changed.wait_for(lambda: pid in self._exits or self._closed, 2.0)
            return self._exits.pop(pid, -signal.SIGKILL)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._socket.shutdown(socket.SHUT_RDWR)  # the template reads its end, and leaves its loop
            self._socket.close()
        with contextlib.suppress(OSError):
            self._process.wait(timeout=5)
        if self._process.poll() is None:
            with contextlib.suppress(OSError):
                os.killpg(self._process.pid, signal.SIGKILL)
            self._process.wait()


_TEMPLATES: list[Template] = []


def template_for(env: dict, preload: list[str]) -> Template | None:
    """This process's template for kernels with environment ``env`` (started on first use; a template whose
    environment differs, or that died, is replaced)."""
    current = _TEMPLATES[0] if _TEMPLATES else None
    if current is not None and current.env == env and current.alive():
        return current
    if current is not None:
        current.close()
        _TEMPLATES.clear()
    try:
        template = Template(env, preload)
    except OSError:
        return None
    if not template.alive():
        template.close()
        return None
    _TEMPLATES.append(template)
    return template


def close_templates() -> None:
    while _TEMPLATES:
        _TEMPLATES.pop().close()


atexit.register(close_templates)  # a grader process that ends takes its template with it


def preload_modules(trusted_imports: list) -> list[str]:
    """What the template imports: IPython's kernel, then each module the lab's locked cells import."""
    modules = ["ipykernel.kernelapp", "ipykernel.ipkernel", "IPython"]  # ipkernel: the kernel class, debugpy
    for _name, what in trusted_imports:
        modules.append(str(what))
    return list(dict.fromkeys(modules))


def private_folder() -> tuple[Path, bool]:
    """The grading kernel's private folder: the same path for every notebook this process grades (so its
    kernels' environments are equal and can be forks of one template), made anew each time; another one
    (and False) where that path is in use."""
    import tempfile

    folder = Path(tempfile.gettempdir()) / f"gpucourse-kernel-{os.getpid()}"
    try:
        folder.mkdir(mode=0o700)
    except OSError:
        return Path(tempfile.mkdtemp(prefix="gpucourse-kernel-")), False
    return folder, True




def _manager_class():
    from jupyter_client.manager import AsyncKernelManager

    class ForkingKernelManager(AsyncKernelManager):
        """jupyter_client's kernel manager, whose launch forks the template where the kernel is forkable (the
        provisioner then holds a ``Forked`` in place of a Popen); otherwise it launches as usual."""

        fork_preload: list[str] = []  # set by GuardedExecute: empty, no fork
        fork_log = ""

        async def _async_launch_kernel(self, kernel_cmd, **kw):
            env, cwd = dict(kw.get("env") or os.environ), str(kw.get("cwd") or os.getcwd())
            forked = None
            if self.fork_preload and forkable(kernel_cmd, env):
                template = template_for(env, self.fork_preload)
                if template is not None:
                    forked = template.fork(kernel_cmd, {**env, "JPY_PARENT_PID": str(template.pid)}, cwd,
                                           self.fork_log)
            if forked is None:
                return await super()._async_launch_kernel(kernel_cmd, **kw)
            provisioner = self.provisioner
            provisioner.process, provisioner.pid, provisioner.pgid = forked, forked.pid, forked.pid
            provisioner.cwd = cwd
            self._reconcile_connection_info(provisioner.connection_info)

        async def _async_wait(self, pollinterval: float = 0.1) -> None:
            process = getattr(self.provisioner, "process", None)
            if isinstance(process, Forked):
                await process.ended()
            await super()._async_wait(pollinterval)

    return ForkingKernelManager


ForkingKernelManager = _manager_class()
