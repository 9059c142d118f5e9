"""Lesson 06 "Races and the memory consistency model": the kernels learners read (and the constants they need)."""

from __future__ import annotations

import numpy as np
from numba import cuda  # gpucourse (imported above through its package) has already chosen the mode

MAX_BINS = 1024  # one shared-memory histogram of int32 bins per block: 4 KiB
LITMUS_SLOT_STRIDE = 32  # int32 elements: each pair's flag and data sit in their own 128-byte line
REDUCE_THREADS = 128  # the last-block reduction's shared array (blocks of up to 128 threads)
MAX_FEATURES = 32


# --- 1. Lost updates: the histogram -------------------------------------------------------------


@cuda.jit
def histogram_racy(values, counts):
    start, stride, nbins = cuda.grid(1), cuda.gridsize(1), counts.size
    for i in range(start, values.size, stride):
        b = min(int(values[i] * np.float32(nbins)), nbins - 1)  # fp32: value × int64 is float64
        counts[b] += 1  # load, add, store: a store by another thread in between is lost


@cuda.jit
def histogram_atomic(values, counts):
    start, stride, nbins = cuda.grid(1), cuda.gridsize(1), counts.size
    for i in range(start, values.size, stride):
        b = min(int(values[i] * np.float32(nbins)), nbins - 1)  # fp32: value × int64 is float64
        cuda.atomic.add(counts, b, 1)  # one indivisible read-modify-write at L2


@cuda.jit
def histogram_privatised(values, counts):
    local = cuda.shared.array(MAX_BINS, np.int32)  # this block's own histogram
    t, nbins = cuda.threadIdx.x, counts.size
    for b in range(t, nbins, cuda.blockDim.x):
        local[b] = 0  # shared memory starts with garbage
    cuda.syncthreads()
    start, stride = cuda.grid(1), cuda.gridsize(1)
    for i in range(start, values.size, stride):
        b = min(int(values[i] * np.float32(nbins)), nbins - 1)  # fp32: value × int64 is float64
        cuda.atomic.add(local, b, 1)  # contention only inside the block, in fast shared memory
    cuda.syncthreads()  # every thread's increments are in `local` before the merge reads it
    for b in range(t, nbins, cuda.blockDim.x):
        if local[b] != 0:
            cuda.atomic.add(counts, b, local[b])  # one global atomic per bin per block


@cuda.jit
def _zero_int32(array):
    i = cuda.grid(1)
    if i < array.size:
        array[i] = 0


@cuda.jit
def racing_counter(counter):
    counter[0] += 1


# --- 2. Message passing across blocks --------------------------------------------------------------


@cuda.jit
def mp_kernel(data, flag, out, fence_producer, fence_consumer):
    """The MP litmus test: block 0 writes data then flag; block 1 reads flag then data."""
    if cuda.blockIdx.x == 0:
        data[0] = 1
        if fence_producer:
            cuda.threadfence()
        flag[0] = 1
    else:
        seen = flag[0]
        if fence_consumer:
            cuda.threadfence()
        out[0] = seen
        out[1] = data[0]


@cuda.jit
def handoff_kernel(data, flag, out, producer_block, spin_cap, fence):
    """Block ``producer_block`` publishes data[0] = 42 and raises a flag; another block waits for it.

    The flag is written and read with atomics: *strong* accesses in the PTX memory model, so fence +
    flag write is a release pattern and flag read + fence an acquire pattern. A plain ``flag[0] = 1``
    is a *weak* store; it would still work here only because ``threadfence`` is ``fence.sc``.
    The wait is capped at ``spin_cap`` polls: nothing guarantees the producer is resident."""
    if cuda.threadIdx.x != 0:
        return
    if cuda.blockIdx.x == producer_block:
        data[0] = 42
        if fence:
            cuda.threadfence()  # release: the data is visible before the flag
        cuda.atomic.exch(flag, 0, 1)  # a strong write of the flag
    else:
        seen = cuda.atomic.add(flag, 0, 0)  # a strong read: Numba has no volatile or ld.acquire load
        polls = 0
        while seen == 0 and polls < spin_cap:  # never wait without a cap
            seen = cuda.atomic.add(flag, 0, 0)
            polls += 1
        if fence:
            cuda.threadfence()  # acquire: reads after this see what the producer published
        out[0] = seen
        out[1] = data[0]
        out[2] = polls


