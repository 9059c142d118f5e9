"""The race scheduler and the course's weak-memory model (lesson 06). A MODEL, not NVIDIA's hardware.

Numba's simulator runs one thread at a time and makes every store visible everywhere at once,
so it hides races: 2048 racing ``+= 1`` give 2048. This module runs a ``@cuda.jit`` kernel's
Python source with a *chosen* interleaving, one memory operation at a time, and lets a
memory-system object decide the value every load reads:

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
"""

from __future__ import annotations

import bisect
import inspect
import itertools
import linecache
import operator
import random
import re
import sys
import types
from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from gpucourse import validate
from gpucourse.errors import CourseError, InvalidConfig
from gpucourse.viz import charts

try:  # one-microsecond switches between simulated threads; OS threads otherwise (same results, slower)
    import greenlet as _greenlet
except ImportError:  # pragma: no cover - greenlet is in the course's pinned environment
    _greenlet = None

try:  # the microscope's race scheduler, with its hook for a memory system (microscope/memory.py)
    from gpucourse.microscope import MemorySystem as _MicroscopeMemory
    from gpucourse.microscope import trace as _microscope_trace
except ImportError:  # pragma: no cover - the standalone scheduler below does the same job
    _MicroscopeMemory, _microscope_trace = object, None

SCHEDULES = ("sequential", "round-robin", "random")
MEMORIES = ("sc", "weak", "weak-acqrel")
ENGINES = ("auto", "microscope", "standalone")
FENCE_SCOPES = ("block", "gpu", "system")
MAX_THREADS = 2048
DEFAULT_MAX_STEPS = 200_000
SHARED_GARBAGE = 12345  # shared memory starts with whatever was there: never with zeros


class TooManySteps(CourseError, RuntimeError):
    """The kernel did not finish within the step limit (usually a spin-wait with no iteration cap)."""


class Deadlock(CourseError, RuntimeError):
    """Threads wait in a syncthreads that the rest of their block never reaches."""


# --------------------------------------------------------------------------------------------
# Memory systems: every global load, store, atomic and fence goes through one of these.
# A location is any hashable (the scheduler uses (array key, flat index)). ``chooser`` decides
# the model's free choices; ``initial(loc)`` gives a location's value before the kernel.


def _join(*views: dict) -> dict:
    out: dict = {}
    for view in views:
        for loc, version in view.items():
            if version > out.get(loc, -1):
                out[loc] = version
    return out


class SequentialMemory:
    """Sequential consistency: every load reads the newest store (what the plain simulator does)."""

    name = "sc"
    label = "sequentially consistent memory (every load reads the newest store)"

    def __init__(self, chooser=None, initial=None):
        self.initial = initial or (lambda loc: 0)
        self.values: dict = {}
        self.versions: dict = {}

    def _get(self, loc):
        if loc not in self.values:
            self.values[loc] = self.initial(loc)
            self.versions[loc] = 0
        return self.values[loc]

    def load(self, block, loc):
        """(value, version read, newest version)."""
        value = self._get(loc)
        return value, self.versions[loc], self.versions[loc]

    def store(self, block, loc, value) -> int:
        self._get(loc)
        self.values[loc] = value
        self.versions[loc] += 1
        return self.versions[loc]

    def rmw(self, block, loc, fn):
        """Atomic read-modify-write: ``fn(old)`` gives the new value or None (no write, e.g. a failed CAS).
        Returns (old value, version written or read)."""
        old = self._get(loc)
        new = fn(old)
        if new is not None:
            self.values[loc] = new
            self.versions[loc] += 1
        return old, self.versions[loc]

    def fence(self, block, scope, kind: str = "sc") -> None:
        pass

    def final(self) -> dict:
        return {loc: self.values[loc] for loc, version in self.versions.items() if version > 0}


class WeakMemory:
    """The course's operational weak-memory model: per-block views, release/acquire by fences.

    See the module docstring for the rules. Every location keeps its history of writes (its
    coherence order); each strong write (an atomic) carries the view its block had published when
    it was written; weak writes carry nothing.
    """

    name = "weak"
    label = ("the course's weak-memory model (per-SM views: writes reach other blocks late and out of "
             "order unless fences publish and acquire them)")

    def __init__(self, chooser=None, initial=None):
        self.chooser = chooser or StalestChooser()
        self.initial = initial or (lambda loc: 0)
        self.history: dict = {}  # loc -> [(value, published view, writer block)]
        self.cur: dict = {}  # block -> {loc: oldest version it may still read}
        self.acq: dict = {}  # block -> view gathered by strong reads, applied at its next fence
        self.rel: dict = {}  # block -> view published by its last fence
        self.sc: dict = {}  # what every fence.sc so far has published (they are totally ordered)
        self.last_read: dict = {}  # block -> {loc: version it read last} (for the stalest-first policy)

    def _hist(self, loc):
        h = self.history.get(loc)
        if h is None:
            h = self.history[loc] = [(self.initial(loc), {}, None)]
        return h

    def _views(self, block):
        if block not in self.cur:
            self.cur[block], self.acq[block], self.rel[block], self.last_read[block] = {}, {}, {}, {}
        return self.cur[block]

    def load(self, block, loc):
        h, cur = self._hist(loc), self._views(block)
        lo, hi = cur.get(loc, 0), len(h) - 1
        k = lo if lo == hi else self.chooser.read(lo, hi, self.last_read[block].get(loc, -1))
        cur[loc] = k
        self.last_read[block][loc] = k
        return h[k][0], k, hi  # a weak read: it synchronises with nothing

    def store(self, block, loc, value) -> int:
        h, cur = self._hist(loc), self._views(block)
        h.append((value, {}, block))  # a weak write: it carries no release
        cur[loc] = len(h) - 1
        return cur[loc]

    def rmw(self, block, loc, fn):
        h, cur = self._hist(loc), self._views(block)
        old, view, _ = h[-1]  # atomics read the newest value; a strong read collects its release
        if view:
            self.acq[block] = _join(self.acq[block], view)
        new = fn(old)
        if new is not None:  # the write passes on what the previous writer published (release sequence)
            h.append((new, _join(self.rel[block], view) if view else self.rel[block], block))
        cur[loc] = len(h) - 1
        return old, cur[loc]

    def fence(self, block, scope, kind: str = "sc") -> None:
        """``kind`` "sc" (``membar.gl`` = ``fence.sc``) or "acq_rel" (``fence.acq_rel``)."""
        if scope == "block":
            return  # block scope: nothing changes for other blocks
        self._views(block)
        view = _join(self.cur[block], self.acq[block])  # acquire what strong reads collected
        if kind == "sc":
            view = _join(view, self.sc)  # and what every earlier fence.sc published
            self.sc = dict(view)
        self.cur[block] = view
        self.rel[block] = dict(view)  # published; never mutated afterwards (writes share it)
        self.acq[block] = {}

    def final(self) -> dict:
        """After the kernel every write is visible: each location holds its newest value."""
        return {loc: h[-1][0] for loc, h in self.history.items() if len(h) > 1}


