"""Rank processes of torch.distributed on this computer (lessons 09 and 10, their labs, an instructor's node).

Each rank is a separate process (never ``mp.spawn`` from a notebook, which re-imports ``__main__``:
pytorch/pytorch#20375) with ``MASTER_ADDR=127.0.0.1``, a free port, one OpenMP thread and, on Windows,
``USE_LIBUV=0`` (pytorch/pytorch#139990). ``run`` waits at most ``timeout_s``; a rank that fails, or a run
past the limit, stops every rank and raises one line that says why: the rank's own Python exception (or the
``error: …`` line a course rank prints), not the "terminate called …" of a peer torn down after it.

``run(..., preload="torch.distributed")`` (Linux; the gloo ranks of lessons 09 and 10): one parent process
imports that module once and forks the ranks, each then running its ``python -c`` program as that command
would. ``import torch`` is most of a rank's start (about 1.3 s of CPU a rank); it starts no thread, so forking
after it is safe. The parent is made for one run and ends with it: nothing of a run outlives it in the
notebook's kernel (a learner's code there could change what a later run reads). Elsewhere, and for any other
command, each rank is a process of its own.
Standard library only.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from gpucourse.errors import CourseError

GRACE_S = 2.0  # after the first rank fails, the others fail a moment later: let them write why
COURSE_DIR = Path(__file__).resolve().parent.parent  # the gpucourse package's folder


class LaunchError(CourseError, RuntimeError):
    """The ranks did not finish: said in one line (IPython shows no traceback)."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (the hub rig and the browser tests use it too)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def lean_start(program: str) -> str:
    """``program`` (a rank's ``python -c`` source) after a preamble that registers every package of the course
    bare: the same folder to import from, its ``__init__`` not run. A rank then imports the modules it names and
    what they import, not the lessons' charts, widgets and pandas that the packages' ``__init__`` re-export, nor
    the start-up decision ``gpucourse/__init__`` makes for notebooks (ranks use torch, never numba). Issue 50:
    lab 10's test file spent about a quarter of its CPU time importing those in its rank processes."""
    packages = sorted((".".join(init.parent.relative_to(COURSE_DIR.parent).parts), str(init.parent))
                      for init in COURSE_DIR.rglob("__init__.py") if "__pycache__" not in init.parts)
    preamble = ("import importlib.machinery as _lean_m, sys as _lean_s, types as _lean_t\n"
                f"for _lean_n, _lean_p in {packages!r}:\n"
                "    _lean_x = _lean_t.ModuleType(_lean_n)\n"
                "    _lean_x.__spec__ = _lean_m.ModuleSpec(_lean_n, None, is_package=True)\n"
                "    _lean_x.__spec__.submodule_search_locations = _lean_x.__path__ = [_lean_p]\n"
                "    _lean_x.__package__ = _lean_n\n"
                "    _lean_s.modules[_lean_n] = _lean_x\n"
                "    if '.' in _lean_n:\n"
                "        setattr(_lean_s.modules[_lean_n.rpartition('.')[0]], _lean_n.rpartition('.')[2], _lean_x)\n"
                "del _lean_m, _lean_s, _lean_t, _lean_n, _lean_p, _lean_x\n")
    return preamble + program


def rank_env(port: int) -> dict[str, str]:
    """The environment of one rank's process: the parent's, plus the rendezvous on this machine."""
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "OMP_NUM_THREADS": "1"}
    if sys.platform == "win32":
        env["USE_LIBUV"] = "0"  # Windows' PyTorch has no libuv TCPStore (pytorch/pytorch#139990)
    return env


def run(commands: list[list[str]], *, timeout_s: float, what: str, rank_envs: list[dict] | None = None,
        preload: str | None = None) -> None:
    """Start one process per command (rank r runs ``commands[r]`` with ``rank_envs[r]`` added to its
    environment) and wait for all; raise ``LaunchError`` naming ``what`` if one fails or time runs out.
    A port taken between choosing and binding it is retried once on another. ``preload``: a module every
    rank imports first; where ``forks(commands, preload)``, one parent imports it and forks the ranks."""
    try:
        _run_once(commands, timeout_s, what, rank_envs, preload)
    except LaunchError as err:
        if "address already in use" not in str(err).lower() and "EADDRINUSE" not in str(err):
            raise
        _run_once(commands, timeout_s, what, rank_envs, preload)


def preload_for(backend: str) -> str | None:
    """What a course rank's ``run`` preloads: torch for gloo ranks (one import a run, not one a rank); none for NCCL
    ranks (an instructor's node), each a process of its own with its own CUDA context from the start."""
    return "torch.distributed" if backend == "gloo" else None


