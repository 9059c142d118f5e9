"""The course works whatever a learner imported first (lab 07 opens with `from numba.types import
float32`), or says in one line what to reorder. Each case runs in a fresh interpreter with nothing
course-specific in its environment, as a learner's kernel starts."""

import subprocess
import sys
import textwrap

import pytest
from labtools import learner_env

from gpucourse.measure import runtime

LAUNCH = """
import numpy as np
cuda = runtime.cuda

@cuda.jit
def kernel(out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = float32(i) * float32(2)

out = np.zeros(40, dtype=np.float32)
kernel[2, 32](out)
assert (out == 2 * np.arange(40)).all(), out
print("launched", runtime.MODE)
"""


def run_fresh(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          env=learner_env(), timeout=300)


def test_numba_imported_before_gpucourse_still_launches():
    done = run_fresh("from numba.types import float32\nfrom gpucourse.measure import runtime\n" + LAUNCH)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == f"launched {runtime.MODE}"


def test_gpucourse_first_launches():
    done = run_fresh("from gpucourse.measure import runtime\nfrom numba.types import float32\n" + LAUNCH)
    assert done.returncode == 0, done.stderr[-2000:]


@pytest.mark.skipif(runtime.is_gpu(), reason="without a GPU only: on a GPU numba.cuda is the real target")
def test_numba_cuda_imported_first_without_a_gpu_says_what_to_reorder():
    done = run_fresh("from numba import cuda\nimport gpucourse\n")
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("gpucourse.errors.NoGPU: numba.cuda was imported before gpucourse"), last
    assert "move `from gpucourse import ...` above `from numba import cuda`" in last
