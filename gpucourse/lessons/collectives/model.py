"""Lesson 09's cost model: the α-β-γ model of a collective, and nccl-tests' algbw/busbw.

Pure Python, no processes, no GPU: the same on every machine.

* ``Link``: one level of the interconnect as the model sees it: a latency α per message (s) and a
  bandwidth β (bytes/s, one direction). ``LINKS`` holds NVLink 4, PCIe 5, InfiniBand NDR and a
  loopback (gloo on one computer). Their values are **model parameters**, each with its source:
  a line rate from a specification or text, or a value derived by the course from cited numbers.
  They are not measurements of the learner's machine (lesson 09 part 3 fits those).
* ``collective_time_s(op, algorithm, nbytes, ranks, link, gamma_s_per_byte)``: the time of one
  collective as a sum over its steps. In every algorithm the course models, a rank sends at most one
  message and receives at most one in a step, so a step costs ``α + m/β + r·γ`` where ``m`` is the
  largest message of the step and ``r`` the most bytes one rank reduces in it. The closed forms
  (``S`` = nbytes, ``p`` = ranks, ``L = ⌈log₂ p⌉``):

  ============== ============================================== ==============================================
  algorithm      all_reduce                                     reduce_scatter / all_gather
  ============== ============================================== ==============================================
  ring           2(p−1)α + 2(p−1)/p·S/β + (p−1)/p·S·γ            (p−1)α + (p−1)/p·S/β (+ (p−1)/p·S·γ for RS)
  recursive      2·log₂p·α + 2(p−1)/p·S/β + (p−1)/p·S·γ          log₂p·α + (p−1)/p·S/β (+ (p−1)/p·S·γ for RS)
  tree           2L·(α + S/β) + L·S·γ  (binomial, not pipelined)  not modelled
  naive (root)   2(p−1)(α + S/β) + (p−1)·S·γ                      RS: (p−1)(α+S/β+Sγ) + (p−1)(α+S/(pβ));
                                                                  AG: (p−1)(α+S/(pβ)) + (p−1)(α+S/β)
  ============== ============================================== ==============================================

  broadcast / reduce: ring = a pipelined chain in p chunks, 2(p−1)(α + S/(pβ) [+ S/p·γ]); tree =
  L(α + S/β [+ Sγ]); naive = (p−1)(α + S/β [+ Sγ]). all_to_all: ring = pairwise exchange,
  (p−1)(α + S/(pβ)). ``recursive`` needs a power-of-two rank count. ``S`` follows nccl-tests: the
  total array size (for all_gather and reduce_scatter the gathered/scattered whole, for all_to_all
  one rank's send buffer).
* ``busbw_factor``, ``algbw_bytes_per_s``, ``busbw_bytes_per_s``: nccl-tests ``doc/PERFORMANCE.md``.
* ``crossover_bytes(link)``: n* = α·β, the message size where the bandwidth term equals the latency.
* ``knee_bytes(op, algorithm, ranks, link)``: the collective's own crossover, the size S where its α-terms
  equal its β-terms (a ring all-reduce: 2(p−1)α = 2(p−1)/p·S/β, so S = p·α·β; a tree: S = α·β).
"""

from __future__ import annotations

from dataclasses import dataclass

from gpucourse import validate
from gpucourse.errors import InvalidConfig

OPS = ("all_reduce", "reduce_scatter", "all_gather", "broadcast", "reduce", "all_to_all")
ALGORITHMS = ("ring", "tree", "naive", "recursive")  # naive = via a root; recursive = halving/doubling

# Which (op, algorithm) pairs the model (and the microscope) knows.
MODELLED = {
    "all_reduce": ("ring", "tree", "naive", "recursive"),
    "reduce_scatter": ("ring", "naive", "recursive"),
    "all_gather": ("ring", "naive", "recursive"),
    "broadcast": ("ring", "tree", "naive"),
    "reduce": ("ring", "tree", "naive"),
    "all_to_all": ("ring",),
}

