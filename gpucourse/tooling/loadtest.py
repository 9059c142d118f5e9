"""`make loadtest LEARNERS="2 4 8"`: N learners at once on the course's JupyterHub (shape 1) on 127.0.0.1.

For each N: the hub of deploy/jupyterhub_config.py's shape (gpucourse/tooling/hubrig.py: real local
users, LocalProcessSpawner, configurable-http-proxy, nbgrader's exchange), an instructor who releases
lab 01 from a terminal, and N learners who all start together. Each learner, in its own thread:

1. logs in through the hub's login form and presses "Start My Server" (GET /hub/spawn);
   *server start* is the time from that request until the hub says the server is ready;
2. opens the lesson (contents API), starts its kernel (sessions API) and runs every code cell in
   order through the kernel's websocket, as JupyterLab's Run All does; *run all* is from the first
   execute_request to the last cell's idle, and the notebook with its outputs is saved back;
3. moves the lesson's first explorer's slider a few times (lesson 00a: SAXPY traced by the microscope
   in the simulator, re-run at every move); *widget* is the time from the slider's update message
   (what JupyterLab sends when the learner lets go of the slider) until the chart's status line
   arrives saying that the run finished (the chart's figure is sent just before it): the kernel's
   simulator work, the chart's JSON and both trips through the proxy, not the browser's drawing;
4. fetches lab 01 and submits it (nbgrader's Assignments API of its server).

Then the instructor collects; the report says whether every submission was collected. A sampler reads
/proc (psutil) once a second: CPU-seconds and peak memory (RSS, and PSS, which counts shared pages
once) of each learner's processes (its server and kernel, all of its uid), and of the hub and proxy.
Every wait has a deadline and every loop a count: a run stops by itself (--deadline).

Writes, under --out: results.md and results.csv (one row per N), learners.csv (one row per learner).
"""

from __future__ import annotations

import argparse
import csv
import os
import re
import secrets
import shutil
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

LESSON = "00a_first_kernels"
LAB = "lab01_warps"
COURSE = "gpucourse"
MEMORY_LIMIT_BYTES = 4 * 2**30  # per process of a learner's server, as deploy/jupyterhub_config.py sets it
WIDGET_VALUES = (350, 600, 120, 480, 250, 40, 520, 200)  # the lesson's slider "n" (1–600), one per move


@dataclass
class Learner:
    name: str
    phase: str = "waiting"
    login_s: float | None = None
    server_start_s: float | None = None
    open_s: float | None = None
    run_all_s: float | None = None
    cells: int = 0
    cell_errors: int = 0
    widget_s: list[float] = field(default_factory=list)
    widget_errors: int = 0
    submitted: bool = False
    collected: bool = False
    errors: list[str] = field(default_factory=list)
    cpu_s: float = 0.0
    kernel_cpu_s: float = 0.0
    peak_rss_bytes: int = 0
    peak_pss_bytes: int = 0


