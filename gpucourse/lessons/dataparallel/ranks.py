"""One rank's process: joins the process group, runs each data-parallel variant of ``kernels`` on its share of a
batch, checks the result against one process on the whole batch, and writes what it counted as JSON.

Started by ``experiments.run_ranks`` (never imported by the package's ``__init__``), one process per rank:

    python -c "import sys; from gpucourse.lessons.dataparallel import ranks; sys.exit(ranks.main(sys.argv[1:]))" \
        --rank 0 --world 2 --backend gloo --out DIR

with MASTER_ADDR/MASTER_PORT in the environment. ``--backend nccl`` needs one GPU per rank (NVIDIA/nccl#418).
"""

from __future__ import annotations

import argparse
import builtins
import contextlib
import datetime
import json
import marshal
import statistics
import sys
import time
import types
from pathlib import Path

import torch
import torch.distributed as dist

from gpucourse.errors import CourseError, InvalidConfig
from gpucourse.lessons.dataparallel import kernels

VARIANTS = ("per_parameter", "flat", "overlap", "bucketed", "zero", "fsdp")
BACKENDS = ("gloo", "nccl")
MAX_WORLD = 64
LR = 0.1
ROWS_PER_RANK = 8


# What a lab 10 Reducer may not call, in its rank's process (targets of gpucourse.tooling.grading.tripwire, which
# a grader's start program passes to ``main`` as ``guard``): PyTorch's bucketing and DDP, every torch.distributed
# collective and the process group's own, and the lesson's reference code. Only the grader's communicator reaches
# torch.distributed for the learner: the start program makes WatchedComm.all_reduce the tripwire's boundary.
_COLLECTIVES = ("all_reduce", "all_gather", "all_gather_into_tensor", "reduce_scatter", "reduce_scatter_tensor",
                "broadcast", "reduce", "all_to_all", "all_to_all_single", "send", "recv", "isend", "irecv",
                "batch_isend_irecv", "gather", "scatter", "all_gather_object", "broadcast_object_list",
                "scatter_object_list", "gather_object", "all_reduce_coalesced", "all_gather_coalesced")
_GROUP_METHODS = ("allreduce", "allreduce_coalesced", "allgather", "_allgather_base", "all_gather_single",
                  "allgather_into_tensor_coalesced", "reduce_scatter", "_reduce_scatter_base",
                  "reduce_scatter_single", "reduce_scatter_tensor_coalesced", "broadcast", "reduce", "alltoall",
                  "alltoall_base", "all_to_all_single", "send", "recv", "gather", "scatter")
GUARD_TARGETS = {
    "torch.distributed:_compute_bucket_assignment_by_size": "PyTorch's own bucketing: write the rule yourself",
    "torch.nn.parallel.distributed:DistributedDataParallel": "PyTorch's DDP reduces the gradients itself",
    **{f"torch.distributed:{name}": "torch.distributed directly: use only comm.all_reduce"
       for name in _COLLECTIVES if hasattr(dist, name)},
    **{f"torch._C._distributed_c10d:ProcessGroup.{name}": "the process group directly: use only comm.all_reduce"
       for name in _GROUP_METHODS if hasattr(dist.ProcessGroup, name)},
    **{f"gpucourse.lessons.dataparallel.kernels:{name}": "the lesson's own code: write the Reducer yourself"
       for name in ("BucketedReducer", "assign_buckets", "reduce_flat", "reduce_per_parameter", "zero_step",
                    "fsdp_step")},
}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, not argparse's usage and exit
        raise InvalidConfig(f"data-parallel ranks: {message}")


def parser() -> argparse.ArgumentParser:
    p = _Parser(prog="ranks", description="one data-parallel rank (lesson 10)")
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--world", type=int, default=2)
    p.add_argument("--backend", default="gloo")
    p.add_argument("--variants", default=",".join(VARIANTS))
    p.add_argument("--cap-bytes", type=int, default=24 * 1024)
    p.add_argument("--first-bucket-bytes", type=int, default=1024)
    p.add_argument("--time-steps", type=int, default=0)
    p.add_argument("--timeout-s", type=float, default=120.0)
    p.add_argument("--out", default="")
    p.add_argument("--reducer-file", default="", help="a file defining class Reducer (lab 10): variant 'learner'")
    p.add_argument("--batch-seed", type=int, default=1, help="the learner variant's batch (a grader picks it)")
    return p


