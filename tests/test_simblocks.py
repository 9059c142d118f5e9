"""measure/simblocks.py (issue 50): numba's simulator runs a block on a condition variable, not by busy polling,
with numba's rules kept: a barrier opens when every live thread waits in it, an exception stops the block and is
raised by the launch, and ``syncthreads_blocked`` is true while a thread waits."""

from __future__ import annotations

import subprocess
import sys
import threading

import numpy as np
import pytest
from numba import cuda  # the simulator (conftest imported gpucourse first); kernels read it as a global

from gpucourse.measure import runtime, simblocks

pytestmark = pytest.mark.skipif(runtime.is_gpu(), reason="numba's simulator only")


def test_a_learner_s_kernel_gets_the_scheduler_from_a_fresh_import():
    code = ("import gpucourse\nfrom numba import cuda\nimport numba.cuda.simulator.kernel as k\n"
            "from gpucourse.measure import simblocks\n"
            "print(k.BlockManager.run is simblocks._run_block, k.BlockThread.syncthreads is simblocks._syncthreads)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={k: v for k, v in __import__("os").environ.items() if k != "GPUCOURSE_MODE"})
    assert out.stdout.split() == ["True", "True"], out.stderr[-2000:]


def test_threads_meet_at_every_barrier():
    @cuda.jit
    def reverse_twice(x):  # each barrier's reads see every thread's writes before it
        tile = cuda.shared.array(64, np.float32)
        i = cuda.threadIdx.x
        tile[i] = x[cuda.blockIdx.x * 64 + i]
        cuda.syncthreads()
        v = tile[63 - i]
        cuda.syncthreads()
        tile[i] = v * 2
        cuda.syncthreads()
        x[cuda.blockIdx.x * 64 + i] = tile[63 - i]

    x = np.arange(128, dtype=np.float32)
    reverse_twice[2, 64](x)
    assert np.array_equal(x, 2 * np.arange(128, dtype=np.float32))


def test_the_barrier_counts_and_votes():
    @cuda.jit
    def votes(flags, out):
        i = cuda.threadIdx.x
        out[0] = cuda.syncthreads_count(flags[i])
        out[1] = cuda.syncthreads_and(flags[i])
        out[2] = cuda.syncthreads_or(flags[i])

    out = np.zeros(3, dtype=np.int32)
    votes[1, 32](np.array([1] * 5 + [0] * 27, dtype=np.int32), out)
    assert list(out) == [5, 0, 1]


def test_threads_that_ended_no_longer_hold_the_barrier():
    @cuda.jit
    def half_leave(x):
        i = cuda.threadIdx.x
        if i >= 16:
            return
        cuda.syncthreads()
        x[i] = 1

    x = np.zeros(32, dtype=np.int32)
    half_leave[1, 32](x)
    assert list(x) == [1] * 16 + [0] * 16


def test_an_exception_stops_the_block_and_reaches_the_launch():
    @cuda.jit
    def one_fails(x):
        i = cuda.threadIdx.x
        if i == 5:
            import time

            time.sleep(0.2)  # every other thread waits in the barrier by now
            x[1000] = 1  # out of bounds
        cuda.syncthreads()
        x[i] = 7  # never reached: the barrier stays shut after a failure, and the block is aborted

    x = np.zeros(32, dtype=np.int32)
    with pytest.raises(IndexError, match=r"tid=\[5, 0, 0\]"):
        one_fails[1, 32](x)
    assert not x.any()
    # the simulator still launches afterwards
    test_threads_meet_at_every_barrier()


def test_a_thread_waiting_in_the_barrier_says_so_and_nobody_polls(monkeypatch):
    seen = []
    polls = []
    alive = threading.Thread.is_alive
    monkeypatch.setattr(threading.Thread, "is_alive", lambda self: polls.append(1) or alive(self))

    @cuda.jit
    def watch(x):
        i = cuda.threadIdx.x
        if i == 0:
            import time

            time.sleep(0.2)  # the others are in the barrier by now
            me = threading.current_thread()
            seen.append(sorted(t.syncthreads_blocked for t in threading.enumerate()
                               if getattr(t, "_manager", None) is me._manager and t is not me))
        cuda.syncthreads()
        seen.append(threading.current_thread().syncthreads_blocked)
        x[i] = 1

    x = np.zeros(8, dtype=np.int32)
    watch[1, 8](x)
    assert seen[0] == [True] * 7 and seen[1:] == [False] * 8 and x.all()
    assert not polls, "the manager polled its threads"


def test_install_is_idempotent():
    """Installed once (in this process the microscope's warp intrinsics may since have wrapped the block's run:
    the fresh import above checks what a learner's kernel gets); installing again changes nothing."""
    import numba.cuda.simulator.kernel as kernel

    run, thread_run, syncthreads = kernel.BlockManager.run, kernel.BlockThread.run, kernel.BlockThread.syncthreads
    simblocks.install()
    simblocks.install()
    assert kernel.BlockManager._gpucourse_scheduler and syncthreads is simblocks._syncthreads
    assert (kernel.BlockManager.run, kernel.BlockThread.run, kernel.BlockThread.syncthreads) == (
        run, thread_run, syncthreads)


def test_the_barrier_opens_for_every_live_thread_and_never_after_a_failure():
    class Thread:
        syncthreads_blocked = True

    block = simblocks._Block(live=3)
    block.waiting = [Thread(), Thread()]
    block.open_if_all_arrived()
    assert block.generation == 0  # one live thread still running
    block.live = 2  # it ended
    block.failed = object()
    block.open_if_all_arrived()
    assert block.generation == 0 and len(block.waiting) == 2  # a failure keeps it shut: the block is aborted
    block.failed = None
    waiting = list(block.waiting)
    with block.cv:
        block.open_if_all_arrived()
    assert block.generation == 1 and not block.waiting and not any(t.syncthreads_blocked for t in waiting)