PERFORMANCE_MD = "NVIDIA/nccl-tests doc/PERFORMANCE.md (busbw correction factors, 2024-07-24)"


@dataclass(frozen=True)
class Link:
    """One level of the interconnect, as the α-β model sees it (a model parameter, not a measurement)."""

    name: str
    alpha_s: float  # latency of one message (seconds)
    bandwidth_bytes_per_s: float  # β: bytes per second, one direction
    source: str  # where the numbers come from

    def __post_init__(self):
        validate.number("alpha_s", self.alpha_s, minimum=0.0)
        validate.number("bandwidth_bytes_per_s", self.bandwidth_bytes_per_s, minimum=1e-300)


LINKS: dict[str, Link] = {
    "nvlink4": Link(
        "nvlink4", 2e-6, 450e9,
        "model parameters: β = 18 links × 25 GB/s = 450 GB/s per direction per H100/H200 GPU (jax-ml/scaling-book "
        "gpus.md); α = 2 µs per step, an order of magnitude derived by the course: Azure's 1 KB 8-GPU all-reduce "
        "takes ≈ 26–30 µs (Azure/AI-benchmarking-guide) divided by a ring's 2(p−1) = 14 steps; that 1 KB time is "
        "NVLS's, not a ring's (NCCL picks Ring/LL at 1 KB on one node, NVIDIA/nccl-tests#309), so α belongs to "
        "no real algorithm: a model parameter until the course records its own sweep",
    ),
    "nvlink4_achieved": Link(
        "nvlink4_achieved", 2e-6, 370e9,
        "model parameters: β = 370 GB/s, the busbw 8×H100 reach with ring ('protocol overhead (~20%)', sjeaugey, "
        "NVIDIA/nccl-tests#212; scaling-book: 'difficult in practice to exceed 370 GB/s'); α as for nvlink4",
    ),
    "pcie5": Link(
        "pcie5", 5e-6, 63e9,
        "model parameters: β = PCIe 5.0 x16 line rate, 32 GT/s × 16 lanes × 128/130 ≈ 63 GB/s per direction "
        "(PCI-SIG specification; Azure's nvbandwidth measured 51–52 GB/s host→device on H100/H200); "
        "α = 5 µs is an assumption of the course (order of magnitude), not a measurement",
    ),
    "ib_ndr": Link(
        "ib_ndr", 2e-6, 50e9,
        "model parameters: α = 2 µs and β = 50 GB/s (NDR 400 Gb/s) from the α-β page of ttsugriy's distributed "
        "training book (foundations/04-alpha-beta-model)",
    ),
    "loopback": Link(
        "loopback", 142e-6, 2.6e9,
        "model parameters derived by the course from a CS336 learner's anecdotal gloo timings quoted in the "
        "course's multi-GPU review (2 ranks, 1 MB, 0.665 ms; 4 ranks, 100 MB, 58 ms), solved for a ring "
        "all-reduce; your own computer differs: lesson 09 part 3 fits yours",
    ),
}


def _check(op: str, algorithm: str, nbytes, ranks) -> tuple[int, int]:
    validate.choice("op", op, OPS)
    validate.choice("algorithm", algorithm, ALGORITHMS)
    if algorithm not in MODELLED[op]:
        raise InvalidConfig(
            f"the course does not model {op} with the {algorithm} algorithm; it models {op} with "
            f"{', '.join(MODELLED[op])}"
        )
    nbytes = validate.integer("nbytes", nbytes, minimum=0)
    ranks = validate.integer("ranks", ranks, minimum=1)
    if algorithm == "recursive" and ranks & (ranks - 1):
        raise InvalidConfig(f"recursive halving/doubling needs a power-of-two number of ranks, got {ranks}")
    return nbytes, ranks