def parse(argv: list[str], cuda_devices: int | None = None) -> argparse.Namespace:
    """The arguments, checked: a bad one is one ``InvalidConfig`` line (before any process group starts)."""
    args = parser().parse_args(argv)
    if args.backend not in BACKENDS:
        raise InvalidConfig(f"--backend: one of {', '.join(BACKENDS)}, not {args.backend!r}")
    if not 2 <= args.world <= MAX_WORLD:
        raise InvalidConfig(f"--world: from 2 to {MAX_WORLD} ranks, not {args.world}")
    if not 0 <= args.rank < args.world:
        raise InvalidConfig(f"--rank: from 0 to {args.world - 1}, not {args.rank}")
    variants = [v for v in args.variants.split(",") if v]
    unknown = [v for v in variants if v not in VARIANTS and not (v == "learner" and args.reducer_file)]
    if unknown or not variants:
        raise InvalidConfig(f"--variants: a comma-separated choice of {', '.join(VARIANTS)}, not {args.variants!r}")
    args.variants = variants
    if args.cap_bytes < 0 or args.first_bucket_bytes < 0:
        raise InvalidConfig("--cap-bytes and --first-bucket-bytes: 0 or more bytes")
    if args.time_steps < 0 or args.timeout_s <= 0:
        raise InvalidConfig("--time-steps: 0 or more; --timeout-s: more than 0")
    if args.backend == "nccl":
        devices = torch.cuda.device_count() if cuda_devices is None else cuda_devices
        if devices < args.world:
            raise InvalidConfig(f"--backend nccl needs one GPU per rank (NCCL refuses two ranks on one GPU, "
                                f"NVIDIA/nccl#418): {args.world} ranks, {devices} GPU(s) here; use --backend gloo")
    return args