class ReleaseAcquireMemory(WeakMemory):
    """The weak model with every GPU-scope fence weakened to ``fence.acq_rel`` (PTX ISA, "Memory
    Consistency Model"): what a kernel may rely on if its fences only release and acquire. Code
    correct here does not lean on ``threadfence`` being ``fence.sc``."""

    name = "weak-acqrel"
    label = ("the course's weak-memory model with every threadfence weakened to fence.acq_rel (release/acquire "
             "only: a flag must be written and read with atomics to carry data)")

    def fence(self, block, scope, kind: str = "sc") -> None:
        super().fence(block, scope, "acq_rel")


MEMORY_CLASSES = {"sc": SequentialMemory, "weak": WeakMemory, "weak-acqrel": ReleaseAcquireMemory}


# Choosers: who decides the free choices (which thread runs, how stale a load is).


class StalestChooser:
    """Deterministic and adversarial: each load reads the stalest value not read before."""

    def pick(self, n: int) -> int:
        return 0

    def read(self, lo: int, hi: int, last: int) -> int:
        return min(max(lo, last + 1), hi)


class RandomChooser:
    """Seeded random choices (Python's Mersenne Twister: the same on every machine)."""

    def __init__(self, seed: int = 0):
        self.rng = random.Random(seed)

    def pick(self, n: int) -> int:
        return self.rng.randrange(n) if n > 1 else 0

    def read(self, lo: int, hi: int, last: int) -> int:
        return hi if self.rng.random() < 0.5 else self.rng.randint(lo, hi)


class _ReplayChooser:
    """Depth-first enumeration of every sequence of choices (re-runs the program from the start)."""

    def __init__(self, prefix: list[int]):
        self.prefix, self.taken, self.widths = prefix, [], []

    def pick(self, n: int) -> int:
        if n <= 1:
            return 0
        i = len(self.taken)
        choice = self.prefix[i] if i < len(self.prefix) else 0
        self.taken.append(choice)
        self.widths.append(n)
        return choice

    def read(self, lo: int, hi: int, last: int) -> int:
        return lo + self.pick(hi - lo + 1)

    def next_prefix(self) -> list[int] | None:
        taken = list(self.taken)
        while taken:
            i = len(taken) - 1
            if taken[i] + 1 < self.widths[i]:
                return taken[:i] + [taken[i] + 1]
            taken.pop()
        return None


# --------------------------------------------------------------------------------------------
# Litmus tests: tiny programs, one per thread, each thread in a given block.

_STORE = re.compile(r"^(\w+)\s*=\s*(-?\d+)$")
_LOAD = re.compile(r"^(r\d+)\s*=\s*(\w+)$")
_ATOMIC = re.compile(r"^(?:(r\d+)\s*=\s*)?atomic_add\((\w+),\s*(-?\d+)\)$")


def _parse(statement: str):
    s = statement.strip()
    if s in ("threadfence()", "threadfence_block()"):
        return ("fence", "gpu" if s == "threadfence()" else "block", "sc")
    if s == "fence_acq_rel()":  # PTX fence.acq_rel.gpu (no Numba call emits it)
        return ("fence", "gpu", "acq_rel")
    if m := _ATOMIC.match(s):
        return ("atomic_add", m.group(1), m.group(2), int(m.group(3)))
    if m := _LOAD.match(s):
        return ("ld", m.group(1), m.group(2))
    if m := _STORE.match(s):
        return ("st", m.group(1), int(m.group(2)))
    raise ValueError(f"cannot parse litmus statement {statement!r}")


@dataclass(frozen=True)
class Litmus:
    """A litmus test: programs (``;``-separated statements) run by threads in the given blocks."""

    name: str
    question: str
    programs: tuple[str, ...]
    blocks: tuple[int, ...]
    weak: tuple[tuple[str, int], ...]  # the outcome of interest, e.g. (("r0", 1), ("r1", 0))
    model: str  # "allowed" or "forbidden" by WeakMemory (checked by the tests)
    ptx: str  # what the PTX memory model says, in words

    @property
    def weak_text(self) -> str:
        return ", ".join(f"{r} = {v}" for r, v in self.weak)

    def instructions(self) -> list[list[tuple]]:
        return [[_parse(s) for s in program.split(";")] for program in self.programs]