def percentile(values: list[float], q: float) -> float | None:
    """The q-th percentile (0–100), linear between the closest ranks; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def load_average() -> float:
    return os.getloadavg()[0]


class Sampler(threading.Thread):
    """Once a second: each uid's processes (CPU-seconds, RSS and PSS summed), the hub's and the proxy's,
    and the machine's used memory. Bounded by ``stop`` and by ``deadline``."""

    def __init__(self, uids: dict[int, str], hub_pids: list[int], deadline: float, interval_s: float = 1.0):
        super().__init__(daemon=True)
        import psutil

        self.psutil = psutil
        self.uids, self.hub_pids = uids, hub_pids
        self.deadline, self.interval_s = deadline, interval_s
        self.stop = threading.Event()
        self.cpu: dict[int, float] = {}  # pid -> latest CPU-seconds (user + system, with reaped children)
        self.owner: dict[int, str] = {}  # pid -> learner name or "hub"
        self.kernels: set[int] = set()  # pids of kernels (ipykernel), the rest of a learner's is its server
        self.peak_rss: dict[str, int] = {}
        self.peak_pss: dict[str, int] = {}
        self.peak_used_bytes = 0
        self.baseline_used_bytes = self._used()

    def _used(self) -> int:
        memory = self.psutil.virtual_memory()
        return memory.total - memory.available

    def sample(self) -> None:
        rss: dict[str, int] = {}
        pss: dict[str, int] = {}
        hub_tree = set()
        for pid in self.hub_pids:
            try:
                hub_tree.add(pid)
                hub_tree.update(c.pid for c in self.psutil.Process(pid).children(recursive=True)
                                if c.uids().real not in self.uids)
            except self.psutil.Error:
                pass
        for process in self.psutil.process_iter(["pid", "uids", "cmdline"]):
            try:
                uid = process.info["uids"].real
                owner = self.uids.get(uid) or ("hub" if process.pid in hub_tree else None)
                if owner is None:
                    continue
                times = process.cpu_times()
                self.cpu[process.pid] = times.user + times.system + times.children_user + times.children_system
                self.owner[process.pid] = owner
                if "ipykernel_launcher" in " ".join(process.info["cmdline"] or []):
                    self.kernels.add(process.pid)
                full = process.memory_full_info()
                rss[owner] = rss.get(owner, 0) + full.rss
                pss[owner] = pss.get(owner, 0) + getattr(full, "pss", full.rss)
            except self.psutil.Error:
                continue
        for owner, value in rss.items():
            self.peak_rss[owner] = max(self.peak_rss.get(owner, 0), value)
        for owner, value in pss.items():
            self.peak_pss[owner] = max(self.peak_pss.get(owner, 0), value)
        self.peak_used_bytes = max(self.peak_used_bytes, self._used())

    def run(self) -> None:
        while not self.stop.is_set() and time.monotonic() < self.deadline:
            self.sample()
            self.stop.wait(self.interval_s)

    def cpu_of(self, owner: str, kernels_only: bool = False) -> float:
        return sum(v for pid, v in self.cpu.items()
                   if self.owner.get(pid) == owner and (not kernels_only or pid in self.kernels))


def _lesson_notebook():
    from gpucourse.tooling.build import ROOT, to_notebook

    return to_notebook(ROOT / "notebooks" / f"{LESSON}.py")


def prepare_course(shop, instructor: str, learners: list[str]) -> Path:
    """The instructor's course folder with lab 01's source; each learner's home with the lesson (as
    deploy/jupyterhub_config.py's pre_spawn_hook copies it) and an nbgrader_config.py naming the exchange."""
    import nbformat

    from gpucourse.tooling.build import ROOT, to_notebook

    course = shop.home(instructor)
    config = (ROOT / "nbgrader_config.py").read_text()
    config += f"\nc.Exchange.root = {str(shop.exchange)!r}\n"
    (course / "nbgrader_config.py").write_text(config)
    (course / "solutions" / LAB).mkdir(parents=True)
    shutil.copy(ROOT / "solutions" / LAB / f"{LAB}.py", course / "solutions" / LAB)
    nbformat.write(to_notebook(ROOT / "solutions" / LAB / f"{LAB}.py"), course / "solutions" / LAB / f"{LAB}.ipynb")
    lesson = _lesson_notebook()
    for name in learners:
        home = shop.home(name)
        (home / "gpucourse" / "notebooks").mkdir(parents=True)
        nbformat.write(lesson, home / "gpucourse" / "notebooks" / f"{LESSON}.ipynb")
        (home / "nbgrader_config.py").write_text(
            f"c = get_config()  # noqa\nc.CourseDirectory.course_id = {COURSE!r}\n"
            f"c.Exchange.root = {str(shop.exchange)!r}\n")
    for name in [instructor, *learners]:
        shop.chown_home(name)
    return course


