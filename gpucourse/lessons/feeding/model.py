"""Lesson 08's models: a timeline of host, copy engines and SMs, and bytes counted by hand.

Pure functions, no kernel launches: they run the same with or without a GPU.

* ``Params``: the timeline's knobs (launch cost, copy bandwidths and latency, gap between the
  kernels of a replayed CUDA graph). ``DEFAULTS`` says where each default comes from: a claim
  in the course's sources, a specification, or a plain assumption (``PARAM_SOURCES``).
* ``Kernel``, ``Copy``, ``HostWork``, ``Sync``, ``Graph``: the operations a host program issues.
* ``timeline(ops, params)``: when each operation ran on which engine (a DataFrame), under these
  rules: the host issues operations in program order and pays ``launch_us`` for each launch or
  asynchronous copy; an operation on the device starts when it has been issued, the previous
  operation of its stream has finished and its engine is free; one kernel fills the GPU (kernels
  never run side by side); each direction of copy has its own copy engine; a copy from or to
  **pageable** host memory keeps the host waiting until it has finished (the driver stages it
  through a pinned buffer and returns once the last piece is staged: the model simplifies this to
  the end of the copy); ``Sync`` makes the host wait until all issued device work is done.
* scenario builders: ``pipeline`` (chunks of copy → kernel → copy on one or more streams),
  ``training_loop`` (host work, a batch copy, kernels and, optionally, a ``.item()`` per step),
  ``small_kernels`` (a chain of small kernels launched one by one or replayed as a graph).
* bytes: ``chain_bytes`` for the unfused and the fused elementwise chain, and
  ``speedup_from_fusion`` (Amdahl's law) for the source's "1.8×" claim.
* ``copy_time_us`` / ``copy_gbps``: a copy's time is a fixed latency plus bytes ÷ bandwidth.
* ``l2_gbps``: effective bandwidth against the working set, L2 plateau then HBM; ``l2_model_vs``:
  a measured or recorded sweep beside the model anchored at its own two plateaus.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import pandas as pd

from gpucourse import validate
from gpucourse.errors import InvalidConfig

HOST, H2D, SMS, D2H = "host", "copy engine H2D", "SMs", "copy engine D2H"
ENGINES = (HOST, H2D, SMS, D2H)  # the timeline's rows, top to bottom


@dataclass(frozen=True)
class Params:
    """The timeline's knobs (µs, GB/s = 10⁹ bytes/s, i.e. 1 GB/s moves 1,000 bytes per µs)."""

    launch_us: float = 5.0  # host time to issue one kernel launch or one asynchronous copy
    pinned_gbps: float = 25.0  # host↔device bandwidth from pinned (page-locked) memory
    pageable_gbps: float = 10.0  # host↔device bandwidth from ordinary (pageable) memory
    copy_latency_us: float = 10.0  # fixed cost of one copy, whatever its size
    graph_gap_us: float = 1.0  # device-side gap between the kernels of a replayed CUDA graph

    def __post_init__(self):
        for name in ("launch_us", "copy_latency_us", "graph_gap_us"):
            validate.number(name, getattr(self, name), minimum=0, maximum=1e6)
        for name in ("pinned_gbps", "pageable_gbps"):
            validate.number(name, getattr(self, name), minimum=0.01, maximum=1e5)


DEFAULTS = Params()
PARAM_SOURCES = {
    "launch_us": "a torch- or CuPy-like launch: source 002 (the course's cheat sheet) claims 'a few "
                 "microseconds of CPU + driver overhead'; an H100 host measured torch add_ 6.2 µs and CuPy "
                 "7.1 µs, but a Numba launch 16.6 µs (empty kernel) to 78.8 µs (three CuPy arrays) "
                 "(data/reference/nvidia-h100-80gb-hbm3/first-contact/probe.jsonl, step launch_costs)",
    "pinned_gbps": "an assumption: about 80 % of PCIe 4.0 ×16's 31.5 GB/s per direction (PCI-SIG "
                   "specification; source 001 quotes 32 GB/s one way)",
    "pageable_gbps": "an assumption: pageable copies are staged through a pinned buffer by the driver, "
                     "and are slower by a factor that depends on the host; 10 GB/s is not a measurement",
    "copy_latency_us": "an assumption: the device-side fixed cost of one copy (DMA setup), of the order "
                       "of 10 µs; not what a small copy issued from Python and waited for costs (about 70 µs "
                       "for 4 KiB on the H200's recording feeding.copy: Python, driver and the sync included)",
    "graph_gap_us": "an assumption: about 1 µs between the kernels of a replayed graph",
}


# --- operations ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Kernel:
    us: float
    name: str = "kernel"
    stream: int = 0


