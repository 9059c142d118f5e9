"""What one learner's single-user server and lesson kernel cost, for variants measured side by side in one run.

    python tools/learner_cost.py --repeat 3

Starts a Jupyter server as a workshop hub would (the same extensions), waits for its API, and reads its
CPU-seconds and memory (PSS) from /proc; then starts lesson 00a's kernel in it and imports the lesson.
Variants alternate (A B A B …) so that whatever else runs on the machine falls on both alike. Prints one
line per sample and a median per variant. The variants:

* ``deployed``: every server extension installed in the venv (what deploy/jupyterhub_config.py serves);
* ``learner``: without those a learner has no use for: the formgrader and course list (the instructor's),
  and jupyter-lsp (no language server is installed).

    python tools/learner_cost.py --widget --before main

times one move of lesson 00a's explorer (``launch_figure``: SAXPY traced by the microscope in the simulator,
then its thread × element chart) with gpucourse/microscope/pictures.py as it is at ``--before`` and as it is
in this checkout, alternating in one process, over the load test's slider values; it also checks that both
draw the same figure.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import requests

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from gpucourse.tooling.hubrig import free_port  # noqa: E402

OFF_FOR_LEARNERS = ["nbgrader.server_extensions.formgrader", "nbgrader.server_extensions.course_list", "jupyter_lsp"]


def _tree(process: psutil.Process) -> tuple[float, int]:
    cpu, pss = 0.0, 0
    for p in [process, *process.children(recursive=True)]:
        try:
            t = p.cpu_times()
            cpu += t.user + t.system
            pss += p.memory_full_info().pss
        except psutil.Error:
            pass
    return cpu, pss


def sample(variant: str, lesson_import: str) -> dict:
    port, token = free_port(), secrets.token_hex(8)
    args = [sys.executable, "-m", "jupyter_server", f"--port={port}", "--ip=127.0.0.1", "--no-browser",
            "--allow-root", f"--IdentityProvider.token={token}", "--ServerApp.port_retries=0"]
    with tempfile.TemporaryDirectory() as home:
        env = {**os.environ, "GPUCOURSE_MODE": "sim", "HOME": home, "JUPYTER_CONFIG_DIR": f"{home}/.jupyter"}
        if variant == "learner":
            Path(home, ".jupyter").mkdir()
            Path(home, ".jupyter", "jupyter_server_config.json").write_text(json.dumps(
                {"ServerApp": {"jpserver_extensions": {name: False for name in OFF_FOR_LEARNERS}}}))
        started = time.monotonic()
        server = subprocess.Popen(args, cwd=home, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        process = psutil.Process(server.pid)
        url, auth = f"http://127.0.0.1:{port}", {"Authorization": f"token {token}"}
        try:
            while time.monotonic() - started < 300:
                try:
                    if requests.get(f"{url}/api/status", headers=auth, timeout=5).ok:
                        break
                except requests.ConnectionError:
                    time.sleep(0.1)
            ready_s = time.monotonic() - started
            server_cpu, server_pss = _tree(process)
            kernel = requests.post(f"{url}/api/kernels", headers=auth, json={"name": "python3"}, timeout=120).json()
            from gpucourse.tooling.kernelclient import KernelClient

            client = KernelClient(url, token, kernel["id"])
            client.wait_ready()
            reply, _ = client.execute(lesson_import, timeout_s=300)
            client.close()
            assert reply["status"] == "ok", reply
            total_cpu, total_pss = _tree(process)
        finally:
            server.terminate()
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                server.kill()
    return {"variant": variant, "server_ready_s": ready_s, "server_cpu_s": server_cpu,
            "server_pss_mib": server_pss / 2**20, "server_and_kernel_cpu_s": total_cpu,
            "server_and_kernel_pss_mib": total_pss / 2**20}


def widget(before: str, repeat: int) -> int:
    """CPU-seconds per widget move, pictures.py at ``before`` against this checkout's, alternating."""
    import importlib.util

    os.environ.setdefault("GPUCOURSE_MODE", "sim")
    from gpucourse.lessons.first_kernels import experiments, model
    from gpucourse.microscope import pictures as after
    from gpucourse.tooling.loadtest import WIDGET_VALUES

    source = subprocess.run(["git", "show", f"{before}:gpucourse/microscope/pictures.py"], cwd=ROOT,
                            capture_output=True, text=True, check=True).stdout
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder, "pictures_before.py")
        path.write_text(source)
        spec = importlib.util.spec_from_file_location("pictures_before", path)
        old = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(old)
    import gpucourse.microscope.report as report_module

    def move(module, n):  # what launch_figure does, with the chosen pictures module
        report_module.pictures = module
        started = time.process_time()
        report = experiments.trace_saxpy(n, 64)
        fig = report.picture_threads("x")
        model.launch_plan(n, 64)
        return time.process_time() - started, fig

    times = {"before": [], "after": []}
    for module in (old, after):
        move(module, 200)  # warm both
    for _ in range(repeat):
        for n in WIDGET_VALUES:
            for label, module in (("before", old), ("after", after)):
                seconds, fig = move(module, n)
                times[label].append(seconds)
            assert move(old, n)[1].to_dict() == move(after, n)[1].to_dict(), f"different figures at n={n}"
    report_module.pictures = after
    print(f"widget move (lesson 00a, slider n over {list(WIDGET_VALUES)}, 64 threads per block), "
          f"{repeat} rounds, CPU-s per move, median [max]; cores {os.cpu_count()}, load {os.getloadavg()[0]:.1f}:")
    for label, values in times.items():
        print(f"  {label:6s} ({before if label == 'before' else 'this checkout'}): "
              f"{statistics.median(values):.3f} [{max(values):.3f}]")
    print("  the same figures: yes")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--variants", default="deployed learner")
    parser.add_argument("--widget", action="store_true", help="time a widget move, --before against this checkout")
    parser.add_argument("--before", default="main", help="the git revision to compare with (--widget)")
    args = parser.parse_args()
    if args.widget:
        return widget(args.before, args.repeat)
    lesson = "from gpucourse.measure import runtime\nfrom gpucourse.lessons import first_kernels"
    rows = []
    print(f"cores {os.cpu_count()}, load {os.getloadavg()[0]:.1f}")
    for _ in range(args.repeat):
        for variant in args.variants.split():
            row = sample(variant, lesson)
            rows.append(row)
            print("  ".join(f"{k} {v:.2f}" if isinstance(v, float) else f"{k} {v}" for k, v in row.items()), flush=True)
    print(f"medians (load {os.getloadavg()[0]:.1f}):")
    for variant in args.variants.split():
        mine = [r for r in rows if r["variant"] == variant]
        print(variant, "  ".join(f"{k} {statistics.median(r[k] for r in mine):.2f}" for k in mine[0] if k != "variant"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
