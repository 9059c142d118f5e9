"""Numba's CUDA simulator runs a block's threads with a manager that busy-polls them (``BlockManager.run``:
``is_alive`` and ``syncthreads_blocked`` of every thread, over and over, while they wait for the GIL it holds).
Here the same rules run on one condition variable instead: a thread says when it reaches ``syncthreads`` or
ends, the last of a block's live threads to arrive releases the barrier, and the manager sleeps until every
thread has ended or one has failed (issue 50: about half a kernel's simulator time was the polling).

The rules kept, as numba-cuda 0.30's simulator has them: a barrier opens when every live thread of the block
waits in it (a thread that ended no longer counts); a thread's exception stops the block (every other thread
aborted at its next barrier, the barrier not opened) and is raised by the launch; ``syncthreads_blocked`` is
true exactly while a thread waits in a barrier (the microscope's warp intrinsics read it).

``install()`` is idempotent; ``gpucourse.measure.runtime`` installs it in simulator mode once numba's simulator
is imported (``install_when_imported``).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import threading

import numpy as np  # already loaded by gpucourse's import

SIMULATOR_KERNEL = "numba.cuda.simulator.kernel"
_numba_syncthreads = None  # numba's own BlockThread.syncthreads, kept by install()
_BlockThread = None  # numba's simulator's thread class, set by install()


class _Block:
    """One block's barrier and bookkeeping, under one lock."""

    def __init__(self, live: int):
        self.cv = threading.Condition()  # the barrier's waiters
        self.ended = threading.Condition(self.cv._lock)  # the manager's wait: every thread ended, or one failed
        self.live = live  # threads that have not ended
        self.waiting: list = []  # threads in the barrier now
        self.generation = 0  # barriers opened so far
        self.failed = None  # the first thread that ended with an exception

    def open_if_all_arrived(self) -> None:
        """With ``cv`` held: open the barrier when every live thread waits in it (never after a failure)."""
        if self.failed is None and self.waiting and len(self.waiting) == self.live:
            for t in self.waiting:
                t.syncthreads_blocked = False
            self.waiting.clear()
            self.generation += 1
            self.cv.notify_all()


def _syncthreads(self) -> None:
    if self.abort:
        raise RuntimeError("abort flag set on syncthreads call")
    block = getattr(self._manager, "_gpucourse_block", None)
    if block is None:  # a manager this scheduler did not start
        return _numba_syncthreads(self)
    with block.cv:
        self.syncthreads_blocked = True
        block.waiting.append(self)
        generation = block.generation
        block.open_if_all_arrived()
        while block.generation == generation and not self.abort:
            block.cv.wait()
    if self.abort:
        raise RuntimeError("abort flag set on syncthreads clear")


def _ended(thread) -> None:
    """A thread of the block ended (``exception`` set if it failed)."""
    block = getattr(thread._manager, "_gpucourse_block", None)
    if block is None:  # a manager this scheduler did not start
        return
    with block.cv:
        block.live -= 1
        if thread.exception is not None and block.failed is None:
            block.failed = thread
        block.open_if_all_arrived()
        if not block.live or block.failed is not None:  # wake the manager only when it has work
            block.ended.notify()


def _run_block(self, grid_point, *args) -> None:
    def target():
        self._f(*args)

    threads = [_BlockThread(target, self, grid_point, block_point, self._debug)
               for block_point in np.ndindex(*self._block_dim)]
    block = self._gpucourse_block = _Block(len(threads))
    for t in threads:
        t.start()
    with block.cv:
        while block.live and block.failed is None:
            block.ended.wait()
        failed = block.failed
        if failed is not None:  # abort the others; do not join them (as numba's manager: for debugging)
            for t in threads:
                t.abort = True
                t.syncthreads_blocked = False
            block.generation += 1
            block.cv.notify_all()
    if failed is not None:
        raise failed.exception[0].with_traceback(failed.exception[1])
    for t in threads:
        if t.exception:
            raise t.exception[0].with_traceback(t.exception[1])


def install() -> None:
    """Put the condition-variable scheduler into numba's simulator (idempotent)."""
    from numba.cuda.simulator import kernel

    if getattr(kernel.BlockManager, "_gpucourse_scheduler", False):
        return
    global _numba_syncthreads, _BlockThread
    _BlockThread = kernel.BlockThread
    original_thread_run, _numba_syncthreads = kernel.BlockThread.run, kernel.BlockThread.syncthreads

    def thread_run(self):  # numba's run keeps the exception on the thread; then say it ended
        try:
            original_thread_run(self)
        finally:
            _ended(self)

    kernel.BlockThread.run = thread_run
    kernel.BlockThread.syncthreads = _syncthreads
    kernel.BlockManager.run = _run_block
    kernel.BlockManager._gpucourse_scheduler = True


class _AfterImport(importlib.abc.MetaPathFinder):
    """Install the scheduler the moment numba's simulator kernel module has loaded."""

    def find_spec(self, name, path, target=None):
        if name != SIMULATOR_KERNEL:
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        load = spec.loader.exec_module

        def exec_module(module):
            load(module)
            install()

        spec.loader.exec_module = exec_module
        return spec


def install_when_imported() -> None:
    """Install now if numba's simulator is loaded, else as soon as it is."""
    if SIMULATOR_KERNEL in sys.modules:
        install()
    elif not any(isinstance(f, _AfterImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterImport())
