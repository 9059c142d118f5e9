"""Lesson 10's models (pure Python, no processes): a data-parallel step's timeline, and ZeRO/FSDP memory and
traffic per rank.

The timeline is a **model**, never a measurement: per-layer compute time = FLOPs ÷ (a GPU's datasheet
TFLOP/s × an assumed efficiency); per-bucket communication = ``comm_s(nbytes)``, any callable (lesson 09's
α-β model, bound by ``collective_cost``); backward runs the layers in reverse; one communication stream,
first in first out; a bucket's all-reduce starts when its last gradient is ready and the stream is free.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pandas as pd

from gpucourse import validate
from gpucourse.errors import InvalidConfig
from gpucourse.lessons.dataparallel.kernels import BUCKET_CAP_BYTES, FIRST_BUCKET_BYTES, assign_buckets
from gpucourse.measure import runtime

CommCost = Callable[[int], float]

EFFICIENCY = 0.5  # an assumption, not a measurement: the share of the datasheet's dense TFLOP/s a layer reaches
EFFICIENCY_SOURCE = ("assumed: large matmuls reach about half to three quarters of the dense datasheet "
                     "TFLOP/s; the lesson's timeline takes half, change it with efficiency=")


@dataclass(frozen=True)
class Layer:
    """One layer of the model: its parameter count and its forward FLOPs for one rank's micro-batch
    (backward costs twice forward: the gradients of the input and of the weights)."""

    name: str
    params: int
    forward_flops: float


def mlp_layers(widths: tuple[int, ...], tokens: int) -> list[Layer]:
    """Linear layers d_in → d_out on ``tokens`` rows: d_in·d_out + d_out parameters, 2·tokens·d_in·d_out FLOPs."""
    if len(widths) < 2 or min(widths) < 1:
        raise InvalidConfig(f"widths: at least two positive widths, not {widths!r}")
    validate.integer("tokens", tokens, minimum=1)
    return [Layer(f"linear {i}", d_in * d_out + d_out, 2.0 * tokens * d_in * d_out)
            for i, (d_in, d_out) in enumerate(zip(widths[:-1], widths[1:]))]


def transformer_layers(blocks: int = 24, d_model: int = 2048, tokens: int = 8192, vocab: int = 32000) -> list[Layer]:
    """A GPT-style stack, one entry per parameter tensor as DDP sees them: an embedding, then per block a norm
    (2d), the attention's QKV (3d² + 3d) and output projection (d² + d), a norm, the MLP's two matrices
    (4d² + 4d, 4d² + d); the output projection last. FLOPs 2·tokens·(matrix parameters); the attention
    scores' FLOPs and the norms' are left out: a model."""
    for name, value in (("blocks", blocks), ("d_model", d_model), ("tokens", tokens), ("vocab", vocab)):
        validate.integer(name, value, minimum=1)
    d = d_model
    layers = [Layer("embedding", vocab * d, 0.0)]
    for i in range(blocks):
        layers += [Layer(f"block {i} norm 1", 2 * d, 0.0),
                   Layer(f"block {i} qkv", 3 * d * d + 3 * d, 2.0 * tokens * 3 * d * d),
                   Layer(f"block {i} attention out", d * d + d, 2.0 * tokens * d * d),
                   Layer(f"block {i} norm 2", 2 * d, 0.0),
                   Layer(f"block {i} mlp in", 4 * d * d + 4 * d, 2.0 * tokens * 4 * d * d),
                   Layer(f"block {i} mlp out", 4 * d * d + d, 2.0 * tokens * 4 * d * d)]
    return layers + [Layer("output", vocab * d, 2.0 * tokens * vocab * d)]


def compute_s(flops: float, gpu: str = "NVIDIA H200", dtype: str = "bf16", efficiency: float = EFFICIENCY) -> float:
    """Seconds for ``flops`` at ``efficiency`` × the datasheet's dense TFLOP/s (``runtime.DATASHEET_TFLOPS``)."""
    gpu = validate.choice("gpu", gpu, tuple(runtime.DATASHEET_TFLOPS))
    dtype = validate.choice("dtype", dtype, tuple(runtime.DATASHEET_TFLOPS[gpu]))
    efficiency = validate.number("efficiency", efficiency, minimum=0.01, maximum=1.0)
    return flops / (runtime.DATASHEET_TFLOPS[gpu][dtype] * 1e12 * efficiency)


def alpha_beta(alpha_s: float, bandwidth_bytes_per_s: float, ranks: int = 2) -> CommCost:
    """A ring all-reduce in the α-β model: 2(p−1)α + 2(p−1)/p · n/β (lesson 09; nccl-tests PERFORMANCE.md)."""
    validate.number("alpha_s", alpha_s, minimum=0.0)
    validate.number("bandwidth_bytes_per_s", bandwidth_bytes_per_s, minimum=1.0)
    validate.integer("ranks", ranks, minimum=1)
    steps = 2 * (ranks - 1)
    return lambda nbytes: steps * alpha_s + steps / ranks * nbytes / bandwidth_bytes_per_s if nbytes else 0.0


