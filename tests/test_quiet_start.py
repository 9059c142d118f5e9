"""numba-cuda's performance warnings are off for the course, so a graded cell never writes to stderr.

nbgrader gives 0 points to a graded cell with stderr output, and numba-cuda warns on stderr when
a grid has fewer than 128 blocks or a host array is copied implicitly (lab 01's 3×3 grid, lab
07's grid of one). In GPU mode the real numba-cuda target is loaded; the child below reaches
it on a machine without a GPU by answering the start-up probe of libcuda with one device, then
builds the launch configuration of a 3×3 grid, the step that warns.

That no cell of a lab's solution writes to stderr, as nbgrader runs it, is checked on the notebook
nbgrader executed in each lab's round trip (tests/labtools.py: check_runs_as_released).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from standin_driver import PYTHON_STANDIN_DRIVER

from gpucourse.tooling.build import ROOT

CHILD = PYTHON_STANDIN_DRIVER + textwrap.dedent("""
    from gpucourse.measure import runtime
    assert runtime.MODE == "gpu", runtime.MODE
    from numba.core import config
    from numba.cuda.dispatcher import _LaunchConfiguration
    print("DISABLE_PERFORMANCE_WARNINGS", config.DISABLE_PERFORMANCE_WARNINGS)
    _LaunchConfiguration(None, (3, 3, 1), (16, 16, 1), 0, 0)  # a 3×3 grid: 9 < 128 blocks
""")


def _run_child(extra_env: dict | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NUMBA_")}
    env.update(extra_env or {}, PYTHONPATH=str(ROOT), PYTHONWARNINGS="default")
    return subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, env=env,
                          timeout=300, cwd=ROOT)


def test_a_small_grid_in_gpu_mode_writes_nothing_to_stderr():
    done = _run_child()
    assert done.returncode == 0, done.stderr[-2000:]
    assert "DISABLE_PERFORMANCE_WARNINGS 1" in done.stdout
    assert done.stderr == ""


def test_even_when_the_environment_asked_for_the_warnings():
    # a learner's shell (or a grader's) that exported the variable as 0 still gets a quiet course
    done = _run_child({"NUMBA_DISABLE_PERFORMANCE_WARNINGS": "0"})
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stderr == ""
