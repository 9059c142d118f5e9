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


def batch(world: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """The whole batch, the same on every rank (seeded); rank r takes rows r·8 … r·8+7."""
    g = torch.Generator().manual_seed(1)
    rows = ROWS_PER_RANK * world
    x = torch.randn(rows, kernels.WIDTHS[0], generator=g)
    y = torch.randn(rows, kernels.WIDTHS[-1], generator=g)
    return x.to(device), y.to(device)


def reference(device: torch.device, world: int) -> tuple[list[torch.Tensor], torch.Tensor]:
    """One process, the whole batch: the gradients, and the flat parameters after one SGD step."""
    model = kernels.small_model().to(device)
    x, y = batch(world, device)
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


def run_variant(name: str, args, device: torch.device) -> dict:
    comm = kernels.Comm(args.world, args.rank)
    model = kernels.small_model().to(device)
    x, y = batch(args.world, device)
    rows = slice(args.rank * ROWS_PER_RANK, (args.rank + 1) * ROWS_PER_RANK)
    x, y = x[rows], y[rows]
    result: dict = {}
    if name in ("overlap", "bucketed", "learner"):
        if name == "learner":
            reducer = learner_reducer(args.reducer_file)(model, comm, args.cap_bytes, args.first_bucket_bytes)
        else:
            reducer = kernels.BucketedReducer(model, comm, 0 if name == "overlap" else args.cap_bytes,
                                              None if name == "overlap" else args.first_bucket_bytes)
        kernels.loss_on(model, x, y).backward()
        result["calls_during_backward"] = sum(comm.calls.values())  # launched from hooks, before finish()
        reducer.finish()
        result.update(buckets=getattr(reducer, "buckets", None), launch_order=getattr(reducer, "launch_order", None),
                      ready_order=getattr(reducer, "ready_order", None))
        if name == "learner":
            result["grads"] = [g for p in model.parameters() for g in p.grad.reshape(-1).tolist()]
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


def run(args) -> dict:
    device = torch.device(f"cuda:{args.rank}" if args.backend == "nccl" else "cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group(args.backend, rank=args.rank, world_size=args.world,
                            timeout=datetime.timedelta(seconds=args.timeout_s))
    try:
        results = {}
        for name in args.variants:
            try:
                results[name] = run_variant(name, args, device)
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


def main(argv: list[str] | None = None) -> int:
    try:
        args = parse(sys.argv[1:] if argv is None else argv)
        result = run(args)
    except CourseError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    text = json.dumps(result)
    if args.out:
        Path(args.out, f"rank{args.rank}.json").write_text(text, encoding="utf-8")
    else:
        print(text)
    return 0