_MP = ("data = 1; flag = 1", "r0 = flag; r1 = data")
_MP_FENCED = ("data = 1; threadfence(); flag = 1", "r0 = flag; threadfence(); r1 = data")
LITMUS: dict[str, Litmus] = {t.name: t for t in [
    Litmus("MP", "Message passing: block 0 writes data then a flag; block 1 reads the flag then the data. "
           "Can it see the flag but old data?", _MP, (0, 1), (("r0", 1), ("r1", 0)), "allowed",
           "allowed: plain accesses in different blocks are not ordered"),
    Litmus("MP+fence (producer only)", "The same, with a threadfence between the writes only.",
           (_MP_FENCED[0], _MP[1]), (0, 1), (("r0", 1), ("r1", 0)), "allowed",
           "allowed: the reader has no acquire side (its loads may be reordered or hit a stale cache)"),
    Litmus("MP+fence (consumer only)", "The same, with a threadfence between the reads only.",
           (_MP[0], _MP_FENCED[1]), (0, 1), (("r0", 1), ("r1", 0)), "allowed",
           "allowed: the writer has no release side (its writes may become visible in any order)"),
    Litmus("MP+fences", "The same, with a threadfence on both sides (release and acquire).",
           _MP_FENCED, (0, 1), (("r0", 1), ("r1", 0)), "forbidden",
           "forbidden, but only because threadfence is fence.sc: the two fence.sc are totally ordered "
           "(Fence-SC), so the flag, although a weak access, carries the data"),
    Litmus("MP+acq_rel fences", "The same with the lighter fence.acq_rel on both sides; the flag is still "
           "a plain (weak) store and load.", tuple(p.replace("threadfence()", "fence_acq_rel()") for p in _MP_FENCED),
           (0, 1), (("r0", 1), ("r1", 0)), "allowed",
           "allowed: a release or acquire pattern needs a strong (atomic, .relaxed or volatile) flag access; "
           "a weak flag synchronises nothing"),
    Litmus("MP+acq_rel fences+atomic flag", "fence.acq_rel on both sides and the flag set and read with atomics.",
           ("data = 1; fence_acq_rel(); atomic_add(flag, 1)", "r0 = atomic_add(flag, 0); fence_acq_rel(); r1 = data"),
           (0, 1), (("r0", 1), ("r1", 0)), "forbidden",
           "forbidden: fence + strong write is a release pattern, strong read + fence an acquire pattern; "
           "they synchronise"),
    Litmus("MP+threadfence_block", "The same, with threadfence_block (block scope) on both sides.",
           tuple(p.replace("threadfence()", "threadfence_block()") for p in _MP_FENCED), (0, 1),
           (("r0", 1), ("r1", 0)), "allowed",
           "allowed: a block-scope fence (like syncthreads) orders nothing for another block"),
    Litmus("MP+atomic flag", "The flag is set and read with atomics (atomic_add), no fences.",
           ("data = 1; atomic_add(flag, 1)", "r0 = atomic_add(flag, 0); r1 = data"), (0, 1),
           (("r0", 1), ("r1", 0)), "allowed",
           "allowed: CUDA atomics are relaxed; they are not fences and order no other access"),
    Litmus("MP+atomic flag+fences", "Atomic flag with a threadfence on both sides.",
           ("data = 1; threadfence(); atomic_add(flag, 1)", "r0 = atomic_add(flag, 0); threadfence(); r1 = data"),
           (0, 1), (("r0", 1), ("r1", 0)), "forbidden", "forbidden: release and acquire patterns on both sides"),
    Litmus("MP, same block", "Message passing between two threads of the SAME block, no fences.",
           _MP, (0, 0), (("r0", 1), ("r1", 0)), "forbidden",
           "allowed: PTX orders nothing here either without a fence or barrier (this model is stronger "
           "inside a block)"),
    Litmus("SB", "Store buffering: each block writes its own location, then reads the other's. "
           "Can both read the old value?", ("x = 1; r0 = y", "y = 1; r1 = x"), (0, 1),
           (("r0", 0), ("r1", 0)), "allowed", "allowed: a write may become visible after a later read"),
    Litmus("SB+fences", "Store buffering with a threadfence between the write and the read on both sides.",
           ("x = 1; threadfence(); r0 = y", "y = 1; threadfence(); r1 = x"), (0, 1),
           (("r0", 0), ("r1", 0)), "forbidden", "forbidden: fence.sc operations are totally ordered (Fence-SC)"),
    Litmus("SB+acq_rel fences", "Store buffering with fence.acq_rel instead: release/acquire is cheaper, and "
           "weaker.", ("x = 1; fence_acq_rel(); r0 = y", "y = 1; fence_acq_rel(); r1 = x"), (0, 1),
           (("r0", 0), ("r1", 0)), "allowed",
           "allowed: only fence.sc takes part in the Fence-SC order; release/acquire orders nothing here"),
    Litmus("LB", "Load buffering: each block reads one location, then writes the other. Can both read the "
           "other's (later) write?", ("r0 = x; y = 1", "r1 = y; x = 1"), (0, 1), (("r0", 1), ("r1", 1)),
           "forbidden", "allowed when the writes do not depend on the reads (the No-Thin-Air axiom forbids "
           "only the dependent version); this model never delays a load past a later store"),
    Litmus("CoRR", "Coherence: block 0 writes x; block 1 reads x twice. Can the second read go back in time?",
           ("x = 1", "r0 = x; r1 = x"), (0, 1), (("r0", 1), ("r1", 0)), "forbidden",
           "allowed for plain (weak) loads: PTX's coherence axiom covers only morally strong accesses (forbidden "
           "when both reads are atomic, .relaxed or volatile); this model is stronger and never lets a read go back"),
]}


def _run_litmus_once(test: Litmus, memory_cls, chooser) -> tuple:
    memory = memory_cls(chooser, lambda loc: 0)
    programs = test.instructions()
    pcs = [0] * len(programs)
    regs: dict[str, int] = {}
    while True:
        runnable = [i for i, p in enumerate(programs) if pcs[i] < len(p)]
        if not runnable:
            return tuple(sorted(regs.items()))
        i = runnable[chooser.pick(len(runnable))]
        op, block = programs[i][pcs[i]], test.blocks[i]
        pcs[i] += 1
        if op[0] == "st":
            memory.store(block, op[1], op[2])
        elif op[0] == "ld":
            regs[op[1]] = memory.load(block, op[2])[0]
        elif op[0] == "fence":
            memory.fence(block, op[1], op[2])
        else:
            old = memory.rmw(block, op[2], lambda v, d=op[3]: v + d)[0]
            if op[1]:
                regs[op[1]] = old


def explore(test: Litmus | str, memory: str = "weak") -> Counter:
    """Every outcome the memory allows for this litmus test, by exhaustive search.

    Counts are numbers of distinct executions (interleavings × model choices) giving each outcome;
    they are not probabilities on any GPU."""
    test = LITMUS[test] if isinstance(test, str) else test
    memory_cls = MEMORY_CLASSES[validate.choice("memory", memory, MEMORIES)]
    outcomes: Counter = Counter()
    prefix: list[int] | None = []
    while prefix is not None:
        chooser = _ReplayChooser(prefix)
        outcomes[_run_litmus_once(test, memory_cls, chooser)] += 1
        prefix = chooser.next_prefix()
    return outcomes


def sample(test: Litmus | str, runs: int = 1000, seed: int = 0, memory: str = "weak") -> Counter:
    """Outcomes of ``runs`` random schedules of the model (a frequency under the model, not a GPU's)."""
    test = LITMUS[test] if isinstance(test, str) else test
    runs = validate.integer("runs", runs, minimum=1, maximum=10**6)
    seed = validate.integer("seed", seed, minimum=0)
    memory_cls = MEMORY_CLASSES[validate.choice("memory", memory, MEMORIES)]
    chooser = RandomChooser(seed)
    return Counter(_run_litmus_once(test, memory_cls, chooser) for _ in range(runs))


def allows(test: Litmus | str, memory: str = "weak") -> bool:
    """Whether the memory allows the test's weak outcome."""
    test = LITMUS[test] if isinstance(test, str) else test
    weak = dict(test.weak)
    return any(all(dict(outcome).get(r) == v for r, v in weak.items()) for outcome in explore(test, memory))


def litmus_table() -> pd.DataFrame:
    """Each litmus test, its weak outcome, and who allows it: the plain simulator, this model, PTX."""
    rows = []
    for test in LITMUS.values():
        rows.append({
            "test": test.name, "block of each thread": " / ".join(map(str, test.blocks)),
            "programs": "  ‖  ".join(test.programs), "weak outcome": test.weak_text,
            "plain simulator (SC)": "allowed" if allows(test, "sc") else "forbidden",
            "this model": "allowed" if allows(test, "weak") else "forbidden",
            "PTX memory model": test.ptx, "question": test.question,
        })
    return pd.DataFrame(rows)


# --------------------------------------------------------------------------------------------
# The race scheduler: a kernel's Python source run with a chosen interleaving.


@dataclass(frozen=True)
class Dim3:
    x: int
    y: int
    z: int

    def __iter__(self):
        return iter((self.x, self.y, self.z))


_DONE = object()


class _Abort(BaseException):
    pass