def log2_ceil(ranks: int) -> int:
    """⌈log₂ p⌉: the rounds of a binomial tree (0 for one rank)."""
    return (int(ranks) - 1).bit_length()


def step_time_s(message_bytes: float, reduced_bytes: float, link: Link, gamma_s_per_byte: float = 0.0) -> float:
    """One step: α + the largest message ÷ β + the most bytes one rank reduces × γ."""
    return link.alpha_s + message_bytes / link.bandwidth_bytes_per_s + reduced_bytes * gamma_s_per_byte


def collective_time_s(op: str, algorithm: str, nbytes: int, ranks: int, link: Link,
                      gamma_s_per_byte: float = 0.0) -> float:
    """The modelled time of one collective (seconds); see the module's table."""
    S, p = _check(op, algorithm, nbytes, ranks)
    if not isinstance(link, Link):
        raise InvalidConfig(f"link must be a Link (e.g. LINKS['nvlink4']), got {link!r}")
    g = validate.number("gamma_s_per_byte", gamma_s_per_byte, minimum=0.0)
    if p == 1:
        return 0.0

    def steps(count, message, reduced=0.0):
        return count * step_time_s(message, reduced, link, g)

    L = log2_ceil(p)
    if algorithm == "ring":
        if op == "all_reduce":
            return steps(p - 1, S / p, S / p) + steps(p - 1, S / p)
        if op == "reduce_scatter":
            return steps(p - 1, S / p, S / p)
        if op in ("all_gather", "all_to_all"):
            return steps(p - 1, S / p)
        if op == "broadcast":
            return steps(2 * (p - 1), S / p)
        return steps(2 * (p - 1), S / p, S / p)  # reduce
    if algorithm == "recursive":
        halving = sum(step_time_s(S / 2**k, S / 2**k, link, g) for k in range(1, L + 1))
        doubling = sum(step_time_s(S / 2**k, 0.0, link, g) for k in range(1, L + 1))
        return {"all_reduce": halving + doubling, "reduce_scatter": halving, "all_gather": doubling}[op]
    if algorithm == "tree":
        if op == "broadcast":
            return steps(L, S)
        if op == "reduce":
            return steps(L, S, S)
        return steps(L, S, S) + steps(L, S)  # all_reduce = reduce + broadcast
    # naive: everything through rank 0, one message at a time
    if op == "broadcast":
        return steps(p - 1, S)
    if op == "reduce":
        return steps(p - 1, S, S)
    if op == "all_reduce":
        return steps(p - 1, S, S) + steps(p - 1, S)
    if op == "reduce_scatter":
        return steps(p - 1, S, S) + steps(p - 1, S / p)
    return steps(p - 1, S / p) + steps(p - 1, S)  # all_gather: gather to the root, then broadcast


def busbw_factor(op: str, ranks: int) -> float:
    """nccl-tests' correction factor: all_reduce 2(p−1)/p; RS, AG, all_to_all (p−1)/p; broadcast, reduce 1."""
    validate.choice("op", op, OPS)
    p = validate.integer("ranks", ranks, minimum=1)
    if op == "all_reduce":
        return 2 * (p - 1) / p
    if op in ("reduce_scatter", "all_gather", "all_to_all"):
        return (p - 1) / p
    return 1.0


def algbw_bytes_per_s(nbytes: int, time_s: float) -> float:
    """nccl-tests' algorithm bandwidth: S / t."""
    S = validate.integer("nbytes", nbytes, minimum=0)
    t = validate.number("time_s", time_s, minimum=0.0)
    if t == 0.0:
        raise InvalidConfig("time_s must be above 0 to give a bandwidth, got 0")
    return S / t


def busbw_bytes_per_s(op: str, nbytes: int, ranks: int, time_s: float) -> float:
    """nccl-tests' bus bandwidth: algbw × busbw_factor(op, ranks)."""
    return algbw_bytes_per_s(nbytes, time_s) * busbw_factor(op, ranks)


