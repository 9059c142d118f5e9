"""The ``cuda`` module a traced kernel sees: Numba's simulator module, rewired to the tracer.

Indices come from the scheduler's current thread; ``syncthreads``, fences, atomics, shared arrays
and the warp intrinsics go through the tracer so that they are recorded and scheduled.
"""

from __future__ import annotations

import sys

import numpy as np
from numba.cuda.simulator.kernelapi import FakeCUDAModule

from gpucourse.microscope.errors import MicroscopeError
from gpucourse.microscope.memory import poison_local
from gpucourse.microscope.tracer import _as_dtype
from gpucourse.microscope.warp import FULL_MASK, WARP_SIZE


class _Shared:
    def __init__(self, tracer):
        self._tracer = tracer

    def array(self, shape, dtype, alignment=None):
        return self._tracer.shared_array(shape, dtype, sys._getframe(1))


class _Local:
    def array(self, shape, dtype, alignment=None):
        return poison_local(shape, _as_dtype(dtype))


class _Atomic:
    """``cuda.atomic.*``: one indivisible read-modify-write each, seen by the memory system."""

    def __init__(self, tracer):
        self._tracer = tracer

    def _do(self, array, index, update, frame):
        return self._tracer.atomic(array, index, update, frame)

    def add(self, array, index, val):
        return self._do(array, index, lambda old: old + val, sys._getframe(1))

    def sub(self, array, index, val):
        return self._do(array, index, lambda old: old - val, sys._getframe(1))

    def and_(self, array, index, val):
        return self._do(array, index, lambda old: old & val, sys._getframe(1))

    def or_(self, array, index, val):
        return self._do(array, index, lambda old: old | val, sys._getframe(1))

    def xor(self, array, index, val):
        return self._do(array, index, lambda old: old ^ val, sys._getframe(1))

    def inc(self, array, index, val):
        return self._do(array, index, lambda old: 0 if old >= val else old + 1, sys._getframe(1))

    def dec(self, array, index, val):
        return self._do(array, index, lambda old: val if old == 0 or old > val else old - 1, sys._getframe(1))

    def exch(self, array, index, val):
        return self._do(array, index, lambda old: val, sys._getframe(1))

    def max(self, array, index, val):
        return self._do(array, index, lambda old: max(old, val), sys._getframe(1))

    def min(self, array, index, val):
        return self._do(array, index, lambda old: min(old, val), sys._getframe(1))

    def nanmax(self, array, index, val):
        return self._do(array, index, lambda old: np.nanmax([old, val]), sys._getframe(1))

    def nanmin(self, array, index, val):
        return self._do(array, index, lambda old: np.nanmin([old, val]), sys._getframe(1))

    def cas(self, array, index, old, val):
        return self._do(array, index, lambda loaded: val if loaded == old else loaded, sys._getframe(1))

    def compare_and_swap(self, array, old, val):
        index = (0,) * array.ndim
        return self._do(array, index, lambda loaded: val if loaded == old else loaded, sys._getframe(1))


class _GridGroup:
    def sync(self):
        raise MicroscopeError("grid-wide sync (cuda.cg.this_grid().sync()) is not available in the microscope")


class _CooperativeGroups:
    def this_grid(self):
        return _GridGroup()


class TracedCUDAModule(FakeCUDAModule):
    def __init__(self, tracer, grid_dim, block_dim):
        super().__init__(grid_dim, block_dim, 0)
        self._tracer, self._sched = tracer, tracer.sched
        self._shared, self._local, self._atomic = _Shared(tracer), _Local(), _Atomic(tracer)
        self._cg = _CooperativeGroups()

    def __getattr__(self, name):
        # Anything the simulator's module lacks (types such as cuda.float32...) comes from numba.cuda.
        if name.startswith("__"):
            raise AttributeError(name)
        from numba import cuda

        return getattr(cuda, name)

    @property
    def threadIdx(self):
        return self._sched.current.threadIdx

    @property
    def blockIdx(self):
        return self._sched.current.blockIdx

    @property
    def laneid(self):
        return self._sched.current.lane

    def popc(self, val):
        return (int(val) & 0xFFFFFFFFFFFFFFFF).bit_count()

    # -- barriers and fences ----------------------------------------------------------------------

    def syncthreads(self):
        self._tracer.barrier("syncthreads", None, sys._getframe(1))

    def syncthreads_count(self, value):
        return self._tracer.barrier("syncthreads_count", value, sys._getframe(1))

    def syncthreads_and(self, value):
        return self._tracer.barrier("syncthreads_and", value, sys._getframe(1))

    def syncthreads_or(self, value):
        return self._tracer.barrier("syncthreads_or", value, sys._getframe(1))

    def threadfence_block(self):
        self._tracer.fence("block")

    def threadfence(self):
        self._tracer.fence("device")

    def threadfence_system(self):
        self._tracer.fence("system")

    # -- warp intrinsics --------------------------------------------------------------------------------

    def shfl_sync(self, mask, value, src_lane):
        return self._tracer.warp_op("shfl_sync", mask, value, src_lane, sys._getframe(1))

    def shfl_up_sync(self, mask, value, delta):
        return self._tracer.warp_op("shfl_up_sync", mask, value, delta, sys._getframe(1))

    def shfl_down_sync(self, mask, value, delta):
        return self._tracer.warp_op("shfl_down_sync", mask, value, delta, sys._getframe(1))

    def shfl_xor_sync(self, mask, value, lane_mask):
        return self._tracer.warp_op("shfl_xor_sync", mask, value, lane_mask, sys._getframe(1))

    def all_sync(self, mask, predicate):
        return self._tracer.warp_op("all_sync", mask, predicate, None, sys._getframe(1))

    def any_sync(self, mask, predicate):
        return self._tracer.warp_op("any_sync", mask, predicate, None, sys._getframe(1))

    def eq_sync(self, mask, predicate):
        return self._tracer.warp_op("eq_sync", mask, predicate, None, sys._getframe(1))

    def ballot_sync(self, mask, predicate):
        return self._tracer.warp_op("ballot_sync", mask, predicate, None, sys._getframe(1))

    def match_any_sync(self, mask, value):
        return self._tracer.warp_op("match_any_sync", mask, value, None, sys._getframe(1))

    def match_all_sync(self, mask, value):
        return self._tracer.warp_op("match_all_sync", mask, value, None, sys._getframe(1))

    def syncwarp(self, mask=FULL_MASK):
        self._tracer.warp_op("syncwarp", mask, None, None, sys._getframe(1))

    def activemask(self):
        return self._tracer.warp_op("activemask", None, None, None, sys._getframe(1))

    def lanemask_lt(self):
        return (1 << (self._sched.current.tid % WARP_SIZE)) - 1