@dataclass(frozen=True)
class Copy:
    nbytes: int
    direction: str = "H2D"  # "H2D" or "D2H"
    pinned: bool = True
    name: str = ""
    stream: int = 0


@dataclass(frozen=True)
class HostWork:
    us: float
    name: str = "host work"


@dataclass(frozen=True)
class Sync:
    name: str = "synchronize"


@dataclass(frozen=True)
class Graph:
    kernels_us: tuple[float, ...]
    name: str = "graph"
    stream: int = 0


Op = Kernel | Copy | HostWork | Sync | Graph


def copy_time_us(nbytes: int, gbps: float, latency_us: float) -> float:
    """A copy's time: a fixed latency plus bytes ÷ bandwidth (1 GB/s = 1,000 bytes per µs)."""
    nbytes = validate.integer("nbytes", nbytes, minimum=0)
    gbps = validate.number("gbps", gbps, minimum=0.01)
    return float(latency_us) + nbytes / (gbps * 1e3)


def copy_gbps(nbytes: int, gbps: float, latency_us: float) -> float:
    """The effective bandwidth of one copy: small copies are latency-bound, large ones reach ``gbps``."""
    nbytes = validate.integer("nbytes", nbytes, minimum=1)
    return nbytes / (copy_time_us(nbytes, gbps, latency_us) * 1e3)


@dataclass
class _State:
    host_t: float = 0.0
    stream_end: dict = field(default_factory=dict)
    engine_free: dict = field(default_factory=dict)
    device_end: float = 0.0
    rows: list = field(default_factory=list)

    def host(self, start: float, end: float, name: str, kind: str) -> None:
        if end > start:
            self.rows.append({"engine": HOST, "name": name, "kind": kind, "stream": None,
                              "start_us": start, "end_us": end})

    def device(self, engine: str, stream: int, issued: float, duration: float, name: str, kind: str) -> float:
        start = max(issued, self.stream_end.get(stream, 0.0), self.engine_free.get(engine, 0.0))
        end = start + duration
        self.rows.append({"engine": engine, "name": name, "kind": kind, "stream": stream,
                          "start_us": start, "end_us": end})
        self.stream_end[stream] = self.engine_free[engine] = end
        self.device_end = max(self.device_end, end)
        return end


def timeline(ops, params: Params = DEFAULTS) -> pd.DataFrame:
    """When each operation ran: rows (engine, name, kind, stream, start_us, end_us), see the module doc."""
    if not isinstance(params, Params):
        raise InvalidConfig(f"params must be a feeding.model.Params, got {type(params).__name__}")
    s = _State()
    for op in ops:
        if isinstance(op, Kernel):
            validate.number("kernel us", op.us, minimum=0)
            issued = s.host_t + params.launch_us
            s.host(s.host_t, issued, f"launch {op.name}", "launch")
            s.device(SMS, op.stream, issued, op.us, op.name, "kernel")
            s.host_t = issued
        elif isinstance(op, Copy):
            validate.choice("copy direction", op.direction, ("H2D", "D2H"))
            engine = H2D if op.direction == "H2D" else D2H
            gbps = params.pinned_gbps if op.pinned else params.pageable_gbps
            name = op.name or f"{op.direction} {op.nbytes:,} B" + ("" if op.pinned else " (pageable)")
            issued = s.host_t + params.launch_us
            s.host(s.host_t, issued, f"issue {name}", "launch")
            end = s.device(engine, op.stream, issued, copy_time_us(op.nbytes, gbps, params.copy_latency_us),
                           name, "copy")
            s.host_t = issued
            if not op.pinned:  # the host waits for a pageable copy to finish
                s.host(issued, end, f"waits for {name}", "wait")
                s.host_t = max(issued, end)
        elif isinstance(op, HostWork):
            validate.number("host work us", op.us, minimum=0)
            s.host(s.host_t, s.host_t + op.us, op.name, "host")
            s.host_t += op.us
        elif isinstance(op, Sync):
            s.host(s.host_t, s.device_end, f"waits: {op.name}", "wait")
            s.host_t = max(s.host_t, s.device_end)
        elif isinstance(op, Graph):
            if not op.kernels_us:
                raise InvalidConfig("a graph needs at least one kernel")
            issued = s.host_t + params.launch_us
            s.host(s.host_t, issued, f"launch {op.name}", "launch")
            t = issued
            for i, us in enumerate(op.kernels_us):
                t = s.device(SMS, op.stream, t, float(us), f"{op.name}[{i}]", "kernel") + params.graph_gap_us
            s.host_t = issued
        else:
            raise InvalidConfig(f"not a timeline operation: {op!r}")
    return pd.DataFrame(s.rows, columns=["engine", "name", "kind", "stream", "start_us", "end_us"])


