"""gpucourse.measure.compat: the NumPy alias numba-cuda 0.30 needs on NumPy 2.5 (seen on an H100 node)."""

from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace

from gpucourse.measure.compat import restore_numpy_aliases


def test_a_removed_alias_is_put_back_and_a_present_one_left_alone():
    def vstack(x):
        return x

    bare = SimpleNamespace(vstack=vstack)
    assert restore_numpy_aliases(bare) == ["row_stack"]
    assert bare.row_stack is vstack
    mine = object()
    kept = SimpleNamespace(vstack=vstack, row_stack=mine)
    assert restore_numpy_aliases(kept) == [] and kept.row_stack is mine


def test_importing_gpucourse_restores_it_before_numba_loads():
    code = ("import numpy as np\n"
            "del np.row_stack\n"  # what NumPy 2.5 looks like
            "import gpucourse\n"
            "from gpucourse.measure import runtime\n"
            "assert np.row_stack is np.vstack, 'not restored'\n"
            "assert runtime.RESTORED_NUMPY_ALIASES == ['row_stack']\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-1500:]


def test_child_processes_that_import_numba_first_restore_it_too(monkeypatch):
    from gpucourse.lessons.divergence import experiments
    from gpucourse.measure import compat, ptxinfo
    from gpucourse.tooling import compilecheck

    # each script that imports numba before gpucourse (the real CUDA target without a GPU) starts with it
    for script in (experiments._PTX_SCRIPT, ptxinfo._CHILD, compilecheck._CHILD):
        assert script.startswith(compat.CHILD_PRELUDE)
    bare = SimpleNamespace(vstack=len)
    monkeypatch.setitem(sys.modules, "numpy", bare)
    exec(compat.CHILD_PRELUDE, {})
    assert bare.row_stack is len