def instructor_nbgrader(shop, instructor: str, course: Path, *args: str) -> subprocess.CompletedProcess:
    """nbgrader in the instructor's terminal on the hub (their course folder)."""
    from gpucourse.tooling import hubrig

    env = {"PATH": f"{shop.shim / 'bin'}:/usr/bin:/bin", "LANG": "C.UTF-8",
           "JUPYTER_PATH": str(Path(sys.prefix) / "share" / "jupyter")}
    done = hubrig.run_as(instructor, [str(shop.shim / "bin" / "python"), "-m", "nbgrader", *args,
                                      "--log-level=WARN"], course, env)
    if done.returncode != 0:
        raise RuntimeError(f"nbgrader {' '.join(args)}: {done.stderr[-2000:]}")
    return done


def run_learner(hub, learner: Learner, *, moves: int, deadline: float) -> None:
    """One learner's session (module docstring); every failure is recorded, none is raised."""
    from gpucourse.tooling.kernelclient import KernelClient

    def left() -> float:
        return max(1.0, deadline - time.monotonic())

    client = None
    try:
        learner.phase = "login"
        started = time.monotonic()
        browser = hub.login(learner.name)
        learner.login_s = time.monotonic() - started
        learner.phase = "spawning"
        started = time.monotonic()
        hub.spawn_from_hub_page(browser, learner.name)
        hub.wait_ready(learner.name, seconds=min(left(), 600))
        learner.server_start_s = time.monotonic() - started
        token = hub.token_for(learner.name)
        base = f"{hub.url}/user/{learner.name}"
        auth = {"Authorization": f"token {token}"}
        http = hub.requests

        learner.phase = "opening"
        started = time.monotonic()
        path = f"gpucourse/notebooks/{LESSON}.ipynb"
        reply = http.get(f"{base}/api/contents/{path}", headers=auth, timeout=left())
        reply.raise_for_status()
        notebook = reply.json()["content"]
        reply = http.post(f"{base}/api/sessions", headers=auth, timeout=left(),
                          json={"path": path, "type": "notebook", "name": f"{LESSON}.ipynb",
                                "kernel": {"name": "python3"}})
        reply.raise_for_status()
        kernel_id = reply.json()["kernel"]["id"]
        client = KernelClient(base, token, kernel_id)
        client.wait_ready(timeout_s=min(left(), 300))
        learner.open_s = time.monotonic() - started

        learner.phase = "run all"
        started = time.monotonic()
        for cell in notebook["cells"]:
            if cell["cell_type"] != "code":
                continue
            reply, outputs = client.execute(cell["source"], timeout_s=min(left(), 600))
            learner.cells += 1
            cell["outputs"], cell["execution_count"] = outputs, reply.get("execution_count")
            if reply.get("status") != "ok":
                learner.cell_errors += 1
                learner.errors.append(f"cell {learner.cells}: {reply.get('ename')}: {reply.get('evalue')}"[:200])
        learner.run_all_s = time.monotonic() - started
        reply = http.put(f"{base}/api/contents/{path}", headers=auth, timeout=left(),
                         json={"type": "notebook", "content": notebook})
        reply.raise_for_status()

        learner.phase = "widgets"
        charts = client.livecharts()
        if not charts:
            raise RuntimeError("the lesson showed no LiveChart")
        sliders, status = client.livechart_parts(charts[0])
        slider = sliders.get("n") or next(iter(sliders.values()))
        for value in WIDGET_VALUES[:moves]:
            seconds, html = client.move(slider, status, value, timeout_s=min(left(), 300))
            if "✓" in html:
                learner.widget_s.append(seconds)
            else:
                learner.widget_errors += 1
                learner.errors.append(f"widget: {re.sub('<[^>]+>', '', html)[:200]}")

        learner.phase = "lab"
        for action in ("fetch", "submit"):
            reply = http.post(f"{base}/assignments/{action}", headers=auth, timeout=left(),
                              params={"course_id": COURSE, "assignment_id": LAB})
            reply.raise_for_status()
            if not reply.json().get("success"):
                raise RuntimeError(f"{action}: {str(reply.json())[:300]}")
        learner.submitted = True
        learner.phase = "done"
    except Exception as error:  # noqa: BLE001 - the report counts it; the other learners go on
        learner.errors.append(f"{learner.phase}: {type(error).__name__}: {str(error)[:300]}")
        learner.phase = f"failed ({learner.phase})"
    finally:
        if client is not None:
            client.close()


