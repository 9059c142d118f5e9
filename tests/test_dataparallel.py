"""Lesson 10 (dataparallel): bucket assignment, the timeline model's closed forms, ZeRO memory and traffic, the
rank processes' argument checks, and one run of 2 gloo processes whose every variant equals one process.

Each closed form is also held against a known-wrong schedule (tests below named *_wrong_*), so the checks
can fail."""

from __future__ import annotations

import pandas as pd
import pytest
import torch

from gpucourse.errors import CourseError, InvalidConfig, NoGPU
from gpucourse.lessons.dataparallel import experiments, kernels, model, ranks

LINEAR = 100e9  # bytes/s


def _layers(n=6, params=1000, flops=1e9):
    return [model.Layer(f"l{i}", params, flops) for i in range(n)]


def _ms(flops):  # 1 GFLOP → 1 ms
    return flops / 1e12


# --- buckets -----------------------------------------------------------------------------------------------


def test_buckets_walk_the_parameters_in_reverse_and_close_at_the_cap():
    assert kernels.assign_buckets([10, 10, 10, 10], 20) == [[3, 2], [1, 0]]
    assert kernels.assign_buckets([10, 10, 10, 10], 20, first_bucket_bytes=5) == [[3], [2, 1], [0]]
    assert kernels.assign_buckets([10, 10, 10], 0) == [[2], [1], [0]]  # cap 0: one per parameter
    assert kernels.assign_buckets([10, 10, 10], 10**9) == [[2, 1, 0]]  # one bucket
    sizes = [7, 300, 5, 40, 1, 999]
    for cap in (1, 50, 400, 5000):
        buckets = kernels.assign_buckets(sizes, cap, 8)
        assert sorted(i for b in buckets for i in b) == list(range(len(sizes)))
        assert [i for b in buckets for i in b] == list(reversed(range(len(sizes))))  # reverse order kept
        assert all(sum(sizes[i] for i in b) >= cap for b in buckets[1:-1])  # full but the last


# --- the timeline model ------------------------------------------------------------------------------------


def test_zero_latency_link_exposes_only_the_last_bucket():
    """α = 0 and a link faster than compute: every bucket but the last hides behind backward."""
    layers = _layers()
    comm = model.alpha_beta(0.0, LINEAR, ranks=2)
    for cap in (0, 2000, 4000):
        tl = model.ddp_schedule(layers, comm, cap_bytes=cap, first_bucket_bytes=None, layer_s=_ms)
        s = model.summary(tl)
        last = tl[tl.stream == "communication"].iloc[-1]
        assert s["exposed_comm_s"] == pytest.approx(last.end_s - last.start_s)
        assert s["compute_s"] == pytest.approx(18e-3)  # 6 × (1 ms forward + 2 ms backward)


def test_one_bucket_overlaps_nothing():
    layers = _layers()
    comm = model.alpha_beta(5e-6, LINEAR, ranks=4)
    s = model.summary(model.ddp_schedule(layers, comm, cap_bytes=10**12, first_bucket_bytes=None, layer_s=_ms))
    assert s["collectives"] == 1
    assert s["exposed_comm_s"] == pytest.approx(s["comm_s"]) and s["exposed_fraction"] == pytest.approx(1.0)
    assert s["comm_s"] == pytest.approx(comm(6 * 1000 * 2))


def test_more_latency_or_less_bandwidth_never_shortens_the_step():
    layers = model.transformer_layers(4, 256, 512, 1000)
    steps = [model.summary(model.ddp_schedule(layers, model.alpha_beta(a, LINEAR, 8), cap_bytes=1 << 16))["step_s"]
             for a in (0, 1e-6, 1e-5, 1e-4)]
    assert steps == sorted(steps) and steps[-1] > steps[0]
    steps = [model.summary(model.ddp_schedule(layers, model.alpha_beta(1e-6, b, 8), cap_bytes=1 << 16))["step_s"]
             for b in (1e12, 1e11, 1e10, 1e9)]
    assert steps == sorted(steps) and steps[-1] > steps[0]


def test_the_bucket_sweep_is_u_shaped_with_latency():
    layers = model.transformer_layers(24, 2048, 2048)
    table = model.bucket_sweep(layers, model.alpha_beta(20e-6, 370e9, 8), [1 << s for s in range(8, 34, 2)])
    best = int(table.step_s.idxmin())
    assert 0 < best < len(table) - 1  # neither the smallest nor the largest bucket
    assert table.step_s.iloc[0] > table.step_s.iloc[best] < table.step_s.iloc[-1]


def _wrong_schedule(layers, comm_s, **kwargs):
    """Known-wrong: communication waits for the whole backward (no hooks) — what the checks must catch."""
    tl = model.ddp_schedule(layers, comm_s, **kwargs)
    t = tl[tl.stream == "compute"].end_s.max()
    for i in tl.index[tl.stream == "communication"]:
        length = tl.at[i, "end_s"] - tl.at[i, "start_s"]
        tl.at[i, "start_s"], tl.at[i, "end_s"] = t, t + length
        t += length
    return tl


def test_a_schedule_that_waits_for_backward_fails_the_zero_latency_check():
    layers = _layers()
    comm = model.alpha_beta(0.0, LINEAR, ranks=2)
    s = model.summary(_wrong_schedule(layers, comm, cap_bytes=0, first_bucket_bytes=None, layer_s=_ms))
    assert s["exposed_comm_s"] > comm(1000 * 2) * 1.5


