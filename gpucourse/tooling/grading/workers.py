"""The grading workers: one process each, nbgrader imported once, submissions fed one at a time (one
JSON line per task each way); nbgrader's API for a course; killing what hangs."""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

WORKER_TASK_TIMEOUT_S = 1800  # a safety net: GuardedExecute ends every notebook well before this


class WorkerPool:
    """``jobs`` worker processes (started now, so they import nbgrader while the caller prepares);
    ``run(tasks)`` feeds them ``(op, lab, student)`` tasks, one at a time each, and stops them."""

    def __init__(self, root: Path, jobs: int, name: str = "grading", env: dict | None = None):
        self.root, self.jobs, self.env = Path(root), max(1, jobs), dict(env or {})
        log_dir = self.root / "autograded"
        log_dir.mkdir(exist_ok=True)
        self.logs = [open(log_dir / f".{name}-worker-{i}.log", "w") for i in range(self.jobs)]  # noqa: SIM115
        self.workers = [_start_worker(self.root, log, self.env) for log in self.logs]

    def run(self, tasks: list[tuple[str, str, str]], *, quiet: bool = False) -> dict:
        todo: queue.Queue = queue.Queue()
        for task in tasks:
            todo.put(task)
        results: dict = {}
        lock = threading.Lock()

        def work(index: int) -> None:
            while True:
                try:
                    task = todo.get_nowait()
                except queue.Empty:
                    return
                started = time.monotonic()
                if self.workers[index].poll() is not None:
                    self.workers[index] = _start_worker(self.root, self.logs[index], self.env)
                result = _ask(self.workers[index], task)
                if result is None:  # the worker itself died: retry once in a fresh one
                    _stop_worker(self.workers[index])
                    self.workers[index] = _start_worker(self.root, self.logs[index], self.env)
                    result = _ask(self.workers[index], task) or {"success": False, "error": "grading worker died"}
                if not result.get("success") and "database is locked" in str(result.get("error")):
                    time.sleep(1.0)
                    result = _ask(self.workers[index], task) or result
                with lock:
                    results[task] = result
                    if not quiet:
                        state = "ok" if result.get("success") else "GRADER FAILURE"
                        print(f"  {task[0]} {task[1]}/{task[2]}: {time.monotonic() - started:.1f} s, {state}",
                              flush=True)

        threads = [threading.Thread(target=work, args=(i,), daemon=True) for i in range(self.jobs)]
        try:
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
        finally:
            for worker in self.workers:
                _stop_worker(worker)
            for log in self.logs:
                log.close()
        return results


def nbgrader_api(root) -> object:
    """nbgrader's Python API for the course at ``root``, configured by its nbgrader_config.py."""
    from nbgrader.apps.api import NbGraderAPI
    from nbgrader.coursedir import CourseDirectory
    from traitlets.config.loader import PyFileConfigLoader

    bin_dir = str(Path(sys.executable).parent)
    if bin_dir not in os.environ.get("PATH", "").split(os.pathsep):  # nbgrader runs `alembic` by name
        os.environ["PATH"] = os.pathsep.join([bin_dir, os.environ.get("PATH", "")])
    config = PyFileConfigLoader("nbgrader_config.py", path=str(root)).load_config()
    coursedir = CourseDirectory(config=config)
    coursedir.root = str(root)
    return NbGraderAPI(coursedir=coursedir, config=config)


def _start_worker(root: Path, log, extra_env: dict | None = None) -> subprocess.Popen:
    env = {**os.environ, **(extra_env or {})}  # the worker's, and so its grading kernels' (sandbox.kernel_environment)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])  # for alembic
    code = "import sys; from gpucourse.tooling.grading.workers import worker_main; worker_main(sys.argv[1])"
    return subprocess.Popen([sys.executable, "-c", code, str(root)], cwd=root, env=env, text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, start_new_session=True)


def _ask(worker: subprocess.Popen, task: tuple[str, str, str]) -> dict | None:
    import select

    try:
        worker.stdin.write(json.dumps(list(task)) + "\n")
        worker.stdin.flush()
        ready, _, _ = select.select([worker.stdout], [], [], WORKER_TASK_TIMEOUT_S)
        if not ready:
            _kill_tree(worker.pid)
            return {"success": False, "error": f"grading took longer than {WORKER_TASK_TIMEOUT_S} s"}
        line = worker.stdout.readline()
    except (BrokenPipeError, OSError):
        return None
    if not line:
        return None
    return json.loads(line)


def _kill_tree(pid: int) -> None:
    """Kill a process and its descendants (kernels run in their own sessions, so killpg is not enough)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    todo, found = [pid], []
    while todo:
        current = todo.pop()
        found.append(current)
        todo += children.get(current, [])
    for victim in found:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(victim, signal.SIGKILL)


def _stop_worker(worker: subprocess.Popen) -> None:
    with contextlib.suppress(Exception):
        worker.stdin.close()
    try:
        worker.wait(timeout=30)
    except subprocess.TimeoutExpired:
        _kill_tree(worker.pid)
        worker.wait()


def worker_main(root: str) -> None:
    """A grading worker: reads ``[op, lab, student]`` lines, answers one JSON line each."""
    channel = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # anything else printed on stdout (by a kernel, a library) goes to the log
    os.chdir(root)
    api = nbgrader_api(root)
    for line in sys.stdin:
        op, lab, student = json.loads(line)
        try:
            if op == "autograde":
                result = api.autograde(lab, student, force=True, create=True)
            elif op == "feedback":
                result = api.generate_feedback(lab, student, force=True)
            else:
                result = {"success": False, "error": f"unknown operation {op!r}"}
        except Exception as exc:  # noqa: BLE001
            result = {"success": False, "error": f"{type(exc).__name__}: {exc}"}
        print(f"--- {op} {lab}/{student}\n{result.get('log', '')}{result.get('error', '')}", file=sys.stderr,
              flush=True)
        channel.write(json.dumps({k: result.get(k) for k in ("success", "error") if k in result}) + "\n")
        channel.flush()