def _hub_log_errors(log: Path, offset: int = 0) -> tuple[int, int]:
    """Error lines in the hub's log (JupyterHub's ``[E`` lines, HTTP 5xx) and the proxy's errors (its
    lines are in the same log), from ``offset`` on (the log's size once the hub answered: before that the
    proxy answers 404 to the rig's own polls of a hub that is still starting)."""
    hub = proxy = 0
    if not log.exists():
        return 0, 0
    with open(log, "rb") as handle:
        handle.seek(offset)
        text = handle.read().decode(errors="replace")
    for line in text.splitlines():
        if "ConfigProxy" in line and re.search(r"\berror\b", line, re.I):
            proxy += 1
        elif line.startswith("[E ") or re.search(r"\] 5\d\d (GET|POST|PUT|DELETE|PATCH) ", line):
            hub += 1
    return hub, proxy


def run_once(n: int, *, moves: int = 5, deadline_s: float = 1500.0, progress=print,
             out: Path | None = None) -> tuple[dict, list[Learner]]:
    """One load run with ``n`` learners: the summary row and the learners."""
    from gpucourse.tooling import hubrig

    suffix = secrets.token_hex(2)
    names = [f"lt{suffix}{i:02d}" for i in range(1, n + 1)]
    instructor = f"lti{suffix}"
    learners = [Learner(name) for name in names]
    row: dict = {"learners": n, "cores": os.cpu_count(), "load1_start": round(load_average(), 2),
                 "lesson": LESSON, "widget_moves_each": moves}
    users = {"instructor": instructor, **{name: name for name in names}}
    with hubrig.Workshop(users, prefix="gpucourse-load-") as shop:
        hub = shop.hub
        course = prepare_course(shop, instructor, names)
        instructor_nbgrader(shop, instructor, course, "generate_assignment", LAB, "--force")
        instructor_nbgrader(shop, instructor, course, "release_assignment", LAB, "--force")
        hub.start(hub.write_config(shop.shim, memory_limit_bytes=MEMORY_LIMIT_BYTES))
        log_offset = (shop.base / "jupyterhub.log").stat().st_size
        proxy_pid = None
        pid_file = shop.base / "proxy.pid"
        if pid_file.exists():
            proxy_pid = int(pid_file.read_text())
        import pwd

        uids = {pwd.getpwnam(name).pw_uid: name for name in names}
        started = time.monotonic()
        deadline = started + deadline_s
        sampler = Sampler(uids, [hub.process.pid] + ([proxy_pid] if proxy_pid else []), deadline)
        sampler.start()
        threads = [threading.Thread(target=run_learner, args=(hub, learner), kwargs={"moves": moves,
                                                                                      "deadline": deadline},
                                    daemon=True) for learner in learners]
        for thread in threads:
            thread.start()
        last = 0.0
        while any(t.is_alive() for t in threads) and time.monotonic() < deadline + 30:
            time.sleep(0.5)
            if time.monotonic() - last >= 5:
                last = time.monotonic()
                phases = {}
                for learner in learners:
                    phases[learner.phase] = phases.get(learner.phase, 0) + 1
                text = ", ".join(f"{k} {v}" for k, v in sorted(phases.items()))
                progress(f"  N={n} {time.monotonic() - started:5.0f} s  {text}  (load {load_average():.1f})")
        timed_out = any(t.is_alive() for t in threads)
        sampler.stop.set()
        sampler.join(timeout=10)
        sampler.sample()  # the last second's CPU too
        row["wall_s"] = round(time.monotonic() - started, 1)
        row["load1_end"] = round(load_average(), 2)
        try:
            instructor_nbgrader(shop, instructor, course, "collect", LAB)
        except RuntimeError as error:
            row["collect_error"] = str(error)[:200]
        for learner in learners:
            learner.collected = any((course / "submitted" / learner.name / LAB).glob("*.ipynb"))
            learner.cpu_s = round(sampler.cpu_of(learner.name), 1)
            learner.kernel_cpu_s = round(sampler.cpu_of(learner.name, kernels_only=True), 1)
            learner.peak_rss_bytes = sampler.peak_rss.get(learner.name, 0)
            learner.peak_pss_bytes = sampler.peak_pss.get(learner.name, 0)
        hub_errors, proxy_errors = _hub_log_errors(shop.base / "jupyterhub.log", log_offset)
        if out is not None:  # the hub's log (with the proxy's lines) beside the results, to read the errors
            out.mkdir(parents=True, exist_ok=True)
            shutil.copy(shop.base / "jupyterhub.log", out / f"jupyterhub-{n}.log")
        row.update(summarise(learners))
        row.update({"hub_cpu_s": round(sampler.cpu_of("hub"), 1),
                    "hub_proxy_peak_rss_mib": round(sampler.peak_rss.get("hub", 0) / 2**20),
                    "machine_mem_used_peak_gib": round((sampler.peak_used_bytes - sampler.baseline_used_bytes) / 2**30,
                                                       2),
                    "hub_log_errors": hub_errors, "proxy_errors": proxy_errors, "timed_out": timed_out})
    row["leftover_processes"] = len(shop.leftovers)
    return row, learners


