"""The weak-memory package's memories (``SequentialMemory``, ``WeakMemory``, ``ReleaseAcquireMemory``: the rules
are the package's docstring) and the choosers that make their free choices. A MODEL, not NVIDIA's hardware."""

from __future__ import annotations

import random

MEMORIES = ("sc", "weak", "weak-acqrel")
FENCE_SCOPES = ("block", "gpu", "system")


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