@cuda.jit
def mp_harness(data, flag, counts, scratch, fence_producer, fence_consumer, spin_cap, stress_iters, round_):
    """Many MP tests at once on a GPU: blocks come in pairs; thread 0 of one block produces, thread 0 of
    the other consumes (which one alternates by round); every other thread stresses memory."""
    pair = cuda.blockIdx.x // 2
    slot = pair * LITMUS_SLOT_STRIDE
    producer = (cuda.blockIdx.x + round_) % 2 == 0
    if cuda.threadIdx.x == 0:
        if producer:
            data[slot] = 1
            if fence_producer:
                cuda.threadfence()
            flag[slot] = 1
        else:
            seen = cuda.atomic.add(flag, slot, 0)
            polls = 0
            while seen == 0 and polls < spin_cap:
                seen = cuda.atomic.add(flag, slot, 0)
                polls += 1
            if fence_consumer:
                cuda.threadfence()
            value = data[slot]
            cuda.atomic.add(counts, seen * 2 + value, 1)
    else:
        n = scratch.size
        j = (cuda.grid(1) * 97 + round_ * 31) % n
        for k in range(stress_iters):  # loads and stores to scattered lines keep the memory system busy
            scratch[j] = scratch[(j + 4096) % n] + 1
            j = (j + 1031 + k) % n


@cuda.jit
def _reset_litmus(data, flag):
    i = cuda.grid(1)
    if i < data.size:
        data[i] = 0
        flag[i] = 0


# --- 4. Correct patterns ---------------------------------------------------------------------------------


@cuda.jit
def reduce_last_block(values, partial, ticket, out, fence):
    """Sum ``values``: every block sums its share, publishes it, takes a ticket; the last block adds
    the partial sums (NVIDIA's threadFenceReduction; the reader-side fence is the PTX model's acquire)."""
    s = cuda.shared.array(REDUCE_THREADS, np.float64)
    last = cuda.shared.array(1, np.int32)
    t = cuda.threadIdx.x
    acc = 0.0
    for i in range(cuda.grid(1), values.size, cuda.gridsize(1)):
        acc += values[i]
    s[t] = acc
    cuda.syncthreads()
    step = cuda.blockDim.x // 2
    while step > 0:  # tree sum in shared memory (blockDim.x is a power of two)
        if t < step:
            s[t] += s[t + step]
        cuda.syncthreads()
        step //= 2
    if t == 0:
        partial[cuda.blockIdx.x] = s[0]
        if fence:
            cuda.threadfence()  # release: the partial sum is visible before the ticket is taken
        taken = cuda.atomic.inc(ticket, 0, cuda.gridDim.x - 1)  # wraps to 0 for the next launch
        last[0] = taken == cuda.gridDim.x - 1
    cuda.syncthreads()
    if last[0] and t == 0:
        if fence:
            cuda.threadfence()  # acquire: see every partial sum published before its ticket
        total = 0.0
        for b in range(cuda.gridDim.x):
            total += partial[b]
        out[0] = total


@cuda.jit
def gradient_kernel(x, y, w, grad, atomic_merge):
    """Least-squares gradient: each block sums its examples' gradients in shared memory, then merges
    them into ``grad`` — with an atomic (correct) or with a plain ``+=`` (blocks race)."""
    part = cuda.shared.array(MAX_FEATURES, np.float32)
    t, nf = cuda.threadIdx.x, w.size
    if t < nf:
        part[t] = 0.0
    cuda.syncthreads()
    i = cuda.grid(1)
    if i < y.size:
        err = -y[i]
        for j in range(nf):
            err += x[i, j] * w[j]
        for j in range(nf):
            cuda.atomic.add(part, j, err * x[i, j])
    cuda.syncthreads()
    if t < nf:
        if atomic_merge:
            cuda.atomic.add(grad, t, part[t])
        else:
            grad[t] += part[t]  # the bug: another block's merge between this load and store is lost
