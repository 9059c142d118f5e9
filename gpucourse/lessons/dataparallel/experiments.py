"""Lesson 10's runs: data-parallel ranks as real processes (torch.distributed: gloo on the CPU, NCCL with one GPU
per rank), and, on one GPU, the overlap of a backward pass with bucket copies on a second CUDA stream.

    experiments.run_ranks()                      # 2 gloo processes on this machine: counts and checks, no timing
    experiments.run_ranks(backend="nccl", world=8, time_steps=20)   # an instructor's node (tools/ddp_ranks.py)
    experiments.stream_overlap()                 # one GPU: measured; without one, a one-line CourseError

Ranks are started as subprocesses of an importable module (``ranks``) by ``measure.ranklaunch`` (not
``mp.spawn``, which from a notebook re-imports ``__main__``: pytorch/pytorch#20375): a free port on
127.0.0.1, a hard time limit, and a failure said in one line.
"""

from __future__ import annotations

import json
import marshal
import secrets
import sys
import tempfile
import types
from pathlib import Path

import pandas as pd

from gpucourse import validate
from gpucourse.errors import CourseError, InvalidConfig, NoGPU
from gpucourse.lessons.dataparallel import kernels, model
from gpucourse.measure import ranklaunch, runtime

RANK_MODULE = "gpucourse.lessons.dataparallel.ranks"
# Both starts are lean (ranklaunch.lean_start): a rank imports ranks, kernels and torch, not the lesson's charts.
START = ranklaunch.lean_start(f"import sys; from {RANK_MODULE.rsplit('.', 1)[0]} import ranks; "
                              "sys.exit(ranks.main(sys.argv[1:]))")
# A grader's start: each rank arms gpucourse.tooling.grading.tripwire around the learner's Reducer (ranks.main's
# guard), the grader's communicator its boundary (what it calls for the learner is not the learner's call). Only a
# string here (lessons sit below tooling); lab 10 passes it to run_ranks.
GUARDED_START = ranklaunch.lean_start("import sys; from gpucourse.tooling.grading import tripwire; "
                                      f"from {RANK_MODULE.rsplit('.', 1)[0]} import ranks; "
                                      "tripwire.boundary(ranks.WatchedComm.all_reduce); "
                                      "sys.exit(ranks.main(sys.argv[1:], guard=tripwire.armed))")
TIMEOUT_S = 120.0


def rank_args(rank: int, world: int, backend: str, variants, cap_bytes: int, first_bucket_bytes: int,
              time_steps: int, timeout_s: float, out: str = "", reducer_file: str = "",
              batch_seed: int = 1) -> list[str]:
    args = ["--rank", str(rank), "--world", str(world), "--backend", backend, "--variants", ",".join(variants),
            "--cap-bytes", str(cap_bytes), "--first-bucket-bytes", str(first_bucket_bytes),
            "--time-steps", str(time_steps), "--timeout-s", str(timeout_s), "--batch-seed", str(batch_seed)]
    return args + (["--out", out] if out else []) + (["--reducer-file", reducer_file] if reducer_file else [])


