"""Litmus tests under the weak-memory model: tiny programs, one per thread, searched exhaustively (``explore``,
``allows``, ``litmus_table``) or sampled (``sample``), beside what the PTX memory model says."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

import pandas as pd

from gpucourse import validate
from gpucourse.lessons.races.weakmemory.models import MEMORIES, MEMORY_CLASSES, RandomChooser


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