def _r(value, digits=1):
    return None if value is None else round(value, digits)


def summarise(learners: list[Learner]) -> dict:
    starts = [x.server_start_s for x in learners if x.server_start_s is not None]
    runs = [x.run_all_s for x in learners if x.run_all_s is not None]
    widget = [s for x in learners for s in x.widget_s]
    mean = statistics.fmean
    return {
        "server_start_p50_s": _r(percentile(starts, 50)), "server_start_max_s": _r(max(starts, default=None)),
        "run_all_p50_s": _r(percentile(runs, 50)), "run_all_max_s": _r(max(runs, default=None)),
        "widget_p50_s": _r(percentile(widget, 50), 2), "widget_p95_s": _r(percentile(widget, 95), 2),
        "widget_max_s": _r(max(widget, default=None), 2), "widget_moves": len(widget),
        "cpu_s_per_learner": _r(mean([x.cpu_s for x in learners]) if learners else None),
        "kernel_cpu_s_per_learner": _r(mean([x.kernel_cpu_s for x in learners]) if learners else None),
        "peak_rss_mib_per_learner": _r(mean([x.peak_rss_bytes for x in learners]) / 2**20 if learners else None, 0),
        "peak_pss_mib_per_learner": _r(mean([x.peak_pss_bytes for x in learners]) / 2**20 if learners else None, 0),
        "cell_errors": sum(x.cell_errors for x in learners),
        "learner_errors": sum(len(x.errors) for x in learners),
        "submitted": sum(x.submitted for x in learners),
        "collected": sum(x.collected for x in learners),
        "all_collected": all(x.collected for x in learners),
    }


COLUMNS = [
    ("learners", "N"), ("cores", "cores"), ("load1_start", "load 1-min start"), ("load1_end", "load 1-min end"),
    ("server_start_p50_s", "server start p50 (s)"), ("server_start_max_s", "server start max (s)"),
    ("run_all_p50_s", "Run All p50 (s)"), ("run_all_max_s", "Run All max (s)"),
    ("widget_p50_s", "widget p50 (s)"), ("widget_p95_s", "widget p95 (s)"), ("widget_max_s", "widget max (s)"),
    ("cpu_s_per_learner", "CPU-s / learner"), ("kernel_cpu_s_per_learner", "of which kernel"),
    ("peak_rss_mib_per_learner", "peak RSS / learner (MiB)"),
    ("peak_pss_mib_per_learner", "peak PSS / learner (MiB)"),
    ("machine_mem_used_peak_gib", "machine memory peak (GiB)"),
    ("hub_cpu_s", "hub+proxy CPU-s"), ("hub_log_errors", "hub errors"), ("proxy_errors", "proxy errors"),
    ("learner_errors", "learner errors"), ("collected", "collected"), ("wall_s", "wall (s)"),
]


