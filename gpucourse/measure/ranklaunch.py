"""Rank processes of torch.distributed on this computer (lessons 09 and 10, their labs, an instructor's node).

Each rank is a separate process (never ``mp.spawn`` from a notebook, which re-imports ``__main__``:
pytorch/pytorch#20375) with ``MASTER_ADDR=127.0.0.1``, a free port, one OpenMP thread and, on Windows,
``USE_LIBUV=0`` (pytorch/pytorch#139990). ``run`` waits at most ``timeout_s``; a rank that fails, or a run
past the limit, stops every rank and raises one line that says why: the rank's own Python exception (or the
``error: …`` line a course rank prints), not the "terminate called …" of a peer torn down after it.
Standard library only.
"""

from __future__ import annotations

import os
import re
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


def run(commands: list[list[str]], *, timeout_s: float, what: str, rank_envs: list[dict] | None = None) -> None:
    """Start one process per command (rank r runs ``commands[r]`` with ``rank_envs[r]`` added to its
    environment) and wait for all; raise ``LaunchError`` naming ``what`` if one fails or time runs out.
    A port taken between choosing and binding it is retried once on another."""
    try:
        _run_once(commands, timeout_s, what, rank_envs)
    except LaunchError as err:
        if "address already in use" not in str(err).lower() and "EADDRINUSE" not in str(err):
            raise
        _run_once(commands, timeout_s, what, rank_envs)


def _run_once(commands, timeout_s, what, rank_envs) -> None:
    port = free_port()
    kwargs = {"start_new_session": True} if sys.platform != "win32" else {}
    with tempfile.TemporaryDirectory(prefix="ranks-") as tmp:
        logs = [open(Path(tmp, f"rank{r}.err"), "w+", encoding="utf-8") for r in range(len(commands))]
        extra_envs = rank_envs or [{}] * len(commands)
        procs = [subprocess.Popen(cmd, env={**rank_env(port), **extra_envs[r]}, stdout=subprocess.DEVNULL,
                                  stderr=logs[r], text=True, **kwargs)  # stderr to files: never a full pipe
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
