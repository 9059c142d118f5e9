"""Lab 06's hand-off kernel as its text gives it, in the variants the tests need: one template, shared by
tests/test_lab06_races.py (which grades it as a learner's cell), tests/test_races.py and
tests/test_accessibility.py (which run it)."""

import linecache

import numpy as np

from gpucourse.measure import runtime

cuda = runtime.cuda  # kernels reach `cuda` through a module-level name


def handoff(producer_fence: bool, consumer_fence: bool, capped: bool = True, atomic_flag: bool = True) -> str:
    """The source of the learner's cell ``handoff(data, flag, out, producer, spin_cap)``."""
    return f'''
@cuda.jit
def handoff(data, flag, out, producer, spin_cap):
    t = cuda.threadIdx.x
    if cuda.blockIdx.x == producer:
        data[t] = t + 1
        cuda.syncthreads()
        if t == 0:
            {"cuda.threadfence()" if producer_fence else "pass"}
            {"cuda.atomic.exch(flag, 0, 1)" if atomic_flag else "flag[0] = 1"}
    elif t == 0:
        seen = cuda.atomic.add(flag, 0, 0)
        polls = 0
        while seen == 0{" and polls < spin_cap" if capped else ""}:
            seen = cuda.atomic.add(flag, 0, 0)
            polls += 1
        {"cuda.threadfence()" if consumer_fence else "pass"}
        total = 0
        for i in range(data.size):
            total += data[i]
        out[0] = total
        out[1] = seen
'''


def compile_handoff(name: str, *variant, **options):
    """The kernel from ``handoff(*variant, **options)``, with its source where tracebacks and reports look."""
    source = handoff(*variant, **options)
    filename = f"<lab 06 hand-off: {name}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    scope = {"cuda": cuda, "np": np}
    exec(compile(source, filename, "exec"), scope)  # noqa: S102
    kernel = scope["handoff"]
    kernel.__name__ = name
    return kernel


# The text's kernel: the flag raised with a plain store; fences on both sides, or none (the broken one).
lab_handoff_fenced = compile_handoff("lab_handoff_fenced", True, True, atomic_flag=False)
lab_handoff_unfenced = compile_handoff("lab_handoff_unfenced", False, False, atomic_flag=False)