def summary(tl: pd.DataFrame) -> dict:
    """Makespan, busy time per engine, and the share of the makespan the SMs sat idle."""
    makespan = float(tl.end_us.max()) if len(tl) else 0.0
    busy = {engine: float((tl.end_us - tl.start_us)[tl.engine == engine].sum()) for engine in ENGINES}
    idle = 1.0 - busy[SMS] / makespan if makespan else 0.0
    return {"makespan_us": makespan, "busy_us": busy, "sm_idle_fraction": idle}


# --- scenarios ----------------------------------------------------------------------------------


def pipeline(total_bytes: int, kernel_us: float, chunks: int = 1, streams: int = 1, pinned: bool = True) -> list:
    """Copy ``total_bytes`` in, compute, copy the same amount out: in ``chunks`` pieces on ``streams`` streams."""
    total_bytes = validate.integer("total_bytes", total_bytes, minimum=1)
    chunks = validate.integer("chunks", chunks, minimum=1, maximum=64)
    streams = validate.integer("streams", streams, minimum=1, maximum=16)
    kernel_us = validate.number("kernel_us", kernel_us, minimum=0)
    ops = []
    for c in range(chunks):
        stream = c % streams
        part = total_bytes // chunks + (1 if c < total_bytes % chunks else 0)
        ops += [Copy(part, "H2D", pinned, f"H2D chunk {c}", stream),
                Kernel(kernel_us / chunks, f"kernel chunk {c}", stream),
                Copy(part, "D2H", pinned, f"D2H chunk {c}", stream)]
    return ops


def training_loop(steps: int = 4, kernels_per_step: int = 6, kernel_us: float = 40.0, host_us: float = 60.0,
                  batch_bytes: int = 1 << 20, item_each_step: bool = True, pinned: bool = True) -> list:
    """Per step: host work (Python, data preparation), the batch's copy, the step's kernels and, with
    ``item_each_step``, a ``loss.item()``: a sync then a 4-byte pageable copy back to the host."""
    steps = validate.integer("steps", steps, minimum=1, maximum=50)
    kernels_per_step = validate.integer("kernels_per_step", kernels_per_step, minimum=1, maximum=200)
    ops = []
    for step in range(steps):
        ops += [HostWork(host_us, f"step {step}: Python + data"),
                Copy(batch_bytes, "H2D", pinned, f"batch {step}")]
        ops += [Kernel(kernel_us, f"step {step} kernel {k}") for k in range(kernels_per_step)]
        if item_each_step:
            ops += [Sync(f"loss.item() step {step}"), Copy(4, "D2H", False, f"loss {step} → host")]
    return ops


def small_kernels(count: int = 8, kernel_us: float = 2.0, graph: bool = False) -> list:
    """A chain of ``count`` small kernels: launched one by one, or replayed as one CUDA graph."""
    count = validate.integer("count", count, minimum=1, maximum=500)
    kernel_us = validate.number("kernel_us", kernel_us, minimum=0)
    if graph:
        return [Graph(tuple([kernel_us] * count), "graph")]
    return [Kernel(kernel_us, f"small kernel {i}") for i in range(count)]


def per_kernel_us(count: int, kernel_us: float, graph: bool, params: Params = DEFAULTS) -> float:
    """Model time per kernel of a chain (makespan ÷ count)."""
    return summary(timeline(small_kernels(count, kernel_us, graph), params))["makespan_us"] / count


def with_params(params: Params = DEFAULTS, **changes) -> Params:
    return replace(params, **changes)


# --- bytes of an elementwise chain --------------------------------------------------------------

# y = (max(2x + bias, 0))² + 1, written as five separate operations: (operation, arrays read).
CHAIN = (("t = x * 2", 1), ("t = t + bias", 2), ("t = max(t, 0)", 1), ("t = t * t", 1), ("y = t + 1", 1))
CHAIN_INPUTS = 2  # x and bias: all a fused kernel reads


def chain_bytes(n: int, itemsize: int = 4, fused: bool = False) -> int:
    """Bytes the chain moves to and from DRAM for ``n`` elements: unfused, each operation reads its
    inputs and writes its output; fused, x and bias are read once and y written once."""
    n = validate.integer("n", n, minimum=1)
    itemsize = validate.choice("itemsize", itemsize, (1, 2, 4, 8))
    if fused:
        return (CHAIN_INPUTS + 1) * n * itemsize
    return sum(reads + 1 for _, reads in CHAIN) * n * itemsize


def chain_launches(fused: bool = False) -> int:
    return 1 if fused else len(CHAIN)