class _GreenletFiber:
    def __init__(self, fn):
        self.parent = _greenlet.getcurrent()
        self.g = _greenlet.greenlet(fn, parent=self.parent)

    def resume(self, value=None):
        out = self.g.switch(value)
        return _DONE if self.g.dead else out

    def suspend(self, request):
        return self.parent.switch(request)

    def abort(self):
        if self.g and not self.g.dead:
            try:
                self.g.throw(_Abort)
            except _Abort:
                pass


class _ThreadFiber:  # pragma: no cover - used only where greenlet is missing
    def __init__(self, fn):
        import threading

        self.fn, self.thread, self.aborted = fn, None, False
        self.go, self.back = threading.Lock(), threading.Lock()
        self.go.acquire()
        self.back.acquire()
        self.out = self.exc = self.msg = None

    def _main(self):
        try:
            self.go.acquire()
            if not self.aborted:
                self.fn()
            self.out = _DONE
        except _Abort:
            self.out = _DONE
        except BaseException as exc:
            self.exc = exc
        finally:
            self.back.release()

    def resume(self, value=None):
        import threading

        self.msg = value
        if self.thread is None:
            self.thread = threading.Thread(target=self._main, daemon=True)
            self.thread.start()
        self.go.release()
        self.back.acquire()
        if self.exc is not None:
            raise self.exc
        return self.out

    def suspend(self, request):
        self.out = request
        self.back.release()
        self.go.acquire()
        if self.aborted:
            raise _Abort
        return self.msg

    def abort(self):
        if self.thread is not None and self.out is not _DONE:
            self.aborted = True
            self.go.release()
            self.thread.join(1.0)


_Fiber = _GreenletFiber if _greenlet is not None else _ThreadFiber


class _SimThread:
    __slots__ = ("block", "tid", "gid", "blockIdx", "threadIdx", "fiber", "request", "done", "waiting")

    def __init__(self, block, tid, gid, blockIdx, threadIdx):
        self.block, self.tid, self.gid = block, tid, gid
        self.blockIdx, self.threadIdx = blockIdx, threadIdx
        self.fiber = self.request = None
        self.done = self.waiting = False


class _Array:
    """A kernel's view of a global or shared array: every element access is one scheduled step."""

    __slots__ = ("_launch", "key", "name", "space", "data", "shape", "ndim", "size", "dtype", "block")

    def __init__(self, launch, key, name, space, data, block=None):
        self._launch, self.key, self.name, self.space = launch, key, name, space
        self.data, self.shape, self.ndim, self.size, self.dtype = data, data.shape, data.ndim, data.size, data.dtype
        self.block = block

    def flat(self, index) -> int:
        if isinstance(index, tuple):
            if len(index) != self.ndim:
                raise IndexError(f"{self.name} has {self.ndim} dimension(s); index {index!r} has {len(index)}")
            flat = 0
            for i, n in zip(index, self.shape):
                i = operator.index(i)
                if not 0 <= i < n:
                    raise IndexError(f"{self.name}[{', '.join(map(str, index))}] is out of bounds (shape {self.shape})")
                flat = flat * n + i
            return flat
        if self.ndim != 1:
            raise IndexError(f"{self.name} has {self.ndim} dimensions: index it as {self.name}[i, j]")
        i = operator.index(index)
        if not 0 <= i < self.shape[0]:
            raise IndexError(f"{self.name}[{i}] is out of bounds (size {self.shape[0]})")
        return i

    def __getitem__(self, index):
        return self._launch.request(("ld", self, self.flat(index), sys._getframe(1).f_lineno))

    def __setitem__(self, index, value):
        self._launch.request(("st", self, self.flat(index), value, sys._getframe(1).f_lineno))

    def __len__(self):
        return self.shape[0]


def _rmw(name: str, operand, compare=None):
    """The new-value function of each CUDA atomic (None: no write)."""
    return {
        "add": lambda old: old + operand, "sub": lambda old: old - operand,
        "max": lambda old: max(old, operand), "min": lambda old: min(old, operand),
        "exch": lambda old: operand, "and_": lambda old: old & operand, "or_": lambda old: old | operand,
        "xor": lambda old: old ^ operand,
        "inc": lambda old: 0 if old >= operand else old + 1,
        "dec": lambda old: operand if (old == 0 or old > operand) else old - 1,
        "cas": lambda old: operand if old == compare else None,
    }[name]


class _Atomics:
    def __init__(self, launch):
        self._launch = launch

    def _do(self, name, array, index, operand, compare=None):
        if not isinstance(array, _Array):
            raise TypeError(f"cuda.atomic.{name} needs a global or shared array, got {type(array).__name__}")
        line = sys._getframe(2).f_lineno
        return self._launch.request(("atom", array, array.flat(index), name, operand, compare, line))

    def add(self, array, index, val):
        return self._do("add", array, index, val)

    def sub(self, array, index, val):
        return self._do("sub", array, index, val)

    def max(self, array, index, val):
        return self._do("max", array, index, val)

    def min(self, array, index, val):
        return self._do("min", array, index, val)

    def exch(self, array, index, val):
        return self._do("exch", array, index, val)

    def and_(self, array, index, val):
        return self._do("and_", array, index, val)

    def or_(self, array, index, val):
        return self._do("or_", array, index, val)

    def xor(self, array, index, val):
        return self._do("xor", array, index, val)

    def inc(self, array, index, val):
        return self._do("inc", array, index, val)

    def dec(self, array, index, val):
        return self._do("dec", array, index, val)

    def cas(self, array, index, old, val):
        return self._do("cas", array, index, val, old)

    def compare_and_swap(self, array, old, val):
        return self._do("cas", array, 0, val, old)


def _as_dtype(dtype) -> np.dtype:
    try:
        return np.dtype(dtype)
    except TypeError:
        from numba.np import numpy_support

        return numpy_support.as_dtype(dtype)


class _Shared:
    def __init__(self, launch):
        self._launch = launch

    def array(self, shape, dtype, alignment=None):
        launch, frame = self._launch, sys._getframe(1)
        thread = launch.current
        key = ("shared", thread.block, frame.f_code.co_filename, frame.f_lineno)
        if key not in launch.arrays:
            if shape == 0:
                raise InvalidConfig("the race scheduler does not support dynamic shared memory; give the size")
            dt = _as_dtype(dtype)
            if dt.kind in "fc":
                garbage = np.nan
            else:
                garbage = True if dt.kind == "b" else SHARED_GARBAGE if dt.itemsize > 1 else 123
            data = np.full(shape, garbage, dtype=dt)
            name = f"shared@line{frame.f_lineno}"
            launch.arrays[key] = _Array(launch, key, name, "shared", data.reshape(-1), block=thread.block)
            launch.arrays[key].shape = data.shape
            launch.arrays[key].ndim = data.ndim
        return launch.arrays[key]


class _Local:
    def array(self, shape, dtype, alignment=None):
        return np.zeros(shape, _as_dtype(dtype))


class _Const:
    def array_like(self, ary):
        return ary


