"""Small repairs that let the course run on the library versions a site already has installed.

numba-cuda 0.30.x registers an overload for ``numpy.row_stack`` whenever NumPy is 2.x
(numba_cuda/numba/cuda/np/arrayobj.py), but NumPy 2.5 removed that alias of ``numpy.vstack``. On
such a stack the first kernel compile fails with "module 'numpy' has no attribute 'row_stack'":
seen on an H100 node with numpy 2.5.2 and numba-cuda 0.30.4 preinstalled
(data/reference/nvidia-h100-80gb-hbm3/first-contact/probe-without-shim.jsonl). Numba itself
(numba/np/arrayobj.py) guards the same line with ``hasattr``. Putting the alias back before numba
is imported is all that it needs; `make doctor` still reports NumPy outside numba's range."""

from __future__ import annotations

# (removed name, what it was an alias of): restored only where missing, never overwritten
NUMPY_ALIASES = (("row_stack", "vstack"),)


def restore_numpy_aliases(np=None) -> list[str]:
    """Put back the NumPy aliases numba-cuda still names; returns the names restored."""
    if np is None:
        import numpy as np
    restored = []
    for removed, target in NUMPY_ALIASES:
        if not hasattr(np, removed) and hasattr(np, target):
            setattr(np, removed, getattr(np, target))
            restored.append(removed)
    return restored


# The same repair for child processes that import numba before gpucourse (to get the real CUDA target
# on a machine without a GPU: ptxinfo, compile-check, lesson 02's PTX): prepended to their scripts.
# It cannot import this module: importing gpucourse there would choose the simulator.
CHILD_PRELUDE = "import numpy as _np\n" + "".join(
    f"if not hasattr(_np, {removed!r}) and hasattr(_np, {target!r}):\n    _np.{removed} = _np.{target}\n"
    for removed, target in NUMPY_ALIASES)
