"""Lesson 09's experiments: a collective run on the microscope, reported in nccl-tests' words; model sweeps.

* ``run(op, algorithm, ranks, nbytes, link)``: the collective executed on simulated ranks (``kernels``),
  its values checked against NumPy, its bytes, steps and reductions counted, and its **time from the
  model** (``model.step_time_s`` summed over the steps the microscope recorded): a ``CollectiveRun``.
* ``model_sweep``: nccl-tests-like rows (size, time, algbw, busbw) the model predicts for a size range.
* ``gloo_*``: real collectives between 2–4 processes on this computer (``distworker``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from gpucourse import validate
from gpucourse.errors import InvalidConfig
from gpucourse.lessons.collectives import kernels, model

ELEMENT_BYTES = np.dtype(kernels.DTYPE).itemsize


@dataclass
class CollectiveRun:
    """One collective on the microscope, in nccl-tests' vocabulary plus the microscope's exact counts."""

    op: str
    algorithm: str
    ranks: int
    nbytes: int  # S, as nccl-tests counts it
    link: model.Link
    time_s: float  # from the model, over the steps the microscope recorded
    steps: int
    bytes_sent: np.ndarray  # per rank
    bytes_received: np.ndarray
    bytes_reduced: np.ndarray
    peak_buffer_bytes: np.ndarray
    link_bytes: dict
    correct: bool  # every rank holds what NumPy says
    world: kernels.World

    @property
    def algbw_bytes_per_s(self) -> float:
        return model.algbw_bytes_per_s(self.nbytes, self.time_s) if self.time_s > 0 else float("nan")

    @property
    def busbw_bytes_per_s(self) -> float:
        return self.algbw_bytes_per_s * model.busbw_factor(self.op, self.ranks)

    def summary(self) -> dict:
        """One row as nccl-tests prints it, plus the counts."""
        return {"op": self.op, "algorithm": self.algorithm, "ranks": self.ranks, "size_bytes": self.nbytes,
                "time_us": self.time_s * 1e6, "algbw_gbps": self.algbw_bytes_per_s / 1e9,
                "busbw_gbps": self.busbw_bytes_per_s / 1e9, "steps": self.steps,
                "max_bytes_sent_per_rank": int(self.bytes_sent.max()) if self.ranks else 0,
                "max_peak_buffer_bytes": int(self.peak_buffer_bytes.max()) if self.ranks else 0,
                "correct": self.correct, "link": self.link.name}

    def per_rank(self) -> pd.DataFrame:
        return pd.DataFrame({"rank": range(self.ranks), "bytes_sent": self.bytes_sent,
                             "bytes_received": self.bytes_received, "bytes_reduced": self.bytes_reduced,
                             "peak_buffer_bytes": self.peak_buffer_bytes})

    def _repr_html_(self) -> str:
        head = pd.DataFrame([self.summary()]).to_html(index=False)
        return head + self.per_rank().to_html(index=False)


def time_of(world: kernels.World, link: model.Link, gamma_s_per_byte: float = 0.0) -> float:
    """The model's time for the steps a world recorded: Σ (α + largest message/β + most reduced·γ)."""
    return sum(model.step_time_s(m, r, link, gamma_s_per_byte)
               for m, r in zip(world.step_messages_bytes(), world.step_reduced_bytes()))


