"""Real collectives between processes: gloo on this computer (lesson 09 part 3), NCCL on ≥ 2 GPUs (recording).

Started as separate processes (this module, imported lean: ``RANK_START``) by ``launch`` through
``gpucourse.measure.ranklaunch`` (a free port on 127.0.0.1, at most ``timeout_s``, a failure said in one line).

Tasks (what rank 0 writes as JSON):

* ``check``: ``ring_all_reduce`` (below: the code learners read, over ``isend``/``recv``) against
  ``dist.all_reduce`` on the same random tensors;
* ``pingpong``: rank 0 ↔ rank 1 send/recv round trips, ``iters`` rounds over all sizes (half the fastest round
  trip = one message), to fit α, β;
* ``sweep``: ``all_reduce`` and ``all_gather`` (and ``reduce_scatter`` on NCCL) timed at each size, in nccl-tests'
  columns. On gloo, reduce-scatter is **not timed**: gloo emulates it with an all-reduce ("This is still 2x
  communication than a real reduce-scatter", pytorch/pytorch#118911), so its time would teach the wrong thing.

The instructor's recording (≥ 2 GPUs): ``python -m gpucourse.lessons.collectives.distworker record --backend nccl
--ranks 8 --out data/reference/<gpu>/collectives.json``: the sweep with its provenance (torch, NCCL, GPUs, date,
command). Standard library (and ``measure.ranklaunch``) only at import; torch is imported in the rank processes.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import platform
import sys
import tempfile
import time
from pathlib import Path

from gpucourse.measure import ranklaunch

SCHEMA = "gpucourse-collectives/1"
TASKS = ("check", "pingpong", "sweep")
BACKENDS = ("gloo", "nccl")
LaunchError = ranklaunch.LaunchError  # what ``launch`` raises, in one line
GLOO_REDUCE_SCATTER_NOTE = ("not timed on gloo: gloo's reduce-scatter is an all-reduce plus a slice, 2× the traffic of "
                            "a real one (pytorch/pytorch#118911); count its bytes on the microscope instead")


def ring_all_reduce(tensor, dist):
    """Sum ``tensor`` over all ranks in place: a ring reduce-scatter, then a ring all-gather (2(p−1) steps).

    Step s of the reduce-scatter: send chunk (r − s − 1) mod p to the right, receive chunk (r − s − 2) mod p from
    the left and add it in. Each send is ``isend`` (non-blocking) so that the ring cannot deadlock."""
    p, r = dist.get_world_size(), dist.get_rank()
    if p == 1:
        return tensor
    chunks = list(tensor.chunk(p))
    right, left = (r + 1) % p, (r - 1) % p
    incoming = [c.clone() for c in chunks]
    for s in range(p - 1):  # reduce-scatter
        send_i, recv_i = (r - s - 1) % p, (r - s - 2) % p
        request = dist.isend(chunks[send_i].contiguous(), right)
        dist.recv(incoming[recv_i], left)
        request.wait()
        chunks[recv_i] += incoming[recv_i]
    for s in range(p - 1):  # all-gather: rank r now holds the sum of chunk r
        send_i, recv_i = (r - s) % p, (r - s - 1) % p
        request = dist.isend(chunks[send_i].contiguous(), right)
        dist.recv(incoming[recv_i], left)
        request.wait()
        chunks[recv_i].copy_(incoming[recv_i])
    return tensor


# --- inside a rank ----------------------------------------------------------------------------------------

def _timed(fn, sync, iters: int) -> float:
    fn()
    sync()
    start = time.perf_counter()
    for _ in range(iters):
        fn()
    sync()
    return (time.perf_counter() - start) / iters


def _rank_main(args) -> None:
    import torch
    import torch.distributed as dist

    device = "cpu"
    if args.backend == "nccl":
        torch.cuda.set_device(args.rank)
        device = f"cuda:{args.rank}"
    dist.init_process_group(args.backend, rank=args.rank, world_size=args.world,
                            timeout=_dt.timedelta(seconds=args.timeout))
    sync = torch.cuda.synchronize if args.backend == "nccl" else (lambda: None)
    sizes = [int(s) for s in args.sizes.split(",")]
    out: dict = {"task": args.task, "backend": args.backend, "ranks": args.world, "results": []}
    ring = ring_all_reduce
    if args.ring_file:
        namespace: dict = {}
        exec(compile(Path(args.ring_file).read_text(), args.ring_file, "exec"), namespace)
        ring = namespace["ring_all_reduce"]
    gen = torch.Generator().manual_seed(1234 + args.rank)
    if args.task == "check":
        for size in sizes:
            x = torch.randint(-100, 100, (max(size // 4, 1),), generator=gen).float().to(device)
            want = x.clone()
            dist.all_reduce(want)
            ring(x, dist)
            out["results"].append({"size_bytes": size, "equal": bool(torch.equal(x, want))})
    elif args.task == "pingpong":
        # Rounds over all sizes, not all rounds of one size then the next: a busy spell of the computer
        # (another process, a notebook kernel) then slows every size alike instead of only the sizes it hit,
        # which once made 4 MiB faster than 1 KiB and the fitted line's slope negative.
        bufs = [torch.zeros(max(size // 4, 1), device=device) for size in sizes]
        best = [float("inf")] * len(sizes)
        dist.barrier()
        for round_ in range(args.iters + 1):  # round 0 warms up
            for i, buf in enumerate(bufs):
                start = time.perf_counter()
                if args.rank == 0:
                    dist.send(buf, 1)
                    dist.recv(buf, 1)
                elif args.rank == 1:
                    dist.recv(buf, 0)
                    dist.send(buf, 0)
                sync()
                if round_:
                    best[i] = min(best[i], time.perf_counter() - start)
        out["results"] = [{"size_bytes": size, "time_s": t / 2} for size, t in zip(sizes, best)]
    else:
        for op in ("all_reduce", "all_gather", "reduce_scatter"):
            for size in sizes:
                count = max(size // 4 // args.world, 1) * args.world
                row = {"op": op, "size_bytes": count * 4, "count": count, "type": "float", "redop": "sum",
                       "iters": args.iters}
                if op == "reduce_scatter" and args.backend == "gloo":
                    out["results"].append({**row, "time_us": None, "note": GLOO_REDUCE_SCATTER_NOTE})
                    continue
                full = torch.ones(count, device=device)
                part = torch.ones(count // args.world, device=device)
                fn = {"all_reduce": lambda full=full: dist.all_reduce(full),
                      "all_gather": lambda full=full, part=part: dist.all_gather_into_tensor(full, part),
                      "reduce_scatter": lambda full=full, part=part: dist.reduce_scatter_tensor(part, full)}[op]
                dist.barrier()
                t = torch.tensor([_timed(fn, sync, args.iters)], device=device)
                dist.all_reduce(t, op=dist.ReduceOp.MAX)  # the slowest rank's time
                factor = {"all_reduce": 2, "all_gather": 1, "reduce_scatter": 1}[op] * (args.world - 1) / args.world
                algbw = row["size_bytes"] / float(t)
                out["results"].append({**row, "time_us": float(t) * 1e6, "algbw_gbps": algbw / 1e9,
                                       "busbw_gbps": algbw * factor / 1e9})
    if args.rank == 0:
        Path(args.out).write_text(json.dumps(out, indent=1))
    dist.barrier()
    dist.destroy_process_group()


# --- the launcher ----------------------------------------------------------------------------------------

# a rank imports this module and torch, not the lesson's charts (``python -m`` would run the packages' __init__)
RANK_START = ranklaunch.lean_start("import sys; from gpucourse.lessons.collectives import distworker; "
                                   "sys.exit(distworker.main(sys.argv[1:]))")


def launch(task: str, ranks: int = 2, sizes=(4096,), *, backend: str = "gloo", timeout_s: float = 60.0,
           iters: int = 5, ring_file: str | None = None) -> dict:
    """Run ``task`` on ``ranks`` processes and return rank 0's JSON; a rank that fails or a run longer than
    ``timeout_s`` kills them all and raises one line."""
    if task not in TASKS:
        raise ValueError(f"task must be one of {', '.join(TASKS)}; got {task!r}")
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(BACKENDS)}; got {backend!r}")
    if isinstance(ranks, bool) or not isinstance(ranks, int) or not 2 <= ranks <= 64:
        raise ValueError(f"ranks must be an integer 2 … 64, got {ranks!r}")
    sizes = [int(s) for s in sizes]
    if not sizes or min(sizes) < 4:
        raise ValueError("sizes must be a non-empty list of byte counts ≥ 4")
    if task == "pingpong" and ranks != 2:
        raise ValueError("pingpong times messages between two ranks: ranks must be 2")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "rank0.json"
        cmd = [sys.executable, "-c", RANK_START, "rank", "--world", str(ranks),
               "--task", task, "--backend", backend, "--sizes", ",".join(map(str, sizes)), "--out", str(out),
               "--iters", str(iters), "--timeout", str(max(int(timeout_s), 5))]
        if ring_file:
            cmd += ["--ring-file", str(ring_file)]
        ranklaunch.run([[*cmd, "--rank", str(r)] for r in range(ranks)], timeout_s=timeout_s,
                       what=f"{task} on {ranks} {backend} ranks",
                       preload=ranklaunch.preload_for(backend))
        return json.loads(out.read_text())


def provenance(backend: str, ranks: int, command: str) -> dict:
    import torch

    info = {"date_utc": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
            "command": command, "backend": backend, "ranks": ranks, "torch": torch.__version__,
            "python": platform.python_version(), "platform": platform.platform()}
    if backend == "nccl":
        info["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
        info["gpus"] = [torch.cuda.get_device_name(i) for i in range(ranks)]
        info["cuda"] = torch.version.cuda
    else:
        info["gpus"] = []
    return info


def record(backend: str, ranks: int, sizes, out: str, *, iters: int = 20, timeout_s: float = 600.0,
           command: str = "") -> dict:
    """The sweep on ``ranks`` ranks, written to ``out`` as JSON with its provenance (schema ``SCHEMA``)."""
    if backend == "nccl":
        import torch

        if torch.cuda.device_count() < ranks:
            raise LaunchError(f"recording with NCCL needs {ranks} GPUs (one per rank, NVIDIA/nccl#418); "
                              f"this machine has {torch.cuda.device_count()}")
    result = launch("sweep", ranks, sizes, backend=backend, timeout_s=timeout_s, iters=iters)
    doc = {"schema": SCHEMA, "provenance": provenance(backend, ranks, command), "results": result["results"]}
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text(json.dumps(doc, indent=1))
    return doc


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gpucourse.lessons.collectives.distworker")
    sub = parser.add_subparsers(dest="command", required=True)
    rank = sub.add_parser("rank", help="one rank (started by launch)")
    rank.add_argument("--rank", type=int, required=True)
    rank.add_argument("--world", type=int, required=True)
    rank.add_argument("--task", choices=TASKS, required=True)
    rank.add_argument("--backend", choices=BACKENDS, default="gloo")
    rank.add_argument("--sizes", required=True)
    rank.add_argument("--out", required=True)
    rank.add_argument("--iters", type=int, default=5)
    rank.add_argument("--timeout", type=int, default=60)
    rank.add_argument("--ring-file")
    rec = sub.add_parser("record", help="the instructor's recording: a sweep written as JSON with provenance")
    rec.add_argument("--backend", choices=BACKENDS, default="nccl")
    rec.add_argument("--ranks", type=int, default=8)
    rec.add_argument("--min-bytes", type=int, default=1024)
    rec.add_argument("--max-bytes", type=int, default=1 << 30)
    rec.add_argument("--iters", type=int, default=20)
    rec.add_argument("--timeout", type=float, default=600.0)
    rec.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    if args.command == "rank":
        _rank_main(args)
        return 0
    if not 2 <= args.ranks <= 64:
        parser.error(f"--ranks must be 2 … 64, got {args.ranks}")
    if not 4 <= args.min_bytes <= args.max_bytes:
        parser.error("--min-bytes must be ≥ 4 and ≤ --max-bytes")
    sizes, size = [], args.min_bytes
    while size <= args.max_bytes:
        sizes.append(size)
        size *= 2
    try:
        record(args.backend, args.ranks, sizes, args.out, iters=args.iters, timeout_s=args.timeout,
               command=" ".join(["python -m gpucourse.lessons.collectives.distworker", *(argv or sys.argv[1:])]))
    except (LaunchError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