def run_ranks(variants=None, *, world: int = 2, backend: str = "gloo", cap_bytes: int = 24 * 1024,
              first_bucket_bytes: int = 1024, time_steps: int = 0, timeout_s: float = TIMEOUT_S,
              reducer: tuple = (), start: str | None = None) -> dict:
    """Start ``world`` rank processes, wait at most ``timeout_s``, and return rank 0's results (and every
    rank's under "ranks"). A rank that fails or a run past the limit is one ``CourseError`` line.
    ``reducer``: a notebook's functions and its class ``Reducer`` (lab 10), run as the variant "learner" on a
    batch drawn afresh for the run (so no rank can compute another's gradients); ``start``: the rank's
    program (default ``START``; ``GUARDED_START``: armed with the grader's tripwires)."""
    from gpucourse.lessons.dataparallel import ranks  # the rank's own checks, before any process starts

    variants = list(ranks.VARIANTS if variants is None else ([variants] if isinstance(variants, str) else variants))
    timeout_s = validate.number("timeout_s", timeout_s, minimum=1.0, maximum=3600.0)
    payload = code_payload(*reducer) if reducer else b""
    start = START if start is None else start
    batch_seed = secrets.randbelow(1 << 30) + 2 if reducer else 1
    with tempfile.TemporaryDirectory(prefix="ddp-ranks-") as out:
        reducer_file = ""
        if payload:
            reducer_file = str(Path(out, "reducer.marshal"))
            Path(reducer_file).write_bytes(payload)
            variants = [*variants, "learner"] if "learner" not in variants else variants
        ranks.parse(rank_args(0, world, backend, variants, cap_bytes, first_bucket_bytes, time_steps, timeout_s,
                              reducer_file=reducer_file, batch_seed=batch_seed))
        ranklaunch.run([[sys.executable, "-c", start, *rank_args(r, world, backend, variants, cap_bytes,
                                                                 first_bucket_bytes, time_steps, timeout_s, out,
                                                                 reducer_file, batch_seed)] for r in range(world)],
                       timeout_s=timeout_s, what=f"{world} {backend} ranks",
                       rank_envs=[{"WORLD_SIZE": str(world), "RANK": str(r)} for r in range(world)],
                       preload=ranklaunch.preload_for(backend))
        found = [json.loads(Path(out, f"rank{r}.json").read_text(encoding="utf-8")) for r in range(world)]
    return {**found[0], "ranks": found}


def _code(fn) -> tuple:
    if not isinstance(fn, types.FunctionType) or fn.__closure__:
        raise InvalidConfig(f"{getattr(fn, '__name__', fn)!r}: a plain function or method of the notebook, "
                            "no closure")
    return fn.__code__, fn.__defaults__, fn.__kwdefaults__


def code_payload(*objects) -> bytes:
    """A notebook's functions and classes (their methods), as marshalled code for the rank processes: they
    rebuild them (``ranks.rebuild``) with only ``torch`` and each other in scope. Code, not source: a grader's
    kernel need not keep a cell's text for ``inspect.getsource``."""
    items = []
    for obj in objects:
        if isinstance(obj, type):
            items.append(("class", obj.__name__, {k: _code(v) for k, v in vars(obj).items()
                                                  if isinstance(v, types.FunctionType)}))
        elif isinstance(obj, types.FunctionType):
            items.append(("function", obj.__name__, _code(obj)))
        else:
            raise InvalidConfig(f"{obj!r}: pass the notebook's functions and classes themselves")
    try:
        return marshal.dumps(items)
    except ValueError as exc:
        raise InvalidConfig(f"a default value that cannot travel to the processes: {exc}") from None


def code_names(*objects) -> set[str]:
    """Every global and attribute name the code of these functions and classes reads (nested code included)."""
    names: set[str] = set()
    for kind, _, code in marshal.loads(code_payload(*objects)):
        codes = [c[0] for c in (code.values() if kind == "class" else [code])]
        while codes:
            one = codes.pop()
            names |= set(one.co_names)
            codes += [c for c in one.co_consts if isinstance(c, types.CodeType)]
    return names


def ranks_reference(world: int = 2, batch_seed: int = 1) -> tuple[list[float], list[float]]:
    """What the ranks compare with, computed here: one process on the whole batch, its gradients (flat) and
    its parameters after one SGD step."""
    import torch

    from gpucourse.lessons.dataparallel import ranks

    grads, params = ranks.reference(torch.device("cpu"), world, batch_seed)
    return [g for t in grads for g in t.reshape(-1).tolist()], params.tolist()


def counts_table(result: dict) -> pd.DataFrame:
    """Per variant, on rank 0: collectives called, bytes given to them, the check against one process."""
    rows = []
    for name, r in result["results"].items():
        rows.append({"variant": name, "collective calls": sum(r["calls"].values()),
                     "calls by op": ", ".join(f"{op} ×{n}" for op, n in r["calls"].items()),
                     "bytes": sum(r["nbytes"].values()), "compared with one process": r["compared"],
                     "max |difference|": r["max_abs_diff"], "equal": r["equal"]})
    return pd.DataFrame(rows)