def forks(commands: list[list[str]], preload: str | None) -> bool:
    """Whether ``run`` forks these ranks from one parent that imported ``preload``: on Linux, for commands that
    are this Python's ``-c`` programs (what a course rank is)."""
    return bool(preload) and sys.platform == "linux" and all(
        len(cmd) >= 3 and cmd[0] == sys.executable and cmd[1] == "-c" for cmd in commands)


def _run_once(commands, timeout_s, what, rank_envs, preload=None) -> None:
    port = free_port()
    kwargs = {"start_new_session": True} if sys.platform != "win32" else {}
    with tempfile.TemporaryDirectory(prefix="ranks-") as tmp:
        logs = [open(Path(tmp, f"rank{r}.err"), "w+", encoding="utf-8") for r in range(len(commands))]
        extra_envs = rank_envs or [{}] * len(commands)
        envs = [{**rank_env(port), **extra_envs[r]} for r in range(len(commands))]
        if forks(commands, preload):
            procs = _Forked.start(commands, envs, [log.name for log in logs], preload, Path(tmp, "parent.err"))
        else:
            procs = [subprocess.Popen(cmd, env=envs[r], stdout=subprocess.DEVNULL, stderr=logs[r], text=True,
                                      **kwargs)  # stderr to files: never a full pipe
                     for r, cmd in enumerate(commands)]
        try:
            deadline = time.monotonic() + timeout_s
            while any(p.poll() is None for p in procs):  # stop at the first rank that fails: the others would wait
                if any(p.returncode not in (None, 0) for p in procs):
                    break
                if time.monotonic() > deadline:
                    raise LaunchError(f"{what} did not finish within {timeout_s:g} s: every rank was stopped (a rank "
                                      "waiting for a message that never comes waits forever)")
                time.sleep(0.05)
            grace = time.monotonic() + GRACE_S
            while any(p.poll() is None for p in procs) and time.monotonic() < grace:
                time.sleep(0.05)
            failed = [r for r, p in enumerate(procs) if p.returncode not in (None, 0)]
        finally:
            _kill(procs)
            for log in logs:
                log.close()
        if failed:
            # the rank that raised may still be tearing down (and killed just now): its log is read all the same
            order = failed + [r for r in range(len(procs)) if r not in failed]
            reasons = [(r, reason(Path(tmp, f"rank{r}.err").read_text(encoding="utf-8", errors="replace"),
                                  procs[r].returncode)) for r in order]
            rank, why = next(((r, why) for r, why in reasons if _EXPLAINS.match(why)), reasons[0])
            raise LaunchError(f"rank {rank} of {what} failed: {_ERROR_PREFIX.sub('', why)}")


_RANK_PREFIX = re.compile(r"^\[rank\d+\]:\s*")  # torch prefixes a rank's uncaught exception with "[rank0]: "
_ERROR_PREFIX = re.compile(r"^error:\s*")  # what a course rank prints for a CourseError
_PYTHON_ERROR = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Interrupt|Exit)\b[^:]*:")
_EXPLAINS = re.compile(f"{_PYTHON_ERROR.pattern}|{_ERROR_PREFIX.pattern}")


def reason(text: str, returncode) -> str:
    """The line of a rank's stderr that says why it failed: its last Python exception (or ``error:``) line,
    else its last line."""
    lines = [_RANK_PREFIX.sub("", line).strip() for line in text.strip().splitlines() if line.strip()]
    errors = [line for line in lines if _EXPLAINS.match(line)]
    return (errors or lines or [f"exit {returncode}"])[-1]


def _kill(procs) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


# The parent of forked ranks (``python -c FORK_PARENT``, its stdin one JSON line: the module to import and each
# rank's program, arguments, environment and stderr file): it imports the module, forks every rank, and writes
# ``EXITED <rank> <code>`` (Popen's returncode: -9 for a kill) as each one ends. A rank runs its program as
# ``python -c`` does: ``__main__``, ``sys.argv``, SystemExit's code, an uncaught exception's traceback on stderr.
EXITED = "gpucourse-rank-exit"
FORK_PARENT = r"""
import atexit, builtins, json, os, sys, traceback, types
spec = json.loads(sys.stdin.readline())
EXITED = spec["exited"]
__import__(spec["preload"])


def rank(entry):
    code = 1
    try:
        err, null = os.open(entry["stderr"], os.O_WRONLY | os.O_TRUNC), os.open(os.devnull, os.O_RDWR)
        os.dup2(null, 0)
        os.dup2(null, 1)
        os.dup2(err, 2)
        os.close(err)
        os.close(null)
        os.environ.clear()
        os.environ.update(entry["env"])
        sys.argv = ["-c", *entry["args"]]
        main = types.ModuleType("__main__")
        main.__builtins__ = builtins
        sys.modules["__main__"] = main
        try:
            exec(compile(entry["program"], "<string>", "exec"), main.__dict__)
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 1
            if not isinstance(exc.code, int | None):
                print(exc.code, file=sys.stderr)
        except BaseException:
            traceback.print_exc()
        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        os._exit(code & 0xFF)


ranks = {}
for index, entry in enumerate(spec["ranks"]):
    sys.stdout.flush()
    pid = os.fork()
    if pid == 0:
        rank(entry)
    ranks[pid] = index
while ranks:
    pid, status = os.wait()
    if pid in ranks:
        print(EXITED, ranks.pop(pid), os.waitstatus_to_exitcode(status), flush=True)
"""


