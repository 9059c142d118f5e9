"""The offline path of an HPC GPU node, rehearsed end to end (README, "An HPC node without internet"):

1. a stand-in for the node's own Python: a venv holding only a bare site stack (sitestack.BARE_SITE: numpy,
   numba, numba-cuda, CuPy, torch, pandas, pytest and their own dependencies, at locks/cu13.txt's pins; CPU torch
   here), installed from the registry; not what one node happened to hold besides (plotly's narwhals, say: a
   wheelhouse that forgot it passed here while `import plotly` failed on a node that never had plotly);
2. a wheelhouse made by `make wheelhouse` for this machine's Python and platform (the registry's last use);
3. in a copy of the course, with no index (PIP_NO_INDEX, an unreachable PIP_INDEX_URL, no pip configuration):
   `make setup CUDA=system`, then `make doctor HEADLESS=1` and the GPU path (every lesson's sweeps, a LiveChart
   redraw) in simulator mode.

``run_in_offline_env`` runs any further command there: the quick GPU report's rehearsal (step 6).
About 40 s on 2 cores with pip's and uv's caches warm.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from gpucourse.tooling import install, sitestack
from gpucourse.tooling.build import ROOT

# Marked extra (issue 50): `make test-extra` runs it, CI after `make test`, beside the other platforms' checks
pytestmark = [pytest.mark.slow, pytest.mark.extra]

# A bare site stack, as every GPU image has it; their own dependencies come along, at locks/cu13.txt's pins.
# Nothing more: a package listed here that the lock's packages need would hide a wheel missing from the wheelhouse.
SITE_STACK = sitestack.BARE_SITE
UNREACHABLE_INDEX = "http://127.0.0.1:9/simple"  # the discard port: an attempt to use an index fails at once
SETUP_TIMEOUT_S = 300

# The GPU path, as `gpu-report` and the GPU tests take it: what each distribution it imported is printed
GPU_PATH = """
import json, sys
from importlib import metadata
import gpucourse
from gpucourse.measure import reference
import ipywidgets as widgets
from gpucourse.lessons import warps
from gpucourse.viz.widgets import LiveChart

sweeps = reference.load_all_sweeps()
slider = widgets.IntSlider(value=32, min=1, max=64)
chart = LiveChart({"max_threads": slider}, warps.staircase_figure, threaded=False)
slider.value = 4
owners = metadata.packages_distributions()
imported = sorted({d for m in list(sys.modules) for d in owners.get(m.split(".")[0], [])})
print(json.dumps({"sweeps": len(sweeps), "runs": chart.runs, "errors": chart.errors, "imported": imported}))
"""


@dataclass
class OfflineEnv:
    course: Path  # the copy of the course, as copied to the node; its .venv is the system stack
    site_python: Path  # the stand-in for the node's own Python
    wheelhouse: Path
    environ: dict[str, str]  # the node's: no pip configuration, no index
    setup: subprocess.CompletedProcess
    seconds: dict[str, float] = field(default_factory=dict)


def offline_environ(site_python: Path) -> dict[str, str]:
    """This machine's environment with every route to a package index taken away."""
    environ = {k: v for k, v in os.environ.items()
               if not k.startswith(("PIP_", "UV_", "GPUCOURSE_", "VIRTUAL_ENV", "PYTHON", "CONDA"))}
    return {**environ, "PIP_CONFIG_FILE": os.devnull, "PIP_NO_INDEX": "1", "PIP_INDEX_URL": UNREACHABLE_INDEX,
            "PIP_RETRIES": "0", "GPUCOURSE_MODE": "sim",  # a rehearsal on the CPU, whatever this machine has
            "PATH": f"{site_python.parent}:/usr/local/bin:/usr/bin:/bin"}


def run_in_offline_env(offline: OfflineEnv, command: list[str], timeout_s: float = SETUP_TIMEOUT_S
                       ) -> subprocess.CompletedProcess:
    """The hook for further offline checks: ``command`` in the copy of the course, as on the node after
    `make setup CUDA=system` (its .venv/bin first on PATH, no index reachable)."""
    environ = {**offline.environ, "PATH": f"{offline.course / '.venv' / 'bin'}:{offline.environ['PATH']}"}
    return subprocess.run(command, cwd=offline.course, env=environ, capture_output=True, text=True, timeout=timeout_s)