class _SchedulerCuda:
    """What ``cuda`` means inside a kernel run by the race scheduler."""

    warpsize = 32

    def __init__(self, launch):
        self._launch = launch
        self.gridDim, self.blockDim = launch.griddim, launch.blockdim
        self.atomic, self.shared, self.local, self.const = _Atomics(launch), _Shared(launch), _Local(), _Const()

    @property
    def threadIdx(self):
        return self._launch.current.threadIdx

    @property
    def blockIdx(self):
        return self._launch.current.blockIdx

    @property
    def laneid(self):
        return self._launch.current.tid % 32

    def grid(self, ndim):
        t, b, d = self._launch.current.threadIdx, self._launch.current.blockIdx, self.blockDim
        xyz = (b.x * d.x + t.x, b.y * d.y + t.y, b.z * d.z + t.z)
        return xyz[0] if ndim == 1 else xyz[:ndim]

    def gridsize(self, ndim):
        g, d = self.gridDim, self.blockDim
        xyz = (g.x * d.x, g.y * d.y, g.z * d.z)
        return xyz[0] if ndim == 1 else xyz[:ndim]

    def syncthreads(self):
        self._launch.request(("sync", sys._getframe(1).f_lineno))

    def threadfence(self):
        self._launch.request(("fence", "gpu", sys._getframe(1).f_lineno))

    def threadfence_block(self):
        self._launch.request(("fence", "block", sys._getframe(1).f_lineno))

    def threadfence_system(self):
        self._launch.request(("fence", "system", sys._getframe(1).f_lineno))

    def __getattr__(self, name):
        raise AttributeError(
            f"cuda.{name} is not available in the race scheduler (it supports indices, grid/gridsize, shared and "
            f"local arrays, atomics, syncthreads and the threadfences)")


def _is_cuda_module(value) -> bool:
    return isinstance(value, types.ModuleType) and value.__name__ == "numba.cuda"


def _python_of(kernel):
    fn = getattr(kernel, "py_func", None)
    if not isinstance(fn, types.FunctionType):
        raise InvalidConfig(f"run_kernel needs a @cuda.jit kernel, got {type(kernel).__name__}")
    return fn


def _global_names(code) -> set[str]:
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _global_names(const)
    return names


def _rebind(fn, fake, memo: dict):
    """A copy of ``fn`` whose ``cuda`` (global or closure) is the scheduler's, device functions too."""
    if fn in memo:
        return memo[fn]
    scope = dict(fn.__globals__)
    cells = None
    if fn.__closure__:
        cells = tuple(types.CellType(fake if _is_cuda_module(c.cell_contents) else c.cell_contents)
                      for c in fn.__closure__)
    memo[fn] = new = types.FunctionType(fn.__code__, scope, fn.__name__, fn.__defaults__, cells)
    for name in _global_names(fn.__code__) & scope.keys():
        value = scope[name]
        if _is_cuda_module(value):
            scope[name] = fake
        elif isinstance(getattr(value, "py_func", None), types.FunctionType):
            scope[name] = _rebind(value.py_func, fake, memo)
    return new


LOST_COLUMNS = ["array", "element", "space", "lost_thread", "lost_step", "lost_value", "thread", "load_step",
                "loaded_value", "store_step", "stored_value", "line"]
EVENT_COLUMNS = ("step", "thread", "block", "tid", "op", "space", "array", "element", "value", "new_value",
                 "version", "newest_version", "line")


