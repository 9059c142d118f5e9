"""The race scheduler (lost updates), the race report, and the memory-system hook."""

import numpy as np
import pandas as pd
import pytest
from numba import cuda, float32

from gpucourse import microscope

TILE = 8


@cuda.jit
def increment(counter):
    counter[0] += 1


@cuda.jit
def atomic_increment(counter):
    cuda.atomic.add(counter, 0, 1)


@cuda.jit
def tiled_matmul(c, a, b, sync):
    sa = cuda.shared.array((TILE, TILE), float32)
    sb = cuda.shared.array((TILE, TILE), float32)
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    row = cuda.blockIdx.y * TILE + ty
    col = cuda.blockIdx.x * TILE + tx
    acc = 0.0
    for t in range(a.shape[1] // TILE):
        sa[ty, tx] = a[row, t * TILE + tx]
        sb[ty, tx] = b[t * TILE + ty, col]
        if sync:
            cuda.syncthreads()
        for k in range(TILE):
            acc += sa[ty, k] * sb[k, tx]
        if sync:
            cuda.syncthreads()
    c[row, col] = acc


@cuda.jit
def last_block_sums(partial, ticket, total, fence):
    # threadFenceReduction: each block publishes a partial sum; the last block to arrive adds them.
    if cuda.threadIdx.x == 0:
        partial[cuda.blockIdx.x] = cuda.blockIdx.x + 1
        if fence:
            cuda.threadfence()
        if cuda.atomic.add(ticket, 0, 1) == cuda.gridDim.x - 1:
            s = 0
            for b in range(cuda.gridDim.x):
                s += partial[b]
            total[0] = s


@cuda.jit
def warp_exchange(out, sync):
    buf = cuda.shared.array(32, float32)
    lane = cuda.threadIdx.x
    buf[lane] = lane
    if sync:
        cuda.syncwarp()
    out[lane] = buf[31 - lane]


def _matmul_inputs(n=16):
    rng = np.random.default_rng(0)
    return rng.random((n, n), dtype=np.float32), rng.random((n, n), dtype=np.float32), np.zeros((n, n), np.float32)


@pytest.mark.parametrize("schedule", ["random", "round-robin"])
def test_non_atomic_increment_loses_updates_and_atomic_does_not(schedule):
    counter = np.zeros(1, dtype=np.int64)
    racy = microscope.trace(increment, 8, 256, counter, schedule=schedule, seed=1)
    assert counter[0] < 2048
    assert racy.race_count() > 0
    # A lost update means some thread B loaded counter[0] before another thread A stored it and then
    # stored after A: A's store after B's load is a read-write race, B's store after A's is write-write.
    assert set(racy.races().kind) >= {"read-write", "write-write"}
    counter[:] = 0
    safe = microscope.trace(atomic_increment, 8, 256, counter, schedule=schedule, seed=1)
    assert counter[0] == 2048
    assert safe.race_count() == 0 and safe.races().empty


def test_sequential_schedule_hides_lost_updates_but_still_reports_the_race():
    counter = np.zeros(1, dtype=np.int64)
    report = microscope.trace(increment, 2, 64, counter)
    assert counter[0] == 128  # like Numba's simulator: one thread after another
    races = report.races()
    assert set(races.scope) == {"same warp", "same block", "different blocks"}
    assert (races.source_a == "counter[0] += 1").all() and (races.array == "counter").all()


def test_missing_syncthreads_in_a_tiled_kernel_is_reported_as_a_race():
    a, b, c = _matmul_inputs()
    ok = microscope.trace(tiled_matmul, (2, 2), (TILE, TILE), c, a, b, True, schedule="random", seed=0)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5)
    assert ok.race_count() == 0
    broken = microscope.trace(tiled_matmul, (2, 2), (TILE, TILE), c, a, b, False, schedule="random", seed=0)
    assert not np.allclose(c, a @ b, rtol=1e-5)
    races = broken.races()
    pairs = set(zip(races.source_a, races.source_b, strict=True))
    assert ("sa[ty, tx] = a[row, t * TILE + tx]", "acc += sa[ty, k] * sb[k, tx]") in pairs  # read before written
    assert ("acc += sa[ty, k] * sb[k, tx]", "sa[ty, tx] = a[row, t * TILE + tx]") in pairs  # overwritten too early
    assert set(races.space) == {"shared"}