def execute(op: str, algorithm, ranks: int, nbytes: int, link: model.Link | None = None,
            gamma_s_per_byte: float = 0.0, seed: int = 0) -> CollectiveRun:
    """Run ``algorithm`` (a name, or your own function of a World) for ``op``; see ``run``."""
    validate.choice("op", op, model.OPS)
    link = model.LINKS["nvlink4"] if link is None else link
    ranks = validate.integer("ranks", ranks, minimum=1, maximum=256)
    nbytes = validate.integer("nbytes", nbytes, minimum=0, maximum=1 << 26)
    if nbytes % ELEMENT_BYTES:
        raise InvalidConfig(f"nbytes must be a multiple of {ELEMENT_BYTES} (float32 elements), got {nbytes}")
    if op == "all_to_all" and (nbytes // ELEMENT_BYTES) % ranks:
        raise InvalidConfig(f"all_to_all sends the same count to every rank: nbytes/4 must be a multiple of {ranks}")
    if callable(algorithm):
        function, name = algorithm, getattr(algorithm, "__name__", "yours")
    else:
        model.collective_time_s(op, algorithm, nbytes, ranks, link)  # the model's checks, one line each
        function, name = kernels.ALGORITHM_FUNCTIONS[(op, algorithm)], algorithm
    world = kernels.World(ranks, nbytes // ELEMENT_BYTES, seed=seed, out=op == "all_to_all")
    kernels.prepare(op, world)
    function(world)
    if world.pending:
        raise InvalidConfig("messages were sent but never delivered: call world.step() after the last sends")
    return CollectiveRun(op, name, ranks, nbytes, link, time_of(world, link, gamma_s_per_byte), world.steps,
                         world.bytes_sent.copy(), world.bytes_received.copy(), world.bytes_reduced.copy(),
                         world.peak_buffer_bytes.copy(), dict(world.link_bytes), kernels.values_match(op, world),
                         world)


def run(op: str, algorithm: str, ranks: int, nbytes: int, link: model.Link | None = None,
        gamma_s_per_byte: float = 0.0, seed: int = 0) -> CollectiveRun:
    """``op`` with ``algorithm`` on ``ranks`` simulated ranks and an ``nbytes`` buffer (float32), timed by the model
    on ``link`` (default NVLink 4)."""
    return execute(op, algorithm, ranks, nbytes, link, gamma_s_per_byte, seed)


# --- lab 09's grader: a learner's ring judged by the messages it delivered, replayed on a world of its own ---

# The course's own rings (rank order) and its runners: a lab 09 ring that calls them (through any name, a default
# argument or a relabelled world) is not the learner's ring. Targets for gpucourse.tooling.grading.tripwire.
RING_FORBIDDEN = {
    "gpucourse.lessons.collectives.kernels:ring_reduce_scatter": "write the ring yourself, not with the course's",
    "gpucourse.lessons.collectives.kernels:ring_all_gather": "write the ring yourself, not with the course's",
    "gpucourse.lessons.collectives.kernels:ring_all_reduce": "write the ring yourself, not with the course's",
    "gpucourse.lessons.collectives.experiments:execute": "write the ring yourself, not with the course's runner",
}


class RecordingWorld(kernels.World):
    """The world a learner's ring runs on. Besides what a ``World`` does, it notes each message as ``step()``
    delivers it: (src, dst, part, into, reduce). Only these notes are graded, replayed on a fresh world
    (``replay``): values written into this world's buffers, its counters or a message's payload count for
    nothing, and a message delivered any other way than ``step()`` is missing from the replay."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.delivered: list[tuple[tuple, ...]] = []

    def step(self) -> None:
        if self.pending:
            self.delivered.append(tuple((int(m.src), int(m.dst), m.part.start, m.part.stop, m.into.start,
                                         m.into.stop, bool(m.reduce), m.buffer) for m in self.pending))
        super().step()


def replay(op: str, ranks: int, elements: int, seed: int, delivered) -> kernels.World:
    """A fresh world with the same inputs (``seed``), laid out for ``op``, on which the noted messages are sent
    again step by step: each carries what the fresh world holds when it is sent, never a recorded payload."""
    world = kernels.World(ranks, elements, seed=seed, out=op == "all_to_all")
    kernels.prepare(op, world)
    for step in delivered:
        for src, dst, start, stop, into_start, into_stop, reduce, buffer in step:
            world.send(src, dst, slice(start, stop), reduce=reduce, into=slice(into_start, into_stop), buffer=buffer)
        world.step()
    return world


def _chunk_of(world: kernels.World, start: int, stop: int) -> int | None:
    """The chunk index whose elements are exactly start … stop − 1 (None: not one whole chunk)."""
    for c in range(world.ranks):
        part = world.chunk(c)
        if (part.start, part.stop) == (start, stop):
            return c
    return None


def _message_fault(op: str, world: kernels.World, s: int, message: tuple, have: list[list[frozenset]]) -> str:
    """Why a message of step ``s`` is not one the ring needs ('' when it is); updates ``have`` (which ranks'
    data each rank's chunk holds) when it is."""
    src, dst, start, stop, into_start, into_stop, reduce, buffer = message
    c = _chunk_of(world, start, stop)
    if c is None or (into_start, into_stop) != (start, stop) or buffer != "data":
        return f"step {s}: rank {src} sent elements {start}…{stop - 1} into {into_start}…{into_stop - 1}: " \
               "a ring message carries one whole chunk into the same chunk"
    carried, held = have[src][c], have[dst][c]
    if op == "reduce_scatter":
        if not reduce:
            return f"step {s}: rank {src} sent chunk {c} without reduce=True: the receiver must add it in"
        if carried & held:
            return f"step {s}: rank {src} sent chunk {c} to rank {dst}, which already holds part of that sum: " \
                   "some rank's data would be counted twice"
        if len(carried) != s + 1:
            return f"step {s}: rank {src} sent a chunk {c} that sums {len(carried)} rank(s); in a ring's step {s} " \
                   f"every message carries a partial sum of {s + 1}"
        have[dst][c] = carried | held
    else:
        if reduce:
            return f"step {s}: rank {src} sent chunk {c} with reduce=True: an all-gather copies, it never adds"
        if not carried:
            return f"step {s}: rank {src} sent chunk {c}, which it does not hold yet"
        if held:
            return f"step {s}: rank {src} sent chunk {c} to rank {dst}, which already had it"
        have[dst][c] = carried
    return ""


def judge_ring(fn, op: str, order, nbytes: int, seed: int = 0) -> str | None:
    """Lab 09's judge of a learner's ``fn(world, order)`` for ``op`` ("reduce_scatter" or "all_gather"): None
    when it is a ring in ``order``, else one line that says why not. ``fn`` runs on a ``RecordingWorld``; what
    counts is the replay of the messages it delivered on a fresh world with the same inputs: every message to
    the next rank of the order, carrying a whole chunk the receiver needs (for a reduce-scatter a partial
    sum it does not already hold part of, growing by one rank per step; for an all-gather a chunk it lacks),
    p − 1 steps, (p − 1)/p · S bytes sent per rank, and the replay's values equal to NumPy's."""
    validate.choice("op", op, ("reduce_scatter", "all_gather"))
    order = [int(r) for r in order]
    p = len(order)
    if sorted(order) != list(range(p)) or p < 2:
        raise InvalidConfig(f"order must be a permutation of 0 … p − 1 with p ≥ 2, got {order}")
    nbytes = validate.integer("nbytes", nbytes, minimum=ELEMENT_BYTES * p)
    if nbytes % (ELEMENT_BYTES * p):
        raise InvalidConfig(f"nbytes must split into {p} chunks of float32 elements, got {nbytes}")
    elements = nbytes // ELEMENT_BYTES
    world = RecordingWorld(p, elements, seed=seed)
    kernels.prepare(op, world)
    fn(world, list(order))
    if world.pending:
        return "messages were queued but never delivered: call world.step() after the last sends"
    delivered = [tuple(step) for step in world.delivered]
    try:
        fresh = replay(op, p, elements, seed, delivered)
    except InvalidConfig as exc:
        return f"the messages your world delivered do not replay: {exc}"
    following = {order[i]: order[(i + 1) % p] for i in range(p)}
    have = [[frozenset([r]) if op == "reduce_scatter" or c == r else frozenset() for c in range(p)]
            for r in range(p)]
    for s, step in enumerate(delivered):
        for message in step:
            src, dst = message[0], message[1]
            if dst != following[src]:
                return (f"step {s}: rank {src} sent to rank {dst}; in this ring order rank {src} sends to "
                        f"{following[src]}")
            fault = _message_fault(op, fresh, s, message, have)
            if fault:
                return fault
    if len(delivered) != p - 1:
        return f"{len(delivered)} steps were delivered; a ring on {p} ranks takes p − 1 = {p - 1}"
    want = (p - 1) * nbytes // p
    if not (fresh.bytes_sent == want).all():
        return f"bytes sent per rank {fresh.bytes_sent.tolist()}; a ring sends (p − 1)/p · S = {want} each"
    if not kernels.values_match(op, fresh):
        return "replayed on a fresh world with the same inputs, your messages do not leave NumPy's values"
    return None


def sizes_bytes(low: int = 8, high: int = 8 << 30, factor: int = 2) -> list[int]:
    """nccl-tests' ``-b low -e high -f factor`` sizes."""
    low = validate.integer("low", low, minimum=1)
    high = validate.integer("high", high, minimum=low)
    factor = validate.integer("factor", factor, minimum=2)
    out, size = [], low
    while size <= high:
        out.append(size)
        size *= factor
    return out


def model_sweep(op: str, algorithm: str, ranks: int, link: model.Link, sizes=None,
                gamma_s_per_byte: float = 0.0) -> pd.DataFrame:
    """What the model predicts at each size, in nccl-tests' columns (size, time, algbw, busbw)."""
    sizes = sizes_bytes() if sizes is None else list(sizes)
    rows = []
    for size in sizes:
        t = model.collective_time_s(op, algorithm, size, ranks, link, gamma_s_per_byte)
        algbw = size / t if t > 0 else float("nan")
        rows.append({"size_bytes": size, "time_us": t * 1e6, "algbw_gbps": algbw / 1e9,
                     "busbw_gbps": algbw * model.busbw_factor(op, ranks) / 1e9})
    return pd.DataFrame(rows)


def closed_form_counts(op: str, algorithm: str, ranks: int, nbytes: int) -> dict:
    """The steps and the most bytes one rank sends, by formula (what the tests hold the microscope to)."""
    p, S, L = ranks, nbytes, model.log2_ceil(ranks)
    forms = {
        ("reduce_scatter", "ring"): (p - 1, (p - 1) * S // p),
        ("all_gather", "ring"): (p - 1, (p - 1) * S // p),
        ("all_reduce", "ring"): (2 * (p - 1), 2 * (p - 1) * S // p),
        ("all_to_all", "ring"): (p - 1, (p - 1) * S // p),
        ("broadcast", "ring"): (2 * (p - 1), S if p > 1 else 0),
        ("reduce", "ring"): (2 * (p - 1), S if p > 1 else 0),
        ("reduce_scatter", "recursive"): (L, (p - 1) * S // p),
        ("all_gather", "recursive"): (L, (p - 1) * S // p),
        ("all_reduce", "recursive"): (2 * L, 2 * (p - 1) * S // p),
        ("broadcast", "tree"): (L, L * S),  # the root sends in every round
        ("reduce", "tree"): (L, S if p > 1 else 0),  # each rank sends its partial sum once
        ("all_reduce", "tree"): (2 * L, L * S),  # rank 0 sends down in every round; no rank sends more
        ("broadcast", "naive"): (p - 1, (p - 1) * S),
        ("reduce", "naive"): (p - 1, S if p > 1 else 0),
        ("all_reduce", "naive"): (2 * (p - 1), (p - 1) * S),
        ("reduce_scatter", "naive"): (2 * (p - 1), S if p > 1 else 0),  # a rank sends S up; rank 0 (p−1)/p·S down
        ("all_gather", "naive"): (2 * (p - 1), (p - 1) * S),
    }
    steps, max_sent = forms[(op, algorithm)]
    return {"steps": steps, "max_bytes_sent_per_rank": max_sent}


# --- real collectives between processes on this computer (gloo) ---------------------------------------------

def gloo_check(ranks: int = 2, sizes=(4096, 40_000), *, ring_file: str | None = None,
               timeout_s: float = 90.0) -> pd.DataFrame:
    """The ring all-reduce over isend/recv (``distworker.ring_all_reduce``, or ``ring_all_reduce`` in your file)
    against ``dist.all_reduce`` on ``ranks`` gloo processes: one row per size, ``equal`` True or False."""
    from gpucourse.lessons.collectives import distworker

    ranks = validate.integer("ranks", ranks, minimum=2, maximum=8)
    result = distworker.launch("check", ranks, sizes, timeout_s=timeout_s, ring_file=ring_file)
    return pd.DataFrame(result["results"])


def gloo_pingpong(sizes=(1 << 10, 1 << 14, 1 << 18, 1 << 22, 1 << 25), *, iters: int = 10,
                  timeout_s: float = 90.0) -> tuple[pd.DataFrame, model.Link | None]:
    """One message between two gloo processes at each size (half the fastest of ``iters`` round trips, taken in
    rounds over all sizes), and α, β fitted to them by least squares: (the timings, a Link named 'fitted' —
    your computer's loopback).

    A computer so busy that the times do not grow with size gets one more try with twice the rounds; if they
    still do not, the fit is ``None`` (the chart says why) rather than an error in the middle of a lesson."""
    from gpucourse.lessons.collectives import distworker

    iters = validate.integer("iters", iters, minimum=1, maximum=1000)
    for rounds in (iters, 2 * iters):
        result = distworker.launch("pingpong", 2, sizes, timeout_s=timeout_s, iters=rounds)
        table = pd.DataFrame(result["results"])
        try:
            fitted = model.fit_alpha_beta(table.size_bytes, table.time_s)
        except InvalidConfig:
            continue
        table["model_time_s"] = fitted.alpha_s + table.size_bytes / fitted.bandwidth_bytes_per_s
        return table, fitted
    table["model_time_s"] = float("nan")
    return table, None