def bucket_table(result: dict, variant: str = "bucketed") -> pd.DataFrame:
    """The buckets of a hooked variant: parameters (names of the small model), bytes, the order launched."""
    r = result["results"][variant]
    names = [name for name, _ in kernels.small_model().named_parameters()]
    sizes = [size for op, size in r["sizes"] if op == "all_reduce"]
    return pd.DataFrame([{"bucket": b, "parameters": ", ".join(names[i] for i in r["buckets"][b]),
                          "launched": r["launch_order"].index(b), "bytes": sizes[r["launch_order"].index(b)]}
                         for b in range(len(r["buckets"]))])


def main(argv: list[str] | None = None) -> int:
    """An instructor's run (tools/ddp_ranks.py): ``--backend nccl --world 8 --time-steps 20``."""
    from gpucourse.lessons.dataparallel import ranks

    try:
        argv = sys.argv[1:] if argv is None else argv
        parsed = ranks.parse(["--rank", "0", *argv])
        result = run_ranks(parsed.variants, world=parsed.world, backend=parsed.backend, cap_bytes=parsed.cap_bytes,
                           first_bucket_bytes=parsed.first_bucket_bytes, time_steps=parsed.time_steps,
                           timeout_s=parsed.timeout_s)
    except CourseError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    table = counts_table(result)
    if parsed.time_steps:
        table["median step ms (rank 0)"] = [r.get("step_ms") for r in result["results"].values()]
    print(f"{parsed.world} ranks, {parsed.backend}, torch {result['torch']}")
    print(table.to_string(index=False))
    return 0 if table.equal.all() else 1


# --- one GPU: overlap with CUDA streams ------------------------------------------------------------------

ONE_GPU = ("needs a GPU: without one, the overlap is the timeline model's (dataparallel.model.ddp_schedule), "
           "drawn above; on a GPU this measures a backward pass with bucket copies on a side stream")


def stream_overlap(widths: tuple[int, ...] = (4096,) * 9, rows: int = 1024, samples: int = 10) -> pd.DataFrame:
    """On one GPU: backward of an MLP, each layer's gradient copied to pinned host memory (the stand-in for a
    link, ~50 GB/s) either after backward on the compute stream, or from a hook on a second stream while
    backward goes on. Median ms over ``samples`` steps (CUDA events), and backward alone."""
    if not runtime.is_gpu():
        raise NoGPU(ONE_GPU)
    import torch

    device = torch.device("cuda")
    net = kernels.small_model(widths).to(device)
    x = torch.randn(rows, widths[0], device=device)
    y = torch.randn(rows, widths[-1], device=device)
    params = list(net.parameters())
    host = [torch.empty(p.shape, dtype=p.dtype, pin_memory=True) for p in params]
    side = torch.cuda.Stream()

    def on_side(index: int):
        def hook(p):
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                host[index].copy_(p.grad, non_blocking=True)
        return hook

    def step(mode: str) -> None:
        net.zero_grad(set_to_none=False)
        kernels.loss_on(net, x, y).backward()
        if mode == "copies after backward":
            for h, p in zip(host, params):
                h.copy_(p.grad, non_blocking=True)
        torch.cuda.current_stream().wait_stream(side)

    rows_out = []
    for mode in ("backward alone", "copies after backward", "copies overlapped (side stream)"):
        handles = [p.register_post_accumulate_grad_hook(on_side(i)) for i, p in enumerate(params)] \
            if mode.startswith("copies overlapped") else []
        times = []
        for i in range(samples + 3):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            step(mode)
            end.record()
            end.synchronize()
            if i >= 3:
                times.append(start.elapsed_time(end))
        for h in handles:
            h.remove()
        rows_out.append({"mode": mode, "median_ms": float(pd.Series(times).median()), "samples": samples,
                         "gradient_bytes": sum(p.numel() * p.element_size() for p in params)})
    return pd.DataFrame(rows_out)


def predicted_overlap(widths: tuple[int, ...] = (4096,) * 9, rows: int = 1024, gpu: str = "NVIDIA H200",
                      link_bytes_per_s: float = 50e9) -> dict:
    """The timeline model's prediction for ``stream_overlap``'s setup (fp32, one bucket per layer, no latency)."""
    layers = model.mlp_layers(widths, rows)
    tl = model.ddp_schedule(layers, lambda n: n / link_bytes_per_s, cap_bytes=0, first_bucket_bytes=None,
                            bytes_per_param=4, layer_s=lambda f: model.compute_s(f, gpu, "fp32"))
    return model.summary(tl)