def markdown_table(rows: list[dict]) -> str:
    head = "| " + " | ".join(title for _, title in COLUMNS) + " |"
    rule = "|" + "|".join("---:" for _ in COLUMNS) + "|"
    lines = [head, rule]
    for row in rows:
        cells = []
        for key, _ in COLUMNS:
            value = row.get(key)
            if key == "collected":
                value = f"{row.get('collected', 0)}/{row.get('learners')}"
            cells.append("–" if value is None else str(value))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def write_results(out: Path, rows: list[dict], learners: dict[int, list[Learner]], header: str) -> None:
    out.mkdir(parents=True, exist_ok=True)
    keys = list(dict.fromkeys(k for row in rows for k in row))
    with open(out / "results.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, keys)
        writer.writeheader()
        writer.writerows(rows)
    fields = [f for f in Learner.__dataclass_fields__ if f not in ("errors", "widget_s")] + ["widget_s", "errors"]
    with open(out / "learners.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, ["N", *fields])
        writer.writeheader()
        for n, group in learners.items():
            for learner in group:
                record = asdict(learner)
                record["widget_s"] = " ".join(f"{s:.2f}" for s in learner.widget_s)
                record["errors"] = " | ".join(learner.errors)
                writer.writerow({"N": n, **record})
    (out / "results.md").write_text(header + "\n" + markdown_table(rows))


def _commit() -> str:
    from gpucourse.tooling.build import ROOT

    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    return done.stdout.strip() or "unknown"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--learners", default="4", help='how many learners, or several: "2 4 8"')
    parser.add_argument("--moves", type=int, default=5, help="widget moves per learner (at most 8)")
    parser.add_argument("--out", type=Path, default=Path("build/loadtest"), help="folder for the results")
    parser.add_argument("--deadline", type=float, default=1500.0, help="seconds one N may take before it is stopped")
    args = parser.parse_args(argv)
    counts = [int(x) for x in re.split(r"[\s,]+", args.learners.strip()) if x]
    if not counts or min(counts) < 1:
        parser.error("--learners: one or more positive numbers")
    from gpucourse.tooling import hubrig

    reason = hubrig.skip_reason()
    if reason:
        print(f"loadtest: cannot run here: {reason}", file=sys.stderr)
        return 2
    rows, groups = [], {}
    date = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    header = (f"Load test, lesson {LESSON} in simulator mode, {date}, commit {_commit()}, {os.cpu_count()} cores, "
              f"{round(__import__('psutil').virtual_memory().total / 2**30)} GiB; the 1-minute load average at the "
              "start and end of each run includes anything else running on this machine.\n")
    for n in counts:
        print(f"loadtest: {n} learner(s)… (load {load_average():.1f})", flush=True)
        row, learners = run_once(n, moves=max(1, min(args.moves, len(WIDGET_VALUES))), deadline_s=args.deadline,
                                 progress=lambda line: print(line, flush=True), out=args.out)
        rows.append(row)
        groups[n] = learners
        for learner in learners:
            for error in learner.errors[:3]:
                print(f"  {learner.name}: {error}", flush=True)
        write_results(args.out, rows, groups, header)
    print()
    print(header)
    print(markdown_table(rows))
    print(f"written: {args.out / 'results.md'}, {args.out / 'results.csv'}, {args.out / 'learners.csv'}")
    failed = [r for r in rows if not r["all_collected"] or r["learner_errors"] or r["timed_out"]]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