def collective_cost(op: str = "all_reduce", link: str = "nvlink4", ranks: int = 8,
                    algorithm: str = "ring") -> CommCost:
    """``comm_s(nbytes)`` from lesson 09's α-β model (``collectives.model.collective_time_s``) for a named link."""
    from gpucourse.lessons.collectives import model as collectives

    link = validate.choice("link", link, tuple(collectives.LINKS))
    validate.integer("ranks", ranks, minimum=1)
    chosen = collectives.LINKS[link]
    collectives.collective_time_s(op, algorithm, 1, ranks, chosen)  # bad op/algorithm: one line, now
    return lambda nbytes: collectives.collective_time_s(op, algorithm, int(nbytes), ranks, chosen) if nbytes else 0.0


# --- the data-parallel timeline ----------------------------------------------------------------------------


def layer_buckets(layers: list[Layer], cap_bytes: int, first_bucket_bytes: int | None = FIRST_BUCKET_BYTES,
                  bytes_per_param: int = 2) -> list[list[int]]:
    """Layer indices per bucket (a layer is one parameter here), reverse order, DDP's rule (kernels.assign_buckets)."""
    validate.number("cap_bytes", cap_bytes, minimum=0)
    return assign_buckets([layer.params * bytes_per_param for layer in layers], int(cap_bytes),
                          None if first_bucket_bytes is None else int(first_bucket_bytes))


def ddp_schedule(layers: list[Layer], comm_s: CommCost, *, cap_bytes: int = BUCKET_CAP_BYTES,
                 first_bucket_bytes: int | None = FIRST_BUCKET_BYTES, bytes_per_param: int = 2,
                 layer_s: Callable[[float], float] = compute_s) -> pd.DataFrame:
    """One step: forward, backward in reverse, a bucket's all-reduce on the one communication stream once its
    last gradient exists. Rows: stream ("compute"/"communication"), kind, name, start_s, end_s, nbytes."""
    rows = []
    t = 0.0
    for layer in layers:
        end = t + layer_s(layer.forward_flops)
        rows.append(("compute", "forward", layer.name, t, end, 0))
        t = end
    ready = {}
    for index in reversed(range(len(layers))):
        end = t + layer_s(2.0 * layers[index].forward_flops)
        rows.append(("compute", "backward", layers[index].name, t, end, 0))
        ready[index] = t = end
    free = 0.0
    for b, members in enumerate(layer_buckets(layers, cap_bytes, first_bucket_bytes, bytes_per_param)):
        nbytes = sum(layers[i].params for i in members) * bytes_per_param
        start = max(free, max(ready[i] for i in members))
        free = start + comm_s(nbytes)
        rows.append(("communication", "all-reduce", f"bucket {b} ({len(members)} layers)", start, free, nbytes))
    return pd.DataFrame(rows, columns=["stream", "kind", "name", "start_s", "end_s", "nbytes"])


def summary(tl: pd.DataFrame) -> dict:
    """Step time, compute time, communication time, exposed communication (after the last compute) and its
    share of all communication, and the number of collectives."""
    compute = tl[tl.stream == "compute"]
    comm = tl[tl.stream == "communication"]
    compute_end = float(compute.end_s.max()) if len(compute) else 0.0
    step = float(tl.end_s.max()) if len(tl) else 0.0
    comm_total = float((comm.end_s - comm.start_s).sum())
    exposed = max(0.0, step - compute_end)
    return {"step_s": step, "compute_s": compute_end, "comm_s": comm_total, "exposed_comm_s": exposed,
            "exposed_fraction": exposed / comm_total if comm_total > 0 else 0.0, "collectives": len(comm)}


def bucket_sweep(layers: list[Layer], comm_s: CommCost, caps_bytes: list[int], **kwargs) -> pd.DataFrame:
    """Step time and exposed communication against the bucket cap (the U-curve)."""
    rows = []
    for cap in caps_bytes:
        s = summary(ddp_schedule(layers, comm_s, cap_bytes=cap, **kwargs))
        rows.append({"cap_bytes": cap, **s})
    return pd.DataFrame(rows)


def fsdp_units(layers: list[Layer]) -> list[Layer]:
    """FSDP's units as it is usually wrapped: one per transformer block (its tensors together), the rest alone."""
    units: list[Layer] = []
    for layer in layers:
        unit = " ".join(layer.name.split()[:2]) if layer.name.startswith("block ") else layer.name
        if units and units[-1].name == unit:
            last = units.pop()
            layer = Layer(unit, last.params + layer.params, last.forward_flops + layer.forward_flops)
        units.append(Layer(unit, layer.params, layer.forward_flops))
    return units