def chain_time_us(n: int, gbps: float, launch_us: float = DEFAULTS.launch_us, fused: bool = False,
                  itemsize: int = 4) -> float:
    """Bandwidth model of the chain: each launch costs at least ``launch_us`` (host-bound when the
    kernel is shorter), else its bytes ÷ bandwidth."""
    gbps = validate.number("gbps", gbps, minimum=0.01)
    per_launch_bytes = chain_bytes(n, itemsize, fused) / chain_launches(fused)
    return chain_launches(fused) * max(float(launch_us), per_launch_bytes / (gbps * 1e3))


def speedup_from_fusion(memory_fraction: float, byte_ratio: float) -> float:
    """Amdahl: a step whose ``memory_fraction`` is a memory-bound chain that fusion shrinks ``byte_ratio``×."""
    f = validate.number("memory_fraction", memory_fraction, minimum=0, maximum=1)
    r = validate.number("byte_ratio", byte_ratio, minimum=1)
    return 1.0 / ((1.0 - f) + f / r)


def fraction_for_speedup(speedup: float, byte_ratio: float) -> float:
    """The share of the step the fused chain must have been for fusion to give ``speedup``×
    (inverse of ``speedup_from_fusion``); above 1 means the speed-up is impossible from bytes alone."""
    s = validate.number("speedup", speedup, minimum=1)
    r = validate.number("byte_ratio", byte_ratio, minimum=1.000001)
    return (1.0 - 1.0 / s) / (1.0 - 1.0 / r)


# --- the L2 -------------------------------------------------------------------------------------

H100_L2_BYTES = 50 * 2**20  # H100 SXM5 and PCIe: 50 MB of L2 ("NVIDIA H100 Tensor Core GPU Architecture")
L2_OVER_HBM = 2.5  # an assumption for the model's plateau, not a measurement


def l2_gbps(working_set_bytes: int, l2_bytes: int, hbm_gbps: float, l2_over_hbm: float = L2_OVER_HBM) -> float:
    """Effective bandwidth of a kernel that sweeps its working set again and again: at the L2's rate
    while the set fits; beyond, the fraction l2/working-set is served by the L2 and the rest by HBM.
    A simple model, and the H200's recording (feeding.l2) departs from it both ways: at 2× the L2 the
    copy kept nearly its L2 rate (far above the model), at 4× it fell to about HBM's (below the model);
    see ``l2_model_vs``. Why it keeps more at 2× is not measured: a hypothesis (the L2 is not a strict
    LRU; writes allocate whole sectors without reading them, so a pass may find more resident)."""
    ws = validate.integer("working_set_bytes", working_set_bytes, minimum=1)
    l2 = validate.integer("l2_bytes", l2_bytes, minimum=1)
    hbm = validate.number("hbm_gbps", hbm_gbps, minimum=0.01)
    l2_rate = hbm * validate.number("l2_over_hbm", l2_over_hbm, minimum=1)
    hit = min(1.0, l2 / ws)
    return 1.0 / (hit / l2_rate + (1.0 - hit) / hbm)


def l2_model_vs(data: pd.DataFrame) -> pd.DataFrame:
    """A measured or recorded L2 sweep (columns ``working_set_bytes``, ``l2_bytes``, ``gbps``) beside
    ``l2_gbps`` anchored at the sweep's own two ends: the L2's rate = the largest working set within
    the L2's, HBM's = the rate that puts the model through the largest working set's. ``data / model``
    above 1: the GPU kept more in its L2 than the model; below 1: less."""
    for column in ("working_set_bytes", "l2_bytes", "gbps"):
        if column not in data:
            raise InvalidConfig(f"the L2 sweep needs a column {column!r}")
    rows = data.sort_values("working_set_bytes")
    l2 = int(rows.l2_bytes.iloc[0])
    inside = rows[rows.working_set_bytes <= l2]
    if inside.empty or int(rows.working_set_bytes.iloc[-1]) <= 2 * l2:
        raise InvalidConfig("the L2 sweep needs a working set within the L2 and one past twice its size")
    l2_rate, far_rate = float(inside.gbps.iloc[-1]), float(rows.gbps.iloc[-1])
    hit = l2 / int(rows.working_set_bytes.iloc[-1])
    slower = 1.0 / far_rate - hit / l2_rate  # the far end's time per byte that HBM serves
    if slower <= 0 or far_rate > l2_rate:
        raise InvalidConfig("the L2 sweep is faster far past the L2 than within it: no plateau to anchor the model")
    hbm = (1.0 - hit) / slower
    model = [l2_gbps(int(ws), l2, hbm, l2_rate / hbm) for ws in rows.working_set_bytes]
    return pd.DataFrame({"working set / L2": rows.working_set_bytes.to_numpy() / l2,
                         "GB/s": rows.gbps.to_numpy(), "model GB/s": model,
                         "data / model": rows.gbps.to_numpy() / model})