def test_fsdp_prefetch_hides_all_gathers_and_traffic_is_three_psi():
    layers = _layers(8, 10**6, 1e9)
    ag = rs = model.alpha_beta(10e-6, 50e9, 8)
    waits = []
    for prefetch in (0, 1, 2):
        tl = model.fsdp_schedule(layers, ag, rs, prefetch=prefetch, layer_s=_ms)
        compute = tl[tl.stream == "compute"]
        waits.append(tl.end_s.max() - (compute.end_s - compute.start_s).sum())
        assert (tl.kind == "all-gather").sum() == 16 and (tl.kind == "reduce-scatter").sum() == 8
    assert waits[0] > waits[1] >= waits[2]
    psi = 10**9
    fsdp = sum(model.traffic_per_rank(psi, 8, model.STAGES[3]).values())
    ddp = sum(model.traffic_per_rank(psi, 8, model.STAGES[0]).values())
    assert fsdp == pytest.approx(3 * 7 / 8 * psi) and ddp == pytest.approx(2 * 7 / 8 * psi)
    assert sum(model.traffic_per_rank(psi, 8, "ZeRO-2").values()) == pytest.approx(ddp)


def test_memory_per_rank_shards_one_more_part_per_stage():
    p, r = 10**9, 8
    totals = [sum(model.memory_per_rank(p, r, stage).values()) for stage in model.STAGES]
    assert totals[0] == 16 * p and totals[3] == pytest.approx(16 * p / r)
    assert totals == sorted(totals, reverse=True)
    assert model.memory_per_rank(p, r, "ZeRO-1")["optimizer state"] == 12 * p / r
    assert model.memory_per_rank(p, r, "ZeRO-1")["gradients"] == 2 * p


def test_bad_input_is_one_line():
    with pytest.raises(InvalidConfig):
        model.memory_per_rank(10, 8, "ZeRO-4")
    with pytest.raises(InvalidConfig):
        model.compute_s(1e9, gpu="a toaster")
    with pytest.raises(InvalidConfig):
        model.mlp_layers((8,), 4)


# --- the rank processes ------------------------------------------------------------------------------------


def test_rank_arguments_are_checked_on_the_cpu():
    args = ranks.parse(["--rank", "1", "--world", "2", "--variants", "flat,zero"])
    assert args.backend == "gloo" and args.variants == ["flat", "zero"]
    assert ranks.parse(["--rank", "0", "--world", "8", "--backend", "nccl"], cuda_devices=8).backend == "nccl"
    for argv, words in ((["--rank", "0", "--world", "2", "--backend", "nccl"], "one GPU per rank"),
                        (["--rank", "0", "--backend", "mpi"], "--backend"),
                        (["--rank", "2", "--world", "2"], "--rank"),
                        (["--rank", "0", "--world", "1"], "--world"),
                        (["--rank", "0", "--variants", "flat,magic"], "--variants"),
                        (["--world", "2"], "required"),
                        (["--rank", "0", "--cap-bytes", "-1"], "--cap-bytes")):
        with pytest.raises(InvalidConfig, match=words):
            ranks.parse(argv, cuda_devices=0)
    with pytest.raises(InvalidConfig, match="one GPU per rank"):
        experiments.run_ranks(backend="nccl", world=2)  # no process starts


def test_instructor_script_refuses_nccl_here(capsys):
    assert experiments.main(["--backend", "nccl", "--world", "2"]) == 2
    assert "one GPU per rank" in capsys.readouterr().err


def test_one_gpu_overlap_says_it_needs_a_gpu():
    with pytest.raises(NoGPU, match="needs a GPU"):
        experiments.stream_overlap()
    assert experiments.predicted_overlap()["exposed_fraction"] < 1.0


def test_a_rank_past_the_time_limit_is_one_line(monkeypatch):
    monkeypatch.setattr(experiments, "START", "import time; time.sleep(30)")
    with pytest.raises(CourseError, match="did not finish within 2 s"):
        experiments.run_ranks(["flat"], timeout_s=2)


@pytest.mark.slow
def test_two_gloo_ranks_equal_one_process():
    result = experiments.run_ranks()
    table = experiments.counts_table(result)
    assert table.equal.all(), table
    counts = dict(zip(table.variant, table["collective calls"]))
    params = len(list(kernels.small_model().parameters()))
    assert counts == {"per_parameter": params, "flat": 1, "overlap": params, "bucketed": 3, "zero": 2, "fsdp": 3}
    grad_bytes = sum(p.numel() * 4 for p in kernels.small_model().parameters())
    assert dict(zip(table.variant, table.bytes))["flat"] == grad_bytes
    bucketed = result["results"]["bucketed"]
    assert bucketed["ready_order"] == list(reversed(range(params)))  # backward order
    assert bucketed["launch_order"] == [0, 1, 2]
    sizes = experiments.bucket_table(result).bytes.tolist()
    assert sizes[0] < sizes[1] and sum(sizes) == grad_bytes  # a small first bucket
    assert isinstance(table, pd.DataFrame) and all(r["results"]["flat"]["equal"] for r in result["ranks"])


def _double(x, k=2):
    return k * torch.tensor(x).item()


class _Uses:
    def run(self, x):
        return _double(x) + 1


def test_a_notebooks_code_travels_as_code_and_is_rebuilt_with_torch_only():
    namespace = ranks.rebuild(experiments.code_payload(_double, _Uses))
    assert namespace["_Uses"]().run(3) == 7 and namespace["_double"](2, k=5) == 10
    assert "open" not in namespace and {"_double", "torch", "item"} <= experiments.code_names(_double, _Uses)
    outer = 3
    with pytest.raises(InvalidConfig, match="no closure"):
        experiments.code_payload(lambda: outer)
    with pytest.raises(InvalidConfig, match="functions and classes"):
        experiments.code_payload("class Reducer: pass")