# --- FSDP with prefetch ------------------------------------------------------------------------------------


def fsdp_schedule(layers: list[Layer], all_gather_s: CommCost, reduce_scatter_s: CommCost, *, prefetch: int = 1,
                  bytes_per_param: int = 2, layer_s: Callable[[float], float] = compute_s) -> pd.DataFrame:
    """FSDP, one unit per layer, one communication stream in issue order: forward all-gathers each layer's
    parameters before its compute; backward all-gathers them again, computes, then reduce-scatters its
    gradients. ``prefetch`` = how many layers ahead an all-gather is issued (0: only when needed)."""
    validate.number("prefetch", prefetch, minimum=0, maximum=len(layers))
    rows = []
    free = 0.0

    def comm(kind: str, index: int, issue: float, cost: CommCost) -> float:
        nonlocal free
        nbytes = layers[index].params * bytes_per_param
        start = max(issue, free)
        free = start + cost(nbytes)
        rows.append(("communication", kind, layers[index].name, start, free, nbytes))
        return free

    for phase, order, factor in (("forward", list(range(len(layers))), 1.0),
                                 ("backward", list(reversed(range(len(layers)))), 2.0)):
        begin = max([r[4] for r in rows if r[0] == "compute"], default=0.0)
        gathered, ends = {}, []
        for k in range(min(prefetch + 1, len(order))):
            gathered[k] = comm("all-gather", order[k], begin, all_gather_s)
        for k, index in enumerate(order):
            if k not in gathered:  # no prefetch: issued when the previous layer finished
                gathered[k] = comm("all-gather", index, ends[-1] if ends else begin, all_gather_s)
            start = max(gathered[k], ends[-1] if ends else begin)
            ends.append(start + layer_s(factor * layers[index].forward_flops))
            rows.append(("compute", phase, layers[index].name, start, ends[-1], 0))
            if phase == "backward":
                comm("reduce-scatter", index, ends[-1], reduce_scatter_s)
            ahead = k + prefetch + 1
            if prefetch and ahead < len(order):
                gathered[ahead] = comm("all-gather", order[ahead], ends[-1], all_gather_s)
    return pd.DataFrame(rows, columns=["stream", "kind", "name", "start_s", "end_s", "nbytes"])


# --- ZeRO / FSDP: memory and traffic per rank --------------------------------------------------------------

STAGES = ("DDP (ZeRO-0)", "ZeRO-1", "ZeRO-2", "ZeRO-3 / FSDP")
# mixed-precision Adam, as in the ZeRO paper (Rajbhandari et al. 2020, §3): bf16 parameters and gradients (the
# paper says fp16: the same 2 bytes), fp32 master weights + momentum + variance = 12 bytes per parameter of
# optimizer state
BYTES = {"parameters": 2, "gradients": 2, "optimizer state": 12}


def memory_per_rank(params: int, ranks: int, stage: str, bytes_per: dict | None = None) -> dict[str, float]:
    """Bytes per rank of parameters, gradients and optimizer state: ZeRO-1 shards the optimizer state,
    ZeRO-2 the gradients too, ZeRO-3/FSDP the parameters too (activations not counted)."""
    validate.integer("params", params, minimum=1)
    validate.integer("ranks", ranks, minimum=1)
    stage = validate.choice("stage", stage, STAGES)
    level = STAGES.index(stage)
    sizes = {**BYTES, **(bytes_per or {})}
    sharded = {"optimizer state": level >= 1, "gradients": level >= 2, "parameters": level >= 3}
    return {part: params * sizes[part] / (ranks if sharded[part] else 1) for part in ("parameters", "gradients",
                                                                                     "optimizer state")}


def traffic_per_rank(grad_bytes: int, ranks: int, stage: str) -> dict[str, float]:
    """Bytes each rank sends per step, ring algorithms: all-reduce 2(p−1)/p·Ψ; reduce-scatter and all-gather
    (p−1)/p·Ψ each (nccl-tests' bus factors). DDP: one all-reduce (2Ψ); ZeRO-1/2: reduce-scatter the
    gradients, all-gather the parameters (2Ψ); FSDP: all-gather forward and backward, reduce-scatter (3Ψ)."""
    validate.integer("ranks", ranks, minimum=1)
    stage = validate.choice("stage", stage, STAGES)
    share = (ranks - 1) / ranks * grad_bytes
    if stage == STAGES[0]:
        return {"all-reduce": 2 * share}
    if stage == STAGES[3]:
        return {"all-gather (forward)": share, "all-gather (backward)": share, "reduce-scatter": share}
    return {"reduce-scatter": share, "all-gather": share}