class _Launch:
    def __init__(self, kernel, griddim, blockdim, args, schedule, seed, memory, resident_blocks, max_steps):
        self.fn = _python_of(kernel)
        self.kernel_name = getattr(kernel, "__name__", self.fn.__name__)
        self.griddim, self.blockdim = Dim3(*griddim), Dim3(*blockdim)
        self.schedule, self.seed, self.max_steps = schedule, seed, max_steps
        self.rng = random.Random(seed)
        self.chooser = RandomChooser(seed + 1) if schedule == "random" else StalestChooser()
        self.arrays: dict = {}
        self.global_memory = MEMORY_CLASSES[memory](self.chooser, self._initial)
        self.shared_memory = SequentialMemory(None, self._initial)
        self.events: list[tuple] = []
        self.current: _SimThread | None = None
        self.steps = 0
        params = list(inspect.signature(self.fn).parameters)
        if len(params) != len(args):
            raise InvalidConfig(f"{self.kernel_name} takes {len(params)} argument(s) ({', '.join(params)}); "
                                f"got {len(args)}")
        self.host, self.args = [], []
        for i, (name, arg) in enumerate(zip(params, args)):
            if hasattr(arg, "copy_to_host") and not isinstance(arg, np.ndarray):
                data = np.ascontiguousarray(arg.copy_to_host())
            elif isinstance(arg, np.ndarray) and arg.ndim > 0:
                data = np.ascontiguousarray(arg).copy()
            else:
                self.args.append(arg)
                continue
            key = ("global", i)
            self.arrays[key] = wrapped = _Array(self, key, name, "global", data.reshape(-1))
            wrapped.shape, wrapped.ndim = data.shape, data.ndim
            self.host.append((arg, key))
            self.args.append(wrapped)
        self.body = _rebind(self.fn, _SchedulerCuda(self), {})
        nblocks = self.griddim.x * self.griddim.y * self.griddim.z
        self.block_size = self.blockdim.x * self.blockdim.y * self.blockdim.z
        self.block_order = list(itertools.product(range(self.griddim.z), range(self.griddim.y), range(self.griddim.x)))
        self.resident_limit = resident_blocks or nblocks
        self.next_block = 0
        self.live: dict[int, list[_SimThread]] = {}
        self.ready: list[int] = []
        self.by_gid: dict[int, _SimThread] = {}
        self.cursor = -1

    # -- called from inside a simulated thread --------------------------------------------------
    def request(self, op):
        return self.current.fiber.suspend(op)

    def _initial(self, loc):
        return self.arrays[loc[0]].data[loc[1]]

    # -- the scheduler -----------------------------------------------------------------------------
    def _admit(self) -> None:
        while self.next_block < len(self.block_order) and len(self.live) < self.resident_limit:
            b = self.next_block
            self.next_block += 1
            bz, by, bx = self.block_order[b]
            threads = []
            for tid, (tz, ty, tx) in enumerate(itertools.product(
                    range(self.blockdim.z), range(self.blockdim.y), range(self.blockdim.x))):
                t = _SimThread(b, tid, b * self.block_size + tid, Dim3(bx, by, bz), Dim3(tx, ty, tz))
                t.fiber = _Fiber(lambda *_: self.body(*self.args))
                self.by_gid[t.gid] = t
                threads.append(t)
            self.live[b] = threads
            for t in threads:
                self._advance(t, None)

    def _advance(self, t: _SimThread, value) -> None:
        self.current = t
        try:
            request = t.fiber.resume(value)
        except _Abort:
            raise
        except Exception as exc:
            self._abort()
            where = (f"{self.kernel_name}: block ({t.blockIdx.x}, {t.blockIdx.y}, {t.blockIdx.z}) thread "
                     f"({t.threadIdx.x}, {t.threadIdx.y}, {t.threadIdx.z})")
            try:
                error = type(exc)(f"{where}: {exc}")
            except Exception:
                error = RuntimeError(f"{where}: {type(exc).__name__}: {exc}")
            raise error from exc
        finally:
            self.current = None
        if request is _DONE:
            t.done = True
            self._barrier_reached_by_all(t.block, t)
            self._check_barrier(t.block)
            if all(x.done for x in self.live[t.block]):
                del self.live[t.block]
                self._admit()
        elif request[0] == "sync":
            t.waiting = True
            self._barrier_reached_by_all(t.block, t)
            self._check_barrier(t.block)
        else:
            t.request = request
            bisect.insort(self.ready, t.gid)

    def _barrier_reached_by_all(self, block: int, t: _SimThread) -> None:
        threads = self.live.get(block, ())
        if any(x.waiting for x in threads) and any(x.done for x in threads):
            self._abort()
            raise Deadlock(f"{self.kernel_name}: in block ({t.blockIdx.x}, {t.blockIdx.y}, {t.blockIdx.z}) some "
                           f"threads wait in syncthreads while others have exited: every thread of a block must "
                           f"reach each syncthreads")

    def _check_barrier(self, block: int) -> None:
        threads = self.live.get(block, ())
        alive = [x for x in threads if not x.done]
        if alive and all(x.waiting for x in alive):
            for x in alive:
                x.waiting = False
                x.request = ("resume",)
                bisect.insort(self.ready, x.gid)

    def _pick(self) -> _SimThread:
        ready = self.ready
        if self.schedule == "sequential":
            i = 0
        elif self.schedule == "round-robin":
            i = bisect.bisect_right(ready, self.cursor)
            i = 0 if i == len(ready) else i
        else:
            i = self.rng.randrange(len(ready))
        gid = ready.pop(i)
        self.cursor = gid
        return self.by_gid[gid]

    def run(self) -> None:
        try:
            self._admit()
            while self.ready:
                if self.steps >= self.max_steps:
                    raise TooManySteps(_too_many_steps(self.kernel_name, self.max_steps))
                t = self._pick()
                self._advance(t, self._perform(t, t.request))
            stuck = [t for threads in self.live.values() for t in threads if not t.done]
            if stuck or self.next_block < len(self.block_order):
                raise Deadlock(f"{self.kernel_name}: {len(stuck)} thread(s) wait in syncthreads for threads that "
                               f"never arrive")
        except BaseException:
            self._abort()
            raise
        memory_final = self.global_memory.final()
        for (key, flat), value in memory_final.items():
            self.arrays[key].data[flat] = value
        for arg, key in self.host:
            array = self.arrays[key]
            if isinstance(arg, np.ndarray):
                arg[...] = array.data.reshape(array.shape)
            else:
                arg.copy_to_device(array.data.reshape(array.shape))

    def _abort(self) -> None:
        for t in self.by_gid.values():
            if not t.done:
                t.done = True
                t.fiber.abort()

    def _perform(self, t: _SimThread, op):
        kind = op[0]
        if kind == "resume":
            return None
        self.steps += 1
        step = self.steps
        if kind == "fence":
            self.global_memory.fence(t.block, op[1])
            self.events.append((step, t.gid, t.block, t.tid, "fence." + op[1], "", "", -1, None, None, -1, -1, op[2]))
            return None
        array, flat = op[1], op[2]
        memory = self.global_memory if array.space == "global" else self.shared_memory
        loc = (array.key, flat)
        cast = array.dtype.type
        if kind == "ld":
            value, version, newest = memory.load(t.block, loc)
            value = cast(value)
            self.events.append((step, t.gid, t.block, t.tid, "load", array.space, array.name, flat, value, None,
                                version, newest, op[3]))
            return value
        if kind == "st":
            value = cast(op[3])
            version = memory.store(t.block, loc, value)
            self.events.append((step, t.gid, t.block, t.tid, "store", array.space, array.name, flat, value, None,
                                version, version, op[4]))
            return None
        name, operand, compare = op[3], op[4], op[5]
        fn = _rmw(name, cast(operand), None if compare is None else cast(compare))
        new_value = []

        def update(old, fn=fn):
            new = fn(cast(old))
            new_value.append(new)
            return None if new is None else cast(new)

        old, version = memory.rmw(t.block, loc, update)
        old = cast(old)
        new = cast(new_value[0]) if new_value and new_value[0] is not None else None  # None: no write (failed CAS)
        self.events.append((step, t.gid, t.block, t.tid, "atomic", array.space, array.name, flat, old, new,
                            version, version, op[6]))
        return old


_ENGINE_FILES = (__file__.removesuffix("c"), )


class WeakMemoryHook(_MicroscopeMemory):
    """The microscope's memory-system hook driven by one of this module's memories.

    ``microscope.trace(kernel, grid, block, *args, schedule="random", seed=1, memory=WeakMemoryHook("weak", 2))``
    runs the kernel under the microscope's race scheduler while this model decides every value a
    global load reads (shared memory stays sequentially consistent). It also records each access
    in order (``events``), so a RaceReport can find lost updates and stale reads and draw them.
    ``seed=None`` makes the model's choices the deterministic stalest-first ones."""

    def __init__(self, memory: str = "weak", seed: int | None = None, names: dict | None = None):
        memory = validate.choice("memory", memory, MEMORIES)
        chooser = StalestChooser() if seed is None else RandomChooser(validate.integer("seed", seed, minimum=0))
        self.name = memory
        self.model = MEMORY_CLASSES[memory](chooser, self._initial)
        self.shared = SequentialMemory(None, self._initial)
        self.names = names or {}  # id(the ndarray that owns a buffer) -> parameter name
        self.cells: dict = {}  # location -> (array, index): where its value lives on the host
        self.events: list[tuple] = []
        self.max_steps = DEFAULT_MAX_STEPS

    def _initial(self, loc):
        array, index = self.cells[loc]
        return array[index]

    def _where(self, thread, space, array, index, address):
        loc = (space, thread.block.linear if space == "shared" else None, address)
        if loc not in self.cells:
            self.cells[loc] = (array, index)
        root = array
        while isinstance(root.base, np.ndarray):
            root = root.base
        name = self.names.get(id(root), "shared" if space == "shared" else f"global@{address}")
        flat = int(np.ravel_multi_index(index, array.shape)) if array.ndim > 1 else int(index[0])
        return loc, name, flat

    @staticmethod
    def _line() -> int:
        frame = sys._getframe(2)
        while frame is not None and (frame.f_code.co_filename in _ENGINE_FILES
                                     or "microscope" in frame.f_code.co_filename):
            frame = frame.f_back
        return frame.f_lineno if frame is not None else -1

    def _log(self, thread, *rest) -> None:
        if len(self.events) >= self.max_steps:
            raise TooManySteps(_too_many_steps("the kernel", self.max_steps))
        self.events.append((len(self.events) + 1, thread.uid, thread.block.linear, thread.tid, *rest, self._line()))

    def load(self, thread, space, array, index, address):
        loc, name, flat = self._where(thread, space, array, index, address)
        memory = self.model if space == "global" else self.shared
        value, version, newest = memory.load(thread.block.linear, loc)
        value = array.dtype.type(value)
        self._log(thread, "load", space, name, flat, value, None, version, newest)
        return value

    def store(self, thread, space, array, index, address, value) -> None:
        loc, name, flat = self._where(thread, space, array, index, address)
        value = array.dtype.type(value)
        memory = self.model if space == "global" else self.shared
        version = memory.store(thread.block.linear, loc, value)
        if space == "shared":
            array[index] = value
        self._log(thread, "store", space, name, flat, value, None, version, version)

    def atomic(self, thread, space, array, index, address, update):
        loc, name, flat = self._where(thread, space, array, index, address)
        cast = array.dtype.type
        memory = self.model if space == "global" else self.shared
        new = []

        def fn(old):
            new.append(cast(update(cast(old))))
            return new[-1]

        old, version = memory.rmw(thread.block.linear, loc, fn)
        if space == "shared":
            array[index] = new[-1]
        self._log(thread, "atomic", space, name, flat, cast(old), new[-1], version, version)
        return cast(old)

    def fence(self, thread, scope) -> None:
        scope = "gpu" if scope == "device" else scope
        self.model.fence(thread.block.linear, scope)
        self._log(thread, "fence." + scope, "", "", -1, None, None, -1, -1)

    def barrier(self, block) -> None:
        pass  # block scope: nothing changes for other blocks

    def kernel_end(self) -> None:
        for memory in (self.model, self.shared):
            for loc, value in memory.final().items():
                array, index = self.cells[loc]
                array[index] = value


