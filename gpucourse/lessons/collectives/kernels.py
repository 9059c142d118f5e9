"""Lesson 09's collective microscope: p simulated ranks, messages counted byte by byte, and the algorithms.

A ``World`` holds one NumPy buffer per rank (``world.data[r]``; ``world.out[r]`` too for all_to_all). An
algorithm is plain Python: in each **step** every rank may send at most one message and receive at most one
(``world.send(src, dst, part)``); ``world.step()`` delivers them all at once (a message carries the data
as it was when sent; ``reduce=True`` adds it into the receiver's part, otherwise it overwrites it). The world
counts, exactly: bytes each rank sends and receives, bytes on each link ``(src, dst)``, steps, bytes each
rank reduces, the largest message and reduction of each step, and the peak bytes a rank holds (its buffers
plus what it receives in a step).

The algorithms below are the code learners read (lesson 09) and the lab's ring exercises build on the same
``World``. Conventions follow NCCL/nccl-tests: ``S`` = the whole buffer; rank r's part of a reduce-scatter
result and its contribution to an all-gather is chunk r (``world.chunk(r)``); the root is rank 0.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from gpucourse.errors import InvalidConfig

DTYPE = np.float32  # nccl-tests' default data type: 4 bytes


@dataclass
class Message:
    src: int
    dst: int
    part: slice  # elements of the sender's buffer
    into: slice  # elements of the receiver's buffer
    reduce: bool
    nbytes: int
    payload: np.ndarray = field(repr=False)
    buffer: str = "data"  # the receiver's buffer: "data" or "out"


class World:
    """``ranks`` simulated ranks, each with ``elements`` values; see the module's docstring."""

    def __init__(self, ranks: int, elements: int, *, seed: int = 0, out: bool = False):
        if isinstance(ranks, bool) or not isinstance(ranks, (int, np.integer)) or ranks < 1:
            raise InvalidConfig(f"ranks must be an integer ≥ 1, got {ranks!r}")
        if isinstance(elements, bool) or not isinstance(elements, (int, np.integer)) or elements < 0:
            raise InvalidConfig(f"elements must be an integer ≥ 0, got {elements!r}")
        self.ranks, self.elements = int(ranks), int(elements)
        rng = np.random.default_rng(seed)
        # small integers as float32: every sum of up to 2**16 ranks is exact, whatever the order
        self.data = [rng.integers(-100, 100, self.elements).astype(DTYPE) for _ in range(self.ranks)]
        self.out = [np.zeros(self.elements, DTYPE) for _ in range(self.ranks)] if out else None
        self.inputs = [d.copy() for d in self.data]
        self.itemsize = np.dtype(DTYPE).itemsize
        self._bounds = np.array([i * self.elements // self.ranks for i in range(self.ranks + 1)])
        self.pending: list[Message] = []
        self.history: list[list[Message]] = []  # the messages of each step, in order
        p = self.ranks
        self.bytes_sent = np.zeros(p, dtype=np.int64)
        self.bytes_received = np.zeros(p, dtype=np.int64)
        self.bytes_reduced = np.zeros(p, dtype=np.int64)
        self.link_bytes: dict[tuple[int, int], int] = {}
        buffers = self.elements * self.itemsize * (2 if out else 1)
        self.buffer_bytes = buffers
        self.peak_buffer_bytes = np.full(p, buffers, dtype=np.int64)

    # --- what an algorithm calls -------------------------------------------------------------------
    def chunk(self, index: int) -> slice:
        """Chunk ``index`` (0 … ranks−1) of a buffer: the elements split as evenly as they go."""
        if not 0 <= index < self.ranks:
            raise InvalidConfig(f"chunk index must be 0 … {self.ranks - 1}, got {index}")
        return slice(int(self._bounds[index]), int(self._bounds[index + 1]))

    def chunks(self, first: int, count: int) -> slice:
        """Chunks ``first`` … ``first + count − 1`` together (recursive halving/doubling's windows)."""
        return slice(self.chunk(first).start, self.chunk(first + count - 1).stop)

    def whole(self) -> slice:
        return slice(0, self.elements)

    def send(self, src: int, dst: int, part: slice, *, reduce: bool = False, into: slice | None = None,
             source: str = "data", buffer: str = "data") -> None:
        """Queue ``src``'s elements ``part`` for ``dst`` (added in if ``reduce``), delivered at ``step()``."""
        for name, r in (("src", src), ("dst", dst)):
            if not 0 <= r < self.ranks:
                raise InvalidConfig(f"{name} must be a rank 0 … {self.ranks - 1}, got {r}")
        if src == dst:
            raise InvalidConfig(f"rank {src} sends to itself: that is a local copy, not a message")
        if not isinstance(part, slice):
            raise InvalidConfig(f"part must be a slice of the buffer (world.chunk(i)), got {part!r}")
        into = part if into is None else into
        for q in self.pending:
            if q.src == src:
                raise InvalidConfig(f"rank {src} already sends in this step: one message per rank per step")
            if q.dst == dst:
                raise InvalidConfig(f"rank {dst} already receives in this step: one message per rank per step")
        payload = (self.out if source == "out" else self.data)[src][part].copy()
        if len((self.out if buffer == "out" else self.data)[dst][into]) != len(payload):
            raise InvalidConfig("the part sent and the part it goes into differ in size")
        self.pending.append(Message(src, dst, part, into, bool(reduce), payload.nbytes, payload, buffer))

    def step(self) -> None:
        """Deliver this step's messages, all at once, and count them."""
        if not self.pending:
            return
        for m in self.pending:
            target = (self.out if m.buffer == "out" else self.data)[m.dst]
            if m.reduce:
                target[m.into] += m.payload
                self.bytes_reduced[m.dst] += m.nbytes
            else:
                target[m.into] = m.payload
            self.bytes_sent[m.src] += m.nbytes
            self.bytes_received[m.dst] += m.nbytes
            self.link_bytes[(m.src, m.dst)] = self.link_bytes.get((m.src, m.dst), 0) + m.nbytes
            self.peak_buffer_bytes[m.dst] = max(self.peak_buffer_bytes[m.dst], self.buffer_bytes + m.nbytes)
        self.history.append(self.pending)
        self.pending = []

    # --- what the microscope reports ----------------------------------------------------------------
    @property
    def steps(self) -> int:
        return len(self.history)

    def step_messages_bytes(self) -> list[int]:
        """The largest message of each step (bytes)."""
        return [max(m.nbytes for m in msgs) for msgs in self.history]

    def step_reduced_bytes(self) -> list[int]:
        """The most bytes one rank reduced in each step."""
        return [max((m.nbytes for m in msgs if m.reduce), default=0) for msgs in self.history]


# --- the algorithms: each takes a World and leaves the collective's result in it -------------------------

def ring_reduce_scatter(world: World) -> None:
    """p − 1 steps; in step s rank r sends chunk (r − s − 1) mod p to r + 1, which adds it in.
    After the last step rank r holds the sum of chunk r."""
    p = world.ranks
    for s in range(p - 1):
        for r in range(p):
            world.send(r, (r + 1) % p, world.chunk((r - s - 1) % p), reduce=True)
        world.step()


def ring_all_gather(world: World) -> None:
    """p − 1 steps; in step s rank r passes chunk (r − s) mod p on to r + 1 (rank r starts with chunk r)."""
    p = world.ranks
    for s in range(p - 1):
        for r in range(p):
            world.send(r, (r + 1) % p, world.chunk((r - s) % p))
        world.step()


def ring_all_reduce(world: World) -> None:
    """A ring reduce-scatter, then a ring all-gather: 2(p − 1) steps of S/p bytes."""
    ring_reduce_scatter(world)
    ring_all_gather(world)


def ring_broadcast(world: World) -> None:
    """A pipelined chain 0 → 1 → … → p−1 in p chunks: in step t rank i forwards chunk t − i."""
    p = world.ranks
    for t in range(2 * (p - 1)):
        for i in range(p - 1):
            if 0 <= t - i < p:
                world.send(i, i + 1, world.chunk(t - i))
        world.step()


def ring_reduce(world: World) -> None:
    """A pipelined chain p−1 → … → 1 → 0 in p chunks, each hop adding what it receives."""
    p = world.ranks
    for t in range(2 * (p - 1)):
        for i in range(p - 1):  # rank p−1−i sends to p−2−i
            if 0 <= t - i < p:
                world.send(p - 1 - i, p - 2 - i, world.chunk(t - i), reduce=True)
        world.step()


def pairwise_all_to_all(world: World) -> None:
    """p − 1 steps; in step k rank r sends its block for rank (r + k) mod p straight to it ("ring" in the
    model: the same steps and bytes as a ring). Rank r's block for itself is a local copy."""
    p = world.ranks
    for r in range(p):
        world.out[r][world.chunk(r)] = world.data[r][world.chunk(r)]
    for k in range(1, p):
        for r in range(p):
            dst = (r + k) % p
            world.send(r, dst, world.chunk(dst), into=world.chunk(r), buffer="out")
        world.step()


def tree_broadcast(world: World) -> None:
    """A binomial tree from rank 0: in round k every rank r < 2^k sends the whole buffer to r + 2^k."""
    p, span = world.ranks, 1
    while span < p:
        for r in range(min(span, p - span)):
            world.send(r, r + span, world.whole())
        world.step()
        span *= 2


def tree_reduce(world: World) -> None:
    """A binomial tree to rank 0: in round k every rank r ≡ 2^k (mod 2^(k+1)) adds its buffer into r − 2^k."""
    p, span = world.ranks, 1
    while span < p:
        for r in range(span, p, 2 * span):
            world.send(r, r - span, world.whole(), reduce=True)
        world.step()
        span *= 2


def tree_all_reduce(world: World) -> None:
    """A binomial-tree reduce to rank 0, then a binomial-tree broadcast (not pipelined: NCCL's double
    binary tree pipelines chunks and sends about 2·S per rank, nccl#457)."""
    tree_reduce(world)
    tree_broadcast(world)


def naive_reduce(world: World) -> None:
    """Every rank sends its whole buffer to rank 0, one at a time; rank 0 adds each in."""
    for r in range(1, world.ranks):
        world.send(r, 0, world.whole(), reduce=True)
        world.step()


def naive_broadcast(world: World) -> None:
    """Rank 0 sends its whole buffer to every other rank, one at a time."""
    for r in range(1, world.ranks):
        world.send(0, r, world.whole())
        world.step()


def naive_all_reduce(world: World) -> None:
    naive_reduce(world)
    naive_broadcast(world)


def naive_reduce_scatter(world: World) -> None:
    """Reduce everything at rank 0, then send chunk r to rank r."""
    naive_reduce(world)
    for r in range(1, world.ranks):
        world.send(0, r, world.chunk(r))
        world.step()


def naive_all_gather(world: World) -> None:
    """Rank r sends chunk r to rank 0, one at a time; then rank 0 broadcasts the whole buffer."""
    for r in range(1, world.ranks):
        world.send(r, 0, world.chunk(r))
        world.step()
    naive_broadcast(world)


def _require_power_of_two(world: World) -> None:
    if world.ranks & (world.ranks - 1):
        raise InvalidConfig(f"recursive halving/doubling needs a power-of-two number of ranks, got {world.ranks}")


def recursive_halving_reduce_scatter(world: World) -> None:
    """log₂ p steps; at distance d = p/2, p/4, …, 1 rank r and r XOR d split their window of chunks: each
    sends the half it gives up (S/2, S/4, …) and adds in the half it keeps. Rank r ends with chunk r."""
    _require_power_of_two(world)
    p, d = world.ranks, world.ranks // 2
    while d >= 1:
        for r in range(p):
            first = (r // (2 * d)) * 2 * d  # the window of 2d chunks that holds chunk r
            give = first + d if r & d == 0 else first  # keep the half that holds chunk r
            world.send(r, r ^ d, world.chunks(give, d), reduce=True)
        world.step()
        d //= 2


def recursive_doubling_all_gather(world: World) -> None:
    """log₂ p steps; at distance d = 1, 2, …, p/2 rank r sends the d chunks it has to r XOR d."""
    _require_power_of_two(world)
    p, d = world.ranks, 1
    while d < p:
        for r in range(p):
            world.send(r, r ^ d, world.chunks((r // d) * d, d))
        world.step()
        d *= 2


def recursive_all_reduce(world: World) -> None:
    """Rabenseifner's all-reduce: recursive halving reduce-scatter, then recursive doubling all-gather."""
    recursive_halving_reduce_scatter(world)
    recursive_doubling_all_gather(world)


ALGORITHM_FUNCTIONS = {
    ("all_reduce", "ring"): ring_all_reduce,
    ("all_reduce", "tree"): tree_all_reduce,
    ("all_reduce", "naive"): naive_all_reduce,
    ("all_reduce", "recursive"): recursive_all_reduce,
    ("reduce_scatter", "ring"): ring_reduce_scatter,
    ("reduce_scatter", "naive"): naive_reduce_scatter,
    ("reduce_scatter", "recursive"): recursive_halving_reduce_scatter,
    ("all_gather", "ring"): ring_all_gather,
    ("all_gather", "naive"): naive_all_gather,
    ("all_gather", "recursive"): recursive_doubling_all_gather,
    ("broadcast", "ring"): ring_broadcast,
    ("broadcast", "tree"): tree_broadcast,
    ("broadcast", "naive"): naive_broadcast,
    ("reduce", "ring"): ring_reduce,
    ("reduce", "tree"): tree_reduce,
    ("reduce", "naive"): naive_reduce,
    ("all_to_all", "ring"): pairwise_all_to_all,
}


def prepare(op: str, world: World) -> None:
    """Lay out the inputs as NCCL does: for all_gather rank r holds only chunk r (the rest zero)."""
    if op == "all_gather":
        for r in range(world.ranks):
            keep = world.data[r][world.chunk(r)].copy()
            world.data[r][:] = 0
            world.data[r][world.chunk(r)] = keep
            world.inputs[r] = world.data[r].copy()


def reference(op: str, world: World) -> list[tuple[slice, np.ndarray]]:
    """What NumPy says each rank must hold afterwards: (the part that is defined, its values) per rank."""
    p, inputs = world.ranks, world.inputs
    total = np.sum(inputs, axis=0, dtype=np.float64).astype(DTYPE) if p else None
    whole = world.whole()
    if op == "all_reduce":
        return [(whole, total) for _ in range(p)]
    if op == "reduce_scatter":
        return [(world.chunk(r), total[world.chunk(r)]) for r in range(p)]
    if op == "all_gather":
        gathered = np.concatenate([inputs[r][world.chunk(r)] for r in range(p)])
        return [(whole, gathered) for _ in range(p)]
    if op == "broadcast":
        return [(whole, inputs[0]) for _ in range(p)]
    if op == "reduce":
        return [(whole, total)] + [(slice(0, 0), np.zeros(0, DTYPE)) for _ in range(p - 1)]
    if op == "all_to_all":
        return [(whole, np.concatenate([inputs[j][world.chunk(r)] for j in range(p)])) for r in range(p)]
    raise InvalidConfig(f"op must be one of the six collectives, got {op!r}")


def result_buffers(op: str, world: World) -> list[np.ndarray]:
    return world.out if op == "all_to_all" else world.data


def values_match(op: str, world: World) -> bool:
    """Every rank holds exactly what NumPy's reference says (the sums are exact: small integers)."""
    buffers = result_buffers(op, world)
    return all(np.array_equal(buffers[r][part], want) for r, (part, want) in enumerate(reference(op, world)))
