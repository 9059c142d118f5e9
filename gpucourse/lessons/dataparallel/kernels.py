"""Lesson 10's code that learners read: a small model, and its gradients averaged over data-parallel ranks
four ways (per parameter, one flat buffer, hooks that overlap with backward, buckets), then sharded (a ZeRO
step and a toy FSDP step). Every collective goes through ``Comm``, which counts calls and bytes.

It runs in each rank's process, started by ``experiments.run_ranks`` (torch.distributed with gloo on the CPU,
or NCCL with one GPU per rank). Buckets follow PyTorch's DistributedDataParallel: parameters in *reverse*
order (the order backward produces their gradients) and a small first bucket that closes early.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.distributed as dist
from torch import nn

# PyTorch's defaults: torch/nn/parallel/distributed.py, dist._DEFAULT_FIRST_BUCKET_BYTES ("Experiments showed
# 1MB is a reasonable value") and DistributedDataParallel(bucket_cap_mb=25)
FIRST_BUCKET_BYTES = 1 << 20
BUCKET_CAP_BYTES = 25 << 20
WIDTHS = (32, 64, 64, 64, 8)  # the small model's layer widths


def small_model(widths: tuple[int, ...] = WIDTHS, seed: int = 0) -> nn.Sequential:
    """A small MLP, the same weights on every rank (same seed)."""
    torch.manual_seed(seed)
    layers: list[nn.Module] = []
    for i, (d_in, d_out) in enumerate(zip(widths[:-1], widths[1:])):
        layers.append(nn.Linear(d_in, d_out))
        if i < len(widths) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def transformer_module(blocks: int = 24, d_model: int = 2048, vocab: int = 32000) -> nn.Module:
    """The lesson's GPT-style stack as PyTorch modules, on the "meta" device (sizes, no storage): what DDP would
    see of ``model.transformer_layers`` — an embedding, per block a LayerNorm, QKV and output ``nn.Linear``s, a
    LayerNorm and the MLP's two ``nn.Linear``s, then the output projection (no bias). Nothing runs."""
    d = d_model
    with torch.device("meta"):
        stack = [nn.Embedding(vocab, d)]
        for _ in range(blocks):
            stack.append(nn.Sequential(nn.LayerNorm(d), nn.Linear(d, 3 * d), nn.Linear(d, d), nn.LayerNorm(d),
                                       nn.Linear(d, 4 * d), nn.Linear(4 * d, d)))
        stack.append(nn.Linear(d, vocab, bias=False))
        return nn.Sequential(*stack)


def assign_buckets(param_bytes: list[int], cap_bytes: int,
                   first_bucket_bytes: int | None = None) -> list[list[int]]:
    """Parameter indices per bucket, as PyTorch's DistributedDataParallel assigns them: its own C++ routine
    (``dist._compute_bucket_assignment_by_size``, which DDP's Reducer calls when it rebuilds the buckets after
    the first step, in the order backward produced the gradients: here the reverse of the parameters), a
    bucket closed once it holds at least ``cap_bytes`` (the first one at ``first_bucket_bytes``, when given).
    Bucket 0 is reduced first. Lab 10 has learners write the rule; this is PyTorch's, not a copy of an answer."""
    if not param_bytes:
        return []
    order = list(reversed(range(len(param_bytes))))
    # tensors with no storage ("meta"), only a size: a byte each, so numel is the parameter's bytes
    tensors = [torch.empty(int(param_bytes[i]), dtype=torch.uint8, device="meta") for i in order]
    limits = [int(cap_bytes)] if first_bucket_bytes is None else [int(first_bucket_bytes), int(cap_bytes)]
    buckets, _ = dist._compute_bucket_assignment_by_size(tensors, limits, [False] * len(order), order)
    return [list(bucket) for bucket in buckets]


@dataclass
class Comm:
    """The collectives a rank calls, each counted: ``calls[op]`` and ``nbytes[op]`` (bytes of the tensor each
    call was given, what nccl-tests calls the size S). Gloo has no true reduce-scatter: ``reduce_scatter``
    all-reduces and keeps this rank's chunk (pytorch/pytorch#118911), so it is counted, never timed."""

    world: int
    rank: int
    calls: dict[str, int] = field(default_factory=dict)
    nbytes: dict[str, int] = field(default_factory=dict)
    sizes: list[tuple[str, int]] = field(default_factory=list)

    def _count(self, op: str, tensor: torch.Tensor) -> None:
        size = tensor.numel() * tensor.element_size()
        self.calls[op] = self.calls.get(op, 0) + 1
        self.nbytes[op] = self.nbytes.get(op, 0) + size
        self.sizes.append((op, size))

    def all_reduce(self, tensor: torch.Tensor, async_op: bool = False):
        self._count("all_reduce", tensor)
        return dist.all_reduce(tensor, async_op=async_op)

    def reduce_scatter(self, flat: torch.Tensor) -> torch.Tensor:
        """This rank's chunk of the sum of ``flat`` over the ranks (``flat`` divides by the world size)."""
        self._count("reduce_scatter", flat)
        summed = flat.clone()
        dist.all_reduce(summed)  # gloo: an all-reduce stands in for the reduce-scatter
        return summed.chunk(self.world)[self.rank].clone()

    def all_gather(self, shard: torch.Tensor) -> torch.Tensor:
        """Every rank's shard, concatenated in rank order."""
        parts = [torch.empty_like(shard) for _ in range(self.world)]
        self._count("all_gather", torch.empty(shard.numel() * self.world, dtype=shard.dtype, device="meta"))
        dist.all_gather(parts, shard.contiguous())
        return torch.cat(parts)