def batch(world: int, device: torch.device, seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """The whole batch, the same on every rank (seeded); rank r takes rows r·8 … r·8+7."""
    g = torch.Generator().manual_seed(seed)
    rows = ROWS_PER_RANK * world
    x = torch.randn(rows, kernels.WIDTHS[0], generator=g)
    y = torch.randn(rows, kernels.WIDTHS[-1], generator=g)
    return x.to(device), y.to(device)


def reference(device: torch.device, world: int, seed: int = 1) -> tuple[list[torch.Tensor], torch.Tensor]:
    """One process, the whole batch: the gradients, and the flat parameters after one SGD step."""
    model = kernels.small_model().to(device)
    x, y = batch(world, device, seed)
    kernels.loss_on(model, x, y).backward()
    grads = [p.grad.detach().clone() for p in model.parameters()]
    return grads, kernels.flat_params(model) - LR * torch.cat([g.reshape(-1) for g in grads])


def _differs(a: list[torch.Tensor], b: list[torch.Tensor]) -> float:
    return max(float((x - y).abs().max()) for x, y in zip(a, b))


def rebuild(payload: bytes) -> dict:
    """The functions and classes of ``experiments.code_payload``, with ``torch`` and each other in scope."""
    namespace = {"torch": torch, "nn": torch.nn, "__builtins__": builtins, "__name__": "learner"}
    for kind, name, code in marshal.loads(payload):
        def function(parts, label):
            fn = types.FunctionType(parts[0], namespace, label, parts[1])
            fn.__kwdefaults__ = parts[2]
            return fn
        if kind == "class":
            namespace[name] = type(name, (), {k: function(v, k) for k, v in code.items()})
        else:
            namespace[name] = function(code, name)
    return namespace


def learner_reducer(path: str):
    """The class ``Reducer`` a lab's learner wrote, rebuilt from its code in ``path``."""
    try:
        namespace = rebuild(Path(path).read_bytes())
    except Exception as exc:  # the learner's code, said in one line
        raise CourseError(f"your Reducer's code could not be rebuilt: {type(exc).__name__}: {exc}") from None
    if not isinstance(namespace.get("Reducer"), type):
        raise CourseError("your code defines no class named Reducer")
    return namespace["Reducer"]


class WatchedComm(kernels.Comm):
    """The grader's communicator for a learner's Reducer: a ``Comm`` that also notes, for each all-reduce, a copy
    of the payload it was given, the tensor itself and how many parameters' gradients backward had produced
    when it started (``ready``, filled by the grader's own hooks, registered before the learner's)."""

    def __init__(self, world: int, rank: int):
        super().__init__(world, rank)
        self.ready: list[int] = []
        self.seen: list[tuple[torch.Tensor, torch.Tensor, int]] = []

    def all_reduce(self, tensor: torch.Tensor, async_op: bool = False):
        self.seen.append((tensor.detach().clone(), tensor, len(self.ready)))
        return super().all_reduce(tensor, async_op=async_op)


def evidence(comm: WatchedComm, model, local: list[torch.Tensor], buckets: list[list[int]]) -> dict:
    """What a learner's all-reduces carried, against the real gradients: ``payload_buckets``, the bucket whose
    local gradients (this rank's, before any reduction, computed apart) each payload equals (None: no bucket's);
    ``first_bucket_missing``, how many gradients of later buckets backward had not produced yet when bucket 0's
    all-reduce started (None: no all-reduce carried bucket 0); ``grads_are_views``, every gradient ends in the
    storage of the very tensor its bucket's all-reduce was given (buckets as views of one flat buffer)."""
    wanted = [torch.cat([local[i].reshape(-1) for i in members]) for members in buckets]
    payload_buckets = []
    for payload, _, _ in comm.seen:
        same = [b for b, w in enumerate(wanted) if w.shape == payload.shape and w.dtype == payload.dtype
                and torch.allclose(w, payload.to(w.device), rtol=0.0, atol=1e-6)]
        payload_buckets.append(same[0] if same else None)
    first_missing = None
    if 0 in payload_buckets:
        first_missing = len(local) - comm.seen[payload_buckets.index(0)][2]  # bucket 0's own are all there
    params = list(model.parameters())
    storage = {b: comm.seen[k][1].untyped_storage().data_ptr() for k, b in enumerate(payload_buckets) if b is not None}
    views = bool(params) and all(
        params[i].grad is not None and storage.get(b) == params[i].grad.untyped_storage().data_ptr()
        for b, members in enumerate(buckets) for i in members)
    return {"payload_buckets": payload_buckets, "first_bucket_missing": first_missing, "grads_are_views": views}


def run_learner(args, device: torch.device, guard) -> dict:
    """A learner's Reducer on this rank, on a batch the grader picked (``--batch-seed``), armed with ``guard``
    (``tripwire.armed``, or nothing), and the evidence against the real gradients (``evidence``)."""
    comm = WatchedComm(args.world, args.rank)
    model = kernels.small_model().to(device)
    x, y = batch(args.world, device, args.batch_seed)
    rows = slice(args.rank * ROWS_PER_RANK, (args.rank + 1) * ROWS_PER_RANK)
    x, y = x[rows], y[rows]
    aside = kernels.small_model().to(device)  # this rank's own gradients, before any reduction, computed apart
    kernels.loss_on(aside, x, y).backward()
    local = [p.grad.detach().clone() for p in aside.parameters()]
    params = list(model.parameters())
    handles = [p.register_post_accumulate_grad_hook(lambda _p: comm.ready.append(1)) for p in params]
    sizes = [p.numel() * p.element_size() for p in params]
    buckets = kernels.assign_buckets(sizes, args.cap_bytes, args.first_bucket_bytes)
    Reducer = learner_reducer(args.reducer_file)
    with (guard(GUARD_TARGETS) if guard else contextlib.nullcontext()) as trips:
        reducer = Reducer(model, comm, args.cap_bytes, args.first_bucket_bytes)
        kernels.loss_on(model, x, y).backward()
        during = len(comm.seen)
        reducer.finish()
    for handle in handles:
        handle.remove()
    ref_grads, _ = reference(device, args.world, args.batch_seed)
    diff = _differs([p.grad if p.grad is not None else torch.full_like(p, float("nan")) for p in params], ref_grads)
    return {"variant": "learner", "compared": "gradients", "max_abs_diff": diff, "equal": diff <= 1e-6,
            "calls": comm.calls, "nbytes": comm.nbytes, "sizes": comm.sizes, "calls_during_backward": during,
            "buckets": buckets, "grads": [g for p in params for g in p.grad.reshape(-1).tolist()],
            "batch_seed": args.batch_seed, "guarded": bool(guard),
            "tripped": list(trips.calls) if trips is not None else [], **evidence(comm, model, local, buckets)}


def run_variant(name: str, args, device: torch.device, guard=None) -> dict:
    if name == "learner":
        return run_learner(args, device, guard)
    comm = kernels.Comm(args.world, args.rank)
    model = kernels.small_model().to(device)
    x, y = batch(args.world, device)
    rows = slice(args.rank * ROWS_PER_RANK, (args.rank + 1) * ROWS_PER_RANK)
    x, y = x[rows], y[rows]
    result: dict = {}
    if name in ("overlap", "bucketed"):
        reducer = kernels.BucketedReducer(model, comm, 0 if name == "overlap" else args.cap_bytes,
                                          None if name == "overlap" else args.first_bucket_bytes)
        kernels.loss_on(model, x, y).backward()
        result["calls_during_backward"] = sum(comm.calls.values())  # launched from hooks, before finish()
        reducer.finish()
        result.update(buckets=reducer.buckets, launch_order=reducer.launch_order, ready_order=reducer.ready_order)
    elif name in ("per_parameter", "flat"):
        kernels.loss_on(model, x, y).backward()
        (kernels.reduce_per_parameter if name == "per_parameter" else kernels.reduce_flat)(model, comm)
    elif name == "zero":
        kernels.loss_on(model, x, y).backward()
        kernels.zero_step(model, comm, LR)
    else:  # fsdp
        n = sum(p.numel() for p in model.parameters())
        shard = kernels.padded(kernels.flat_params(model), args.world).chunk(args.world)[args.rank].clone()
        shard = kernels.fsdp_step(model, shard, x, y, comm, LR)
        kernels.load_flat(model, comm.all_gather(shard)[:n])  # gathered once more only to compare with one process
        comm.calls["all_gather"] -= 1
        comm.nbytes["all_gather"] -= comm.sizes.pop()[1]
    ref_grads, ref_params = reference(device, args.world)
    if name in ("zero", "fsdp"):
        diff = float((kernels.flat_params(model) - ref_params).abs().max())
        compared = "parameters after one SGD step"
    else:
        diff = _differs([p.grad for p in model.parameters()], ref_grads)
        compared = "gradients"
    result.update(variant=name, compared=compared, max_abs_diff=diff, equal=diff <= 1e-6,
                  calls=comm.calls, nbytes=comm.nbytes, sizes=comm.sizes)
    if args.time_steps:
        result["step_ms"] = time_variant(name, args, device)
    return result


def time_variant(name: str, args, device: torch.device) -> float:
    """Median wall time of ``--time-steps`` steps of forward + backward + reduction (on a GPU synchronised
    per step). On gloo it is CPU and loopback time: the lesson never shows it as a GPU's."""
    comm = kernels.Comm(args.world, args.rank)
    model = kernels.small_model().to(device)
    x, y = batch(args.world, device)
    reducer = None
    if name in ("overlap", "bucketed"):
        reducer = kernels.BucketedReducer(model, comm, 0 if name == "overlap" else args.cap_bytes,
                                          None if name == "overlap" else args.first_bucket_bytes)
    samples = []
    for _ in range(args.time_steps + 2):
        dist.barrier()
        start = time.perf_counter()
        model.zero_grad()
        kernels.loss_on(model, x, y).backward()
        if reducer:
            reducer.finish()
        elif name == "per_parameter":
            kernels.reduce_per_parameter(model, comm)
        elif name in ("flat", "zero", "fsdp"):
            kernels.reduce_flat(model, comm)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        samples.append((time.perf_counter() - start) * 1e3)
    return statistics.median(samples[2:])


def run(args, guard=None) -> dict:
    device = torch.device(f"cuda:{args.rank}" if args.backend == "nccl" else "cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group(args.backend, rank=args.rank, world_size=args.world,
                            timeout=datetime.timedelta(seconds=args.timeout_s))
    try:
        results = {}
        for name in args.variants:
            try:
                results[name] = run_variant(name, args, device, guard)
            except CourseError:
                raise
            except Exception as exc:  # the learner's Reducer failing inside backward, in one line
                if name != "learner":
                    raise
                raise CourseError(f"your Reducer failed: {type(exc).__name__}: {exc}") from None
    finally:
        dist.destroy_process_group()
    return {"rank": args.rank, "world": args.world, "backend": args.backend, "torch": torch.__version__,
            "results": results}


def main(argv: list[str] | None = None, guard=None) -> int:
    """One rank. ``guard``: a grader's ``tripwire.armed``, armed around a learner's Reducer with GUARD_TARGETS."""
    try:
        args = parse(sys.argv[1:] if argv is None else argv)
        result = run(args, guard)
    except CourseError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    text = json.dumps(result)
    if args.out:
        Path(args.out, f"rank{args.rank}.json").write_text(text, encoding="utf-8")
    else:
        print(text)
    return 0