class _Forked:
    """One forked rank, as ``_run_once`` uses a Popen: ``poll``, ``returncode``, ``kill``, ``wait``."""

    def __init__(self, parent: _ForkParent, index: int):
        self.parent, self.index = parent, index

    @classmethod
    def start(cls, commands, envs, stderr_paths, preload: str, parent_log: Path) -> list[_Forked]:
        ranks = [{"program": cmd[2], "args": cmd[3:], "env": env, "stderr": path}
                 for cmd, env, path in zip(commands, envs, stderr_paths, strict=True)]
        parent = _ForkParent(ranks, preload, envs[0], parent_log)
        return [cls(parent, r) for r in range(len(commands))]

    @property
    def returncode(self):
        return self.parent.codes.get(self.index)

    def poll(self):
        self.parent.read()
        return self.returncode

    def kill(self) -> None:
        self.parent.kill()

    def wait(self):
        # like Popen's: at once for a rank that ended (and the parent reaped once it reported every rank)
        if self.poll() is None or len(self.parent.codes) == len(self.parent.ranks):
            self.parent.wait()
        return self.returncode


class _ForkParent:
    """The process that forks one run's ranks. It and its ranks are one process group (its own session): a kill
    stops them all. A rank it never reported (it failed first, e.g. its import) failed with its exit code and
    its stderr, which is added to that rank's."""

    def __init__(self, ranks: list[dict], preload: str, env: dict, log: Path):
        self.codes: dict[int, int] = {}
        self.ranks, self.log, self.buffer = ranks, log, b""
        with open(log, "w", encoding="utf-8") as err:
            self.proc = subprocess.Popen([sys.executable, "-c", FORK_PARENT], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=err, env=env, start_new_session=True)
        os.set_blocking(self.proc.stdout.fileno(), False)
        try:
            self.proc.stdin.write((json.dumps({"preload": preload, "exited": EXITED, "ranks": ranks}) + "\n").encode())
            self.proc.stdin.close()
        except OSError:  # it ended already: read() says why
            pass

    def read(self) -> None:
        """Take in the exit lines written so far (and, once the parent ended, settle the ranks it never reported)."""
        ended = False
        while not self.proc.stdout.closed:
            try:
                chunk = os.read(self.proc.stdout.fileno(), 65536)
            except BlockingIOError:
                break
            if not chunk:
                ended = True
                break
            self.buffer += chunk
            *lines, self.buffer = self.buffer.split(b"\n")
            for word, *numbers in (line.decode(errors="replace").split() for line in lines):
                if word == EXITED:  # anything else (a library's print on import) is not the parent's word
                    self.codes[int(numbers[0])] = int(numbers[1])
        if ended:  # the parent closed its end: it ended
            self.proc.wait()
            self.proc.stdout.close()
            self._settle(self.proc.returncode or 1)

    def _settle(self, code: int) -> None:
        if len(self.codes) == len(self.ranks):
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):  # ranks it forked before it failed
            os.killpg(self.proc.pid, signal.SIGKILL)
        why = self.log.read_text(encoding="utf-8", errors="replace")
        for index, rank in enumerate(self.ranks):
            if index not in self.codes:
                self.codes[index] = code
                with open(rank["stderr"], "a", encoding="utf-8") as err:
                    err.write(why)

    def kill(self) -> None:
        # only while the group is certainly this run's: its parent alive, or a rank it never reported
        if self.proc.poll() is None or len(self.codes) < len(self.ranks):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGKILL)

    def wait(self) -> None:
        self.proc.wait()
        if not self.proc.stdout.closed:
            os.set_blocking(self.proc.stdout.fileno(), True)
            self.read()
        self._settle(self.proc.returncode or 1)