def crossover_bytes(link: Link) -> float:
    """n* = α·β: a point-to-point message of n* bytes spends as long on latency as on bandwidth."""
    if not isinstance(link, Link):
        raise InvalidConfig(f"link must be a Link (e.g. LINKS['nvlink4']), got {link!r}")
    return link.alpha_s * link.bandwidth_bytes_per_s


def knee_bytes(op: str, algorithm: str, ranks: int, link: Link) -> float:
    """The size S at which a collective's latency terms (steps × α) equal its bandwidth terms (bytes ÷ β),
    read off the model itself: the time at S = 0 over the time each further byte adds (γ = 0)."""
    _check(op, algorithm, 0, ranks)
    latency_s = collective_time_s(op, algorithm, 0, ranks, link)
    probe = 1 << 40
    per_byte_s = (collective_time_s(op, algorithm, probe, ranks, link) - latency_s) / probe
    if per_byte_s <= 0:
        raise InvalidConfig(f"{op} ({algorithm}) on {ranks} rank(s) sends nothing, so it has no knee")
    return latency_s / per_byte_s


def fit_alpha_beta(message_bytes, times_s) -> Link:
    """Fit t = α + n/β to point-to-point timings by least squares on the *relative* error (each residual
    divided by its time); a ``Link`` named 'fitted'.

    Relative, not absolute: the sizes span decades, and an absolute fit lets the large messages' few
    percent of noise (milliseconds) set α, so that α misses the small messages it describes (a run once
    printed α = 173 µs beside 1 KiB points of 128–142 µs). Times that do not grow with size are refused."""
    ns = [float(validate.number("message bytes", n, minimum=0.0)) for n in message_bytes]
    ts = [float(validate.number("time", t, minimum=0.0)) for t in times_s]
    if len(ns) != len(ts) or len(set(ns)) < 2:
        raise InvalidConfig("fit_alpha_beta needs as many times as sizes and at least two different sizes")
    if min(ts) <= 0.0:
        raise InvalidConfig(f"fit_alpha_beta needs times above 0, got {min(ts)}")
    mean_n, mean_t = sum(ns) / len(ns), sum(ts) / len(ts)
    if sum((n - mean_n) * (t - mean_t) for n, t in zip(ns, ts)) <= 0:
        raise InvalidConfig("the timings do not grow with size, so no bandwidth can be fitted (more or larger sizes?)")
    # minimise Σ w·(α + n·s − t)² with w = 1/t², i.e. Σ((α + n·s)/t − 1)²: normal equations in (α, s), s = 1/β
    weights = [1 / t**2 for t in ts]
    a11 = sum(weights)
    a12 = sum(w * n for w, n in zip(weights, ns))
    a22 = sum(w * n * n for w, n in zip(weights, ns))
    b1 = sum(w * t for w, t in zip(weights, ts))
    b2 = sum(w * n * t for w, n, t in zip(weights, ns, ts))
    det = a11 * a22 - a12 * a12
    alpha, slope = (a22 * b1 - a12 * b2) / det, (a11 * b2 - a12 * b1) / det
    if alpha < 0:  # a latency below 0 means none measurable: refit the line through the origin
        alpha, slope = 0.0, b2 / a22
    if slope <= 0:
        raise InvalidConfig("the timings do not grow with size, so no bandwidth can be fitted (more or larger sizes?)")
    return Link("fitted", alpha, 1.0 / slope, f"least-squares fit of the relative error to {len(ns)} timings")


def is_power_of_two(ranks: int) -> bool:
    return ranks >= 1 and not ranks & (ranks - 1)


__all__ = [
    "ALGORITHMS", "LINKS", "Link", "MODELLED", "OPS", "algbw_bytes_per_s", "busbw_bytes_per_s", "busbw_factor",
    "collective_time_s", "crossover_bytes", "fit_alpha_beta", "is_power_of_two", "knee_bytes", "log2_ceil",
    "step_time_s",
]