def _copy_course(dest: Path) -> Path:
    """The repository's files (tracked, and new ones not ignored), as `git archive` or a USB stick would carry them."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, text=True, check=True).stdout.split("\0")
    for name in filter(None, listed):
        if (ROOT / name).is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, dest / name)
    return dest


def _make_site_stack(site: Path) -> Path:
    """A venv with only the GPU image's packages, from the registry (uv with pip's settings when it is here)."""
    subprocess.run([sys.executable, "-m", "venv", str(site)], check=True)
    python = install.venv_python(site)
    wanted = ["-c", str(ROOT / "locks" / "cu13.txt"), *SITE_STACK]
    listing = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True).stdout
    options = install.uv_options(install.pip_settings(listing))
    has_uv = subprocess.run([sys.executable, "-m", "uv", "--version"], capture_output=True).returncode == 0
    if has_uv and options:
        flags, environ = options
        subprocess.run([sys.executable, "-m", "uv", "pip", "install", "-q", "--python", str(python), *flags, *wanted],
                       check=True, env={**os.environ, **environ})
    else:
        subprocess.run([str(python), "-m", "pip", "install", "-q", *wanted], check=True)
    return python


def _this_platform() -> str:
    libc = os.confstr("CS_GNU_LIBC_VERSION") if hasattr(os, "confstr") else None
    if sys.platform != "linux" or not libc or not libc.startswith("glibc "):
        pytest.skip("the offline rehearsal builds manylinux wheels: it needs Linux with glibc")
    major, minor = libc.split()[1].split(".")[:2]
    return f"manylinux_{major}_{minor}_{platform.machine()}"


def _site_freeze(python: Path) -> str:
    return subprocess.run([str(python), "-m", "pip", "freeze", "--all"], capture_output=True, text=True,
                          check=True, env={"PATH": "/usr/bin:/bin", "PIP_CONFIG_FILE": os.devnull}).stdout


@pytest.fixture(scope="module")
def offline_env(tmp_path_factory) -> OfflineEnv:
    tmp = tmp_path_factory.mktemp("offline")
    pyver = "{}.{}".format(*sys.version_info[:2])
    seconds, started = {}, time.perf_counter()
    course = _copy_course(tmp / "course")
    site_python = _make_site_stack(tmp / "site")
    seconds["stand-in site stack"] = time.perf_counter() - started
    wheelhouse, started = tmp / "wheelhouse", time.perf_counter()
    subprocess.run(["make", "-s", "wheelhouse", f"PYTHON={sys.executable}", f"PYVER={pyver}",
                    f"PLATFORM={_this_platform()}", f"WHEELHOUSE={wheelhouse}"], cwd=course, check=True,
                   capture_output=True, text=True)
    seconds["make wheelhouse"] = time.perf_counter() - started
    environ, started = offline_environ(site_python), time.perf_counter()
    before = _site_freeze(site_python)
    site_has = {sitestack.canonical(line.split("==")[0]) for line in before.splitlines() if "==" in line}
    assert not site_has & set(sitestack.lock_pins(ROOT / sitestack.LOCK)), "the stand-in is not a bare site stack"
    setup = subprocess.run(["make", "setup", "CUDA=system", f"PYTHON={site_python}", f"WHEELHOUSE={wheelhouse}"],
                           cwd=course, env=environ, capture_output=True, text=True, timeout=SETUP_TIMEOUT_S)
    seconds["make setup CUDA=system (offline)"] = time.perf_counter() - started
    assert setup.returncode == 0, setup.stdout + setup.stderr
    assert _site_freeze(site_python) == before, "setup changed the site's own packages"
    return OfflineEnv(course, site_python, wheelhouse, environ, setup, seconds)


def test_setup_adds_only_the_lock_from_the_wheelhouse_and_reports_the_site_stack(offline_env):
    out = offline_env.setup.stdout
    wheels = len(sitestack.lock_pins(ROOT / sitestack.LOCK))
    assert "system stack" in out and f"{wheels} wheel(s) match SHA256SUMS" in out and "kernel check skipped" in out
    assert "the site's stack (Python" in out and "numba-cuda 0.30.4" in out
    assert (offline_env.course / ".venv" / ".setup-stamp").read_text().startswith("stack=system ")
    own = install.venv_python(offline_env.course / ".venv")
    purelib = subprocess.run([str(own), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    added = {sitestack.wheel_name_version(p.name)[0] for p in Path(purelib).glob("*.dist-info")}
    assert added == set(sitestack.lock_pins(ROOT / sitestack.LOCK)) | {"gpucourse"}
    print(f"\noffline rehearsal, seconds: {offline_env.seconds}")


def test_the_headless_doctor_passes_offline(offline_env):
    started = time.perf_counter()
    done = run_in_offline_env(offline_env, ["make", "doctor", "HEADLESS=1"])
    offline_env.seconds["make doctor HEADLESS=1"] = time.perf_counter() - started
    assert done.returncode == 0, done.stdout + done.stderr
    assert "headless" in done.stdout and "[ok  ] a kernel runs" in done.stdout


def test_the_gpu_path_imports_offline_and_every_wheel_of_the_lock_is_used(offline_env):
    started = time.perf_counter()
    done = run_in_offline_env(offline_env, [".venv/bin/python", "-c", GPU_PATH])
    offline_env.seconds["GPU path"] = time.perf_counter() - started
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.splitlines()[-1])
    assert found["sweeps"] > 0 and found["runs"] == 2 and found["errors"] == 0, found
    unused = set(sitestack.lock_pins(ROOT / sitestack.LOCK)) - {sitestack.canonical(d) for d in found["imported"]}
    assert not unused, f"locks/system.txt carries wheels the GPU path never imports: {unused}"


def test_a_wheel_missing_from_the_wheelhouse_is_one_line_and_nothing_is_fetched(offline_env, tmp_path):
    partial = tmp_path / "partial"
    shutil.copytree(offline_env.wheelhouse, partial)
    for wheel in partial.glob("greenlet-*.whl"):
        wheel.unlink()
    done = run_in_offline_env(offline_env, [str(offline_env.site_python), "gpucourse/tooling/install.py", "--cuda",
                                            "system", "--venv", str(tmp_path / "venv"), "--wheelhouse", str(partial)])
    assert done.returncode == 1 and not (tmp_path / "venv").exists()
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("gpucourse setup: the wheelhouse") and "has no wheel of greenlet==3.5.6" in line


def test_the_quick_gpu_report_is_rehearsed_offline_and_lists_every_step(offline_env):
    # README step 6, on the CPU: the same command a node runs, with --rehearsal; every GPU test and every
    # sweep must get an outcome in the report (collected, recorded, or why not), nothing fetched
    started = time.perf_counter()
    done = run_in_offline_env(offline_env, [".venv/bin/python", "-m", "gpucourse", "gpu-report", "--quick",
                                            "--rehearsal", "--out", "build/gpu-report"], timeout_s=600)
    offline_env.seconds["gpu-report --quick --rehearsal"] = time.perf_counter() - started
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    out = offline_env.course / "build" / "gpu-report"
    state = json.loads((out / "report-state.json").read_text())
    # the stand-in has no CUDA toolkit (a node has): a sweep that reads kernel attributes from ptxas fails, saying so
    # and ncu needs a GPU: its step is skipped, saying so
    not_done = {name: (step["status"], step["detail"]) for name, step in state["steps"].items()
                if step["status"] != "done" and not (step["status"] == "failed" and "ptxas" in step["detail"])
                and not (name == "ncu catalogue" and step["status"] == "skipped" and "no GPU" in step["detail"])}
    assert len(state["steps"]) >= 27 and not not_done, not_done
    outcomes = {row["outcome"] for row in state["expectations"]}
    assert len(state["expectations"]) >= 50 and outcomes == {"not run (rehearsal: no GPU)"}, outcomes
    text = (out / "gpu-report.md").read_text()
    assert "(REHEARSAL) (QUICK)" in text and (out / "gpu-report.tgz").exists()