def _too_many_steps(kernel_name: str, max_steps: int) -> str:
    return (f"{kernel_name} did not finish within {max_steps} memory operations under the race scheduler: a thread "
            f"waiting for another that never runs (or never writes) spins forever. Cap every spin-wait with an "
            f"iteration limit")


@dataclass
class RaceReport:
    """What one run under the race scheduler did: every memory operation, in the order it happened."""

    kernel: str
    griddim: tuple
    blockdim: tuple
    schedule: str
    seed: int
    memory: str
    steps: int
    events: pd.DataFrame
    source: dict = field(default_factory=dict)  # line number -> source text
    engine: str = "standalone"  # "microscope" (its race scheduler + this model as its memory hook) or "standalone"
    microscope: object = None  # the microscope's own Report (races(), memory()…) when it ran the launch

    @property
    def caption(self) -> str:
        memory = {"weak": "weak-memory MODEL", "weak-acqrel": "weak-memory MODEL, fences release/acquire only"}.get(
            self.memory, "sequentially consistent memory")
        return f"{self.kernel}, race scheduler ({self.schedule}, seed {self.seed}), {memory}"

    def lost_updates(self) -> pd.DataFrame:
        """Read-modify-writes whose effect is gone from memory: one row per lost update.

        A write W (a load-then-store by one thread, or an atomic) is lost when the final value of
        its location does not build on it (following each write back to the version its thread
        had read) and another thread's load-then-store overwrote it without having seen it. For a
        counter, the number of rows is exactly the number of increments missing."""
        rows, last_load, writes = [], {}, {}
        for e in self.events.itertuples(index=False):
            key = (e.space, e.array, e.element, e.block if e.space == "shared" else None)
            if e.op == "load":
                last_load[(e.thread, key)] = e
            elif e.op == "store":
                seen = last_load.pop((e.thread, key), None)
                writes.setdefault(key, []).append((e, None if seen is None else seen.version, seen))
            elif e.op == "atomic" and e.new_value is not None:
                writes.setdefault(key, []).append((e, e.version - 1, None))
        for chain in writes.values():
            by_version = {w.version: (w, parent) for w, parent, _ in chain}
            alive, version = set(), max(by_version)
            while version in by_version:  # walk back from the final value
                alive.add(version)
                parent = by_version[version][1]
                version = -1 if parent is None else parent
            ordered = sorted(chain, key=lambda item: item[0].version)
            for i, (w, _, _) in enumerate(ordered):
                if w.version in alive:
                    continue
                for s, parent, seen in ordered[i + 1:]:
                    if s.op == "store" and parent is not None and parent < w.version and s.thread != w.thread:
                        rows.append({
                            "array": w.array, "element": w.element, "space": w.space, "lost_thread": w.thread,
                            "lost_step": w.step, "lost_value": w.value if w.op == "store" else w.new_value,
                            "thread": s.thread, "load_step": seen.step, "loaded_value": seen.value,
                            "store_step": s.step, "stored_value": s.value, "line": s.line,
                        })
                        break
        return pd.DataFrame(rows, columns=LOST_COLUMNS).sort_values("store_step", ignore_index=True)

    def stale_reads(self) -> pd.DataFrame:
        """Loads of global memory that returned an older value than the newest one already written."""
        ev = self.events
        stale = ev[(ev.op == "load") & (ev.version < ev.newest_version)]
        return stale[["step", "thread", "block", "array", "element", "value", "version", "newest_version", "line"]]

    def races(self) -> pd.DataFrame:
        """Lost updates and stale reads, one row each, with a ``kind`` column."""
        lost = self.lost_updates().assign(kind="lost update")
        stale = self.stale_reads().rename(columns={"step": "load_step"}).assign(kind="stale read")
        return pd.concat([lost, stale], ignore_index=True)