def test_fence_plus_atomic_orders_the_last_block_reduction():
    for fence, racy in ((1, False), (0, True)):
        partial, ticket, total = np.zeros(4, np.int64), np.zeros(1, np.int64), np.zeros(1, np.int64)
        report = microscope.trace(last_block_sums, 4, 32, partial, ticket, total, fence)
        assert total[0] == 1 + 2 + 3 + 4
        found = report.races()
        assert (not found[found.array == "partial"].empty) == racy
        assert found[found.array == "ticket"].empty  # atomics never race with atomics


def test_syncwarp_orders_lanes_of_a_warp():
    out = np.zeros(32, np.float32)
    assert microscope.trace(warp_exchange, 1, 32, out, True).race_count() == 0
    assert list(out) == list(range(31, -1, -1))
    unsynced = microscope.trace(warp_exchange, 1, 32, out, False).races()
    assert set(unsynced.scope) == {"same warp"}


def test_same_launch_and_seed_give_the_same_report():
    def run(seed):
        counter = np.zeros(1, dtype=np.int64)
        report = microscope.trace(increment, 4, 64, counter, schedule="random", seed=seed)
        return counter[0], report

    (count1, r1), (count2, r2) = run(7), run(7)
    assert count1 == count2
    for table in ("memory", "branches", "races", "requests", "warps"):
        pd.testing.assert_frame_equal(getattr(r1, table)(), getattr(r2, table)())
    assert repr(r1) == repr(r2)
    a, b, c = _matmul_inputs()
    t1 = microscope.trace(tiled_matmul, (2, 2), (TILE, TILE), c, a, b, False, schedule="random", seed=3)
    c1 = c.copy()
    t2 = microscope.trace(tiled_matmul, (2, 2), (TILE, TILE), c, a, b, False, schedule="random", seed=3)
    assert np.array_equal(c, c1, equal_nan=True)  # NaN: a tile read before it was written
    pd.testing.assert_frame_equal(t1.races(), t2.races())
    pd.testing.assert_frame_equal(t1.banks(), t2.banks())


class CountingMemory(microscope.MemorySystem):
    """Sees everything; makes every global load of `data` read 5 (the hook decides the value)."""

    def __init__(self):
        self.calls = {"load": 0, "store": 0, "atomic": 0, "fence": 0, "barrier": 0, "end": 0}

    def load(self, thread, space, array, index, address):
        self.calls["load"] += 1
        return array.dtype.type(5) if space == "global" else super().load(thread, space, array, index, address)

    def store(self, thread, space, array, index, address, value):
        self.calls["store"] += 1
        super().store(thread, space, array, index, address, value)

    def atomic(self, thread, space, array, index, address, update):
        self.calls["atomic"] += 1
        return super().atomic(thread, space, array, index, address, update)

    def fence(self, thread, scope):
        self.calls["fence"] += 1

    def barrier(self, block):
        self.calls["barrier"] += 1

    def kernel_end(self):
        self.calls["end"] += 1


@cuda.jit
def hooked(data, out, counter):
    t = cuda.threadIdx.x
    out[t] = data[t] + 1
    cuda.threadfence()
    cuda.syncthreads()
    cuda.atomic.add(counter, 0, 1)


def test_memory_system_sees_every_access_and_decides_loads():
    memory = CountingMemory()
    data, out, counter = np.zeros(32), np.zeros(32), np.zeros(1)
    microscope.trace(hooked, 2, 16, data, out, counter, memory=memory, schedule="round-robin")
    assert (out[:16] == 6).all()
    assert memory.calls == {"load": 32, "store": 32, "atomic": 32, "fence": 32, "barrier": 2, "end": 1}
