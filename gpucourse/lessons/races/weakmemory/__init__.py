"""The race scheduler and the course's weak-memory model (lesson 06). A MODEL, not NVIDIA's hardware.

Numba's simulator runs one thread at a time and makes every store visible everywhere at once,
so it hides races: 2048 racing ``+= 1`` give 2048. This module runs a ``@cuda.jit`` kernel under
the microscope's race scheduler (``gpucourse.microscope``: the kernel's Python source with a
*chosen* interleaving, one memory operation at a time) and plugs in, as the microscope's
memory-system hook, a memory object that decides the value every load reads:

    report = run_kernel(kernel, griddim, blockdim, *args, schedule="random", seed=0, memory="weak")
    report.lost_updates(), report.stale_reads(), report.events, timeline_figure(report)

* ``schedule``: "sequential" (the lowest-numbered ready thread runs: like the plain simulator),
  "round-robin" (one memory operation per thread in turn: every read-modify-write overlaps) or
  "random" (a seeded random ready thread each step).
* ``memory``: "sc" — ``SequentialMemory``, every load reads the newest store; "weak" —
  ``WeakMemory``, the course's operational model of a weakly ordered GPU (below); or "weak-acqrel"
  — the same with every ``threadfence`` weakened to a release/acquire fence (``fence.acq_rel``).
* ``resident_blocks``: how many blocks may run at once (default: all). Blocks start in index
  order; a block that spins on another block that is not resident can only give up.

``WeakMemory`` — each block (one SM) sees global memory through its own view:

1. A store takes its place in its location's order at once, but *other* blocks may keep reading
   older values of that location: writes reach other blocks late, and in any order.
2. Loads never go back in time (coherence): once a block has read a value, it reads that value
   or a newer one. A block always sees its own writes; threads of one block share one view.
3. Plain loads and stores are *weak* (PTX ``ld``/``st`` with no ``.relaxed``/``.acquire``/``.release``
   qualifier); atomics are *strong* (morally strong in the PTX ISA's words). Only strong accesses
   synchronise: a strong write carries the view its block last published, and a strong read
   collects it for the block's next fence (PTX "release pattern" / "acquire pattern"). A weak flag
   carries nothing.
4. Two kinds of GPU-scope fence. ``cuda.threadfence()`` is PTX ``membar.gl``, which the PTX ISA
   defines as ``fence.sc.gpu``: it *publishes* everything its block has seen or written (release),
   brings the block's view up to everything collected by strong reads (acquire) and — being
   sequentially consistent — also up to everything that *any* earlier ``fence.sc`` published (all
   ``fence.sc`` operations are totally ordered). That last part is what makes a hand-off with a
   plain (weak) flag work. A ``fence.acq_rel`` (litmus statement ``fence_acq_rel()``; Numba has no
   call for it) only releases and acquires: it needs a strong flag, and it does not forbid store
   buffering.
5. Atomics act on the newest value (they happen at L2). They are *not* fences (CUDA Programming
   Guide, "Atomic Functions"): they order nothing else, but a chain of atomics on one location
   passes on what each writer published (a release sequence).
6. ``threadfence_block()`` and ``syncthreads()`` have block scope: they order nothing across
   blocks. Shared memory is per block and sequentially consistent.

Litmus tests (``LITMUS``, ``explore``, ``litmus_table``) list, by exhaustive search, which weak
outcomes the model allows without fences and forbids with them, next to what the PTX memory
model says (PTX ISA, "Memory Consistency Model"). The model is deliberately *stronger* than PTX
in three places: inside a block (it shows no weak behaviour between threads of one block), for
load buffering (it never delays a load past a later store), and for coherence of plain loads
(CoRR: PTX orders reads of one location only when they are morally strong; this model never lets
any read go back). Passing under it is necessary, not sufficient.

Under "random" the model's own choices (how stale a load may be) are random too; under
"sequential" and "round-robin" each load reads the stalest value the model allows that its
block has not read before: values arrive late, but they arrive (so capped spin-waits finish).

The parts, each importing only those before it: ``models`` (the memories and their choosers), ``litmus`` (the
litmus tests), ``runs`` (``run_kernel``, ``WeakMemoryHook``, ``RaceReport``) and ``timeline`` (``timeline_figure``);
every public name is here too (``weakmemory.run_kernel``).
"""

from gpucourse.lessons.races.weakmemory.litmus import LITMUS, Litmus, allows, explore, litmus_table, sample
from gpucourse.lessons.races.weakmemory.models import (
    FENCE_SCOPES,
    MEMORIES,
    MEMORY_CLASSES,
    RandomChooser,
    ReleaseAcquireMemory,
    SequentialMemory,
    StalestChooser,
    WeakMemory,
)
from gpucourse.lessons.races.weakmemory.runs import (
    DEFAULT_MAX_STEPS,
    EVENT_COLUMNS,
    LOST_COLUMNS,
    MAX_THREADS,
    SCHEDULES,
    SHARED_GARBAGE,
    RaceReport,
    TooManySteps,
    WeakMemoryHook,
    run_kernel,
)
from gpucourse.lessons.races.weakmemory.timeline import timeline_figure

__all__ = [
    "DEFAULT_MAX_STEPS", "EVENT_COLUMNS", "FENCE_SCOPES", "LITMUS", "LOST_COLUMNS", "MAX_THREADS", "MEMORIES",
    "MEMORY_CLASSES", "SCHEDULES", "SHARED_GARBAGE", "Litmus", "RaceReport", "RandomChooser", "ReleaseAcquireMemory",
    "SequentialMemory", "StalestChooser", "TooManySteps", "WeakMemory", "WeakMemoryHook", "allows", "explore",
    "litmus_table", "run_kernel", "sample", "timeline_figure",
]