def run_kernel(kernel, griddim, blockdim, *args, schedule: str = "random", seed: int = 0, memory: str = "sc",
               resident_blocks: int | None = None, max_steps: int = DEFAULT_MAX_STEPS,
               engine: str = "auto") -> RaceReport:
    """Run one launch of ``kernel`` under the race scheduler; NumPy arrays are updated in place.

    ``engine="auto"`` uses the microscope's race scheduler with this module's memory as its hook,
    or the standalone scheduler here when the microscope is missing or ``resident_blocks`` is
    given (only the standalone one models how many blocks are resident). Both give the same kind
    of report. Checks its input first: a schedule, memory or seed that is not allowed raises
    ``InvalidConfig`` with one line saying what is, before anything runs."""
    schedule = validate.choice("schedule", schedule, SCHEDULES)
    memory = validate.choice("memory", memory, MEMORIES)
    seed = validate.integer("seed", seed, minimum=0)
    max_steps = validate.integer("max_steps", max_steps, minimum=1)
    engine = validate.choice("engine", engine, ENGINES)
    grid, block = validate.grid(griddim), validate.block(blockdim)
    threads = grid[0] * grid[1] * grid[2] * block[0] * block[1] * block[2]
    if threads > MAX_THREADS:
        raise InvalidConfig(f"the race scheduler runs at most {MAX_THREADS} threads per launch; this launch has "
                            f"{threads}: make the grid or the block smaller")
    if resident_blocks is not None:
        resident_blocks = validate.integer("resident_blocks", resident_blocks, minimum=1)
    if engine == "auto":
        engine = "microscope" if _microscope_trace is not None and resident_blocks is None else "standalone"
    if engine == "microscope" and (_microscope_trace is None or resident_blocks is not None):
        raise InvalidConfig("engine='microscope' needs gpucourse.microscope and no resident_blocks; use 'standalone'")
    fn = _python_of(kernel)
    if engine == "microscope":
        names = {}
        for name, arg in zip(inspect.signature(fn).parameters, args, strict=False):
            if isinstance(arg, np.ndarray):
                root = arg
                while isinstance(root.base, np.ndarray):
                    root = root.base
                names[id(root)] = name
        hook = WeakMemoryHook(memory, seed + 1 if schedule == "random" else None, names)
        hook.max_steps = max_steps
        scope = _microscope_trace(kernel, griddim, blockdim, *args, schedule=schedule, seed=seed, memory=hook,
                                  max_threads=MAX_THREADS)
        raw, steps = hook.events, len(hook.events)
    else:
        scope = None
        launch = _Launch(kernel, grid, block, args, schedule, seed, memory, resident_blocks, max_steps)
        launch.run()
        raw, steps = launch.events, launch.steps
    events = pd.DataFrame(raw, columns=list(EVENT_COLUMNS))
    for column in ("value", "new_value"):  # keep each value's own type (an int32 count stays an integer)
        position = EVENT_COLUMNS.index(column)
        events[column] = pd.Series([e[position] for e in raw], dtype=object)
    filename = fn.__code__.co_filename
    lines = sorted(set(events.line)) if len(events) else []
    source = {int(n): linecache.getline(filename, int(n)).strip() for n in lines if n > 0}
    name = getattr(kernel, "__name__", fn.__name__)
    return RaceReport(name, grid, block, schedule, seed, memory, steps, events, source, engine, scope)


# --------------------------------------------------------------------------------------------
# Pictures


def _short(value) -> str:
    if isinstance(value, float | np.floating):
        return f"{value:.3g}"
    return str(value)


def _event_label(e) -> str:
    where = f"{e.array}[{e.element}]"
    if e.op == "load":
        return f"load {where}<br>→ {_short(e.value)}"
    if e.op == "store":
        return f"store {where}<br>← {_short(e.value)}"
    if e.op == "atomic":
        return f"atomic {where}<br>{_short(e.value)} → {_short(e.new_value)}"
    return e.op


def timeline_figure(report: RaceReport, which: str = "lost", index: int = 0, context: int = 1) -> go.Figure:
    """Two threads' memory operations around one race, in the order the scheduler ran them.

    ``which="lost"``: lost update number ``index`` (two threads read the same value and both wrote:
    one write is gone). ``which="stale"``: stale read number ``index`` and the write it missed.
    ``context`` earlier operations of each thread are shown too; other threads' operations that ran
    in between are not drawn (the tick labels are the real step numbers)."""
    which = validate.choice("which", which, ("lost", "stale"))
    index = validate.integer("index", index, minimum=0)
    context = validate.integer("context", context, minimum=0, maximum=20)
    ev = report.events
    fig = charts.figure("", "step of the interleaving (other threads' steps in between are not drawn)", "thread",
                        charts.source_caption("counted", report.caption), height=380)
    table = report.lost_updates() if which == "lost" else report.stale_reads()
    what = "lost update" if which == "lost" else "stale read"
    if index >= len(table):
        fig.update_layout(title={"text": f"No {what} #{index} in this run (it had {len(table)})"})
        charts.no_data(fig, "Nothing to draw: try another seed or schedule")
        return fig
    row = table.iloc[index]
    if which == "lost":
        threads = [int(row.lost_thread), int(row.thread)]
        lo, hi = int(min(row.load_step, row.lost_step)), int(row.store_step)
        first, second = int(row.lost_step), int(row.store_step)
        title = (f"A lost update: thread {threads[1]} read {row['array']}[{row.element}] = {row.loaded_value}; "
                 f"thread {threads[0]} then wrote {row.lost_value}; thread {threads[1]}'s {row.stored_value} erased it")
    else:
        writes = ev[(ev["array"] == row["array"]) & (ev.element == row.element) & (ev.op != "load")
                    & (ev.step < row.step)]
        writer = int(writes.thread.iloc[-1]) if len(writes) else int(row.thread)
        threads = [writer, int(row.thread)] if writer != int(row.thread) else [int(row.thread)]
        lo, hi = (int(writes.step.iloc[-1]) if len(writes) else int(row.step)), int(row.step)
        first, second = (int(writes.step.iloc[-1]) if len(writes) else None), int(row.step)
        title = (f"A stale read (weak-memory model): block {row.block} read {row['array']}[{row.element}] = "
                 f"{row.value} after thread {writer} had written a newer value")
    mine = ev.thread.isin(threads)
    before = ev[mine & (ev.step < lo)].groupby("thread").tail(context)
    window = pd.concat([before, ev[mine & (ev.step >= lo) & (ev.step <= hi)]]).sort_values("step")
    names = {t: f"block {int(ev[ev.thread == t].block.iloc[0])} · thread {t}" for t in threads}
    order = {int(step): n for n, step in enumerate(window.step)}  # evenly spaced, in the order they ran
    for n, t in enumerate(threads):
        ops = window[window.thread == t]
        on_race = list((ops["array"] == row["array"]) & (ops.element == row.element))
        fig.add_scatter(
            x=[order[int(s)] for s in ops.step], y=[names[t]] * len(ops), mode="markers+text", name=names[t],
            text=[_event_label(e) for e in ops.itertuples(index=False)],
            textposition="top center" if n % 2 == 0 else "bottom center",
            marker={"symbol": [charts.MARKERS[n] if k else "circle-open" for k in on_race], "size": 13,
                    "color": charts.PALETTE[n]},
            hovertext=[f"step {e.step}, line {e.line}: {report.source.get(int(e.line), '')}"
                       for e in ops.itertuples(index=False)],
        )
    if first is not None and first in order and second in order:  # the write that is gone/missed → who did it
        fig.add_annotation(x=order[second], y=names[threads[-1]], ax=order[first], ay=names[threads[0]],
                           xref="x", yref="y", axref="x", ayref="y", showarrow=True, arrowhead=3, arrowwidth=2,
                           arrowcolor=charts.PALETTE[3], text="")
    fig.update_layout(title={"text": title, "font": {"size": 14}}, margin={"l": 150, "r": 60})
    fig.update_yaxes(categoryorder="array", categoryarray=[names[t] for t in threads],
                     range=[len(threads) - 0.4, -0.6], title=None)
    fig.update_xaxes(tickvals=list(order.values()), ticktext=[str(s) for s in order],
                     range=[-0.7, len(order) - 0.3])
    return fig