def loss_on(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return nn.functional.mse_loss(model(x), y)


# --- 1 · one all-reduce per parameter, after backward ------------------------------------------------------


def reduce_per_parameter(model: nn.Module, comm: Comm) -> None:
    for p in model.parameters():
        comm.all_reduce(p.grad)
        p.grad /= comm.world


# --- 2 · one flat buffer, one all-reduce, after backward ---------------------------------------------------


def reduce_flat(model: nn.Module, comm: Comm) -> None:
    grads = [p.grad for p in model.parameters()]
    flat = torch.cat([g.reshape(-1) for g in grads])
    comm.all_reduce(flat)
    flat /= comm.world
    offset = 0
    for g in grads:
        g.copy_(flat[offset:offset + g.numel()].view_as(g))
        offset += g.numel()


# --- 3 and 4 · hooks: reduce while backward is still running, per parameter or per bucket -----------------


class BucketedReducer:
    """Launches an asynchronous all-reduce of a bucket as soon as backward has produced all its gradients
    (``register_post_accumulate_grad_hook``); ``finish()`` waits for them and averages. ``cap_bytes=0``: one
    bucket per parameter (the overlap version of 1); a cap above the model's size: one bucket (version 2)."""

    def __init__(self, model: nn.Module, comm: Comm, cap_bytes: int = BUCKET_CAP_BYTES,
                 first_bucket_bytes: int | None = FIRST_BUCKET_BYTES):
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.comm = comm
        sizes = [p.numel() * p.element_size() for p in self.params]
        self.buckets = assign_buckets(sizes, cap_bytes, first_bucket_bytes)
        self.bucket_of = {i: b for b, members in enumerate(self.buckets) for i in members}
        self.ready_order: list[int] = []  # parameter indices, in the order backward produced them
        self.launch_order: list[int] = []  # bucket indices, in the order their all-reduce started
        self._waiting: list[int] = []
        self._pending: list[tuple[int, torch.Tensor, object]] = []
        self._handles = [p.register_post_accumulate_grad_hook(self._hook(i)) for i, p in enumerate(self.params)]
        self._new_step()

    def _new_step(self) -> None:
        self._waiting = [len(members) for members in self.buckets]
        self._pending = []
        self._fresh = True  # the next hook starts a step: the orders of the last one are kept until then

    def _hook(self, index: int):
        def ready(_param: torch.Tensor) -> None:
            if self._fresh:
                self.ready_order, self.launch_order, self._fresh = [], [], False
            self.ready_order.append(index)
            bucket = self.bucket_of[index]
            self._waiting[bucket] -= 1
            if self._waiting[bucket] == 0:
                self._launch(bucket)
        return ready

    def _launch(self, bucket: int) -> None:
        flat = torch.cat([self.params[i].grad.reshape(-1) for i in self.buckets[bucket]])
        self.launch_order.append(bucket)
        self._pending.append((bucket, flat, self.comm.all_reduce(flat, async_op=True)))

    def finish(self) -> None:
        for bucket, flat, work in self._pending:
            work.wait()
            flat /= self.comm.world
            offset = 0
            for i in self.buckets[bucket]:
                g = self.params[i].grad
                g.copy_(flat[offset:offset + g.numel()].view_as(g))
                offset += g.numel()
        self._new_step()

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()


# --- 5 · sharded: ZeRO (optimizer state and gradients sharded) and a toy FSDP (parameters sharded too) ------


def flat_params(model: nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def load_flat(model: nn.Module, flat: torch.Tensor) -> None:
    offset = 0
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(flat[offset:offset + p.numel()].view_as(p))
            offset += p.numel()


def padded(flat: torch.Tensor, world: int) -> torch.Tensor:
    """``flat`` with zeros appended so that it splits into ``world`` equal shards."""
    extra = (-flat.numel()) % world
    return torch.cat([flat, flat.new_zeros(extra)]) if extra else flat


def zero_step(model: nn.Module, comm: Comm, lr: float) -> None:
    """After backward: reduce-scatter the gradients (this rank keeps the average of its shard), update only
    its shard of the parameters (its optimizer state would be the shard's too), all-gather the parameters."""
    n = sum(p.numel() for p in model.parameters())
    grads = padded(torch.cat([p.grad.reshape(-1) for p in model.parameters()]), comm.world)
    grad_shard = comm.reduce_scatter(grads) / comm.world
    shard = padded(flat_params(model), comm.world).chunk(comm.world)[comm.rank]
    shard = shard - lr * grad_shard
    load_flat(model, comm.all_gather(shard)[:n])


def fsdp_step(model: nn.Module, shard: torch.Tensor, x: torch.Tensor, y: torch.Tensor, comm: Comm,
              lr: float) -> torch.Tensor:
    """One step of a toy FSDP with one unit (the whole model): each rank keeps only ``shard``. All-gather
    for forward (then free), all-gather again for backward, reduce-scatter the gradients, update the shard.
    The toy recomputes forward in its backward (it keeps no activations); real FSDP gathers per layer."""
    n = sum(p.numel() for p in model.parameters())
    load_flat(model, comm.all_gather(shard)[:n])  # forward's all-gather
    with torch.no_grad():
        loss_on(model, x, y)
    load_flat(model, torch.zeros(n))  # "freed": the full parameters are gone until backward
    load_flat(model, comm.all_gather(shard)[:n])  # backward's all-gather
    model.zero_grad()
    loss_on(model, x, y).backward()
    grads = padded(torch.cat([p.grad.reshape(-1) for p in model.parameters()]), comm.world)
    return shard - lr * comm.reduce_scatter(grads) / comm.world
