"""Lab 10's evidence in a rank (ranks.run_learner), without nbgrader and in one process (a one-rank gloo group):
each all-reduce's payload checked against the real gradients of its bucket, the first bucket started while later
gradients were missing, the gradients as views of the buffers the all-reduces were given, the grader's tripwire
armed around the learner's Reducer, and a batch drawn afresh for every learner run."""

from __future__ import annotations

import argparse
import datetime

import pytest
import torch
import torch.distributed as dist

from gpucourse.lessons.dataparallel import experiments, kernels, ranks
from gpucourse.tooling.grading import tripwire

BUCKETS = '''
def assign_buckets(param_bytes, cap_bytes, first_bucket_bytes=None):
    buckets, current, size = [], [], 0
    limit = cap_bytes if first_bucket_bytes is None else first_bucket_bytes
    for index in reversed(range(len(param_bytes))):
        current.append(index)
        size += param_bytes[index]
        if size >= limit:
            buckets.append(current)
            current, size, limit = [], 0, cap_bytes
    if current:
        buckets.append(current)
    return buckets
'''
VIEWS = '''
class Reducer:
    def __init__(self, model, comm, cap_bytes, first_bucket_bytes):
        self.params, self.comm = list(model.parameters()), comm
        self.buckets = assign_buckets([p.numel() * p.element_size() for p in self.params], cap_bytes,
                                      first_bucket_bytes)
        self.buffers = []
        for members in self.buckets:
            buffer = torch.zeros(sum(self.params[i].numel() for i in members))
            offset = 0
            for i in members:
                self.params[i].grad = buffer[offset:offset + self.params[i].numel()].view_as(self.params[i])
                offset += self.params[i].numel()
            self.buffers.append(buffer)
        self.bucket_of = {i: b for b, members in enumerate(self.buckets) for i in members}
        self.missing, self.pending = [len(b) for b in self.buckets], []
        for i, p in enumerate(self.params):
            p.register_post_accumulate_grad_hook(self._hook(i))

    def _hook(self, index):
        def hook(param):
            b = self.bucket_of[index]
            self.missing[b] -= 1
            if self.missing[b] == 0:
                self.pending.append((b, self.comm.all_reduce(self.buffers[b], async_op=True)))
        return hook

    def finish(self):
        for b, work in self.pending:
            work.wait()
            self.buffers[b] /= self.comm.world
        self.pending = []
'''
LAUNCH = "                self.pending.append((b, self.comm.all_reduce(self.buffers[b], async_op=True)))\n"
LAST_HOOK = VIEWS.replace("            if self.missing[b] == 0:\n" + LAUNCH, "            if not any(self.missing):\n"
                                  "                for c in range(len(self.buckets)):\n"
                                  "                    self.pending.append((c, self.comm.all_reduce(self.buffers[c], "
                                  "async_op=True)))\n")
DECOY_AND_RENAMED = VIEWS.replace(LAUNCH, "                self.comm.all_reduce(torch.zeros_like(self.buffers[b]))"
                                          "\n"
                                          "                d = type(torch).__getattribute__(torch, 'distri'"
                                          " + 'buted')\n"
                                          "                self.pending.append((b, d.all_reduce(self.buffers[b], "
                                          "async_op=True)))\n")
COPIES = VIEWS.replace("                self.params[i].grad = buffer[", "                _ = buffer[").replace(
    LAUNCH, "                flat = torch.cat([self.params[i].grad.reshape(-1) for i in self.buckets[b]])\n"
            "                self.buffers[b] = flat\n" + LAUNCH).replace(
    "            self.buffers[b] /= self.comm.world\n",
    "            self.buffers[b] /= self.comm.world\n"
    "            offset = 0\n"
    "            for i in self.buckets[b]:\n"
    "                g = self.params[i].grad\n"
    "                g.copy_(self.buffers[b][offset:offset + g.numel()].view_as(g))\n"
    "                offset += g.numel()\n")


# what GUARDED_START does in each rank: the grader's communicator is where the learner's code ends
tripwire.boundary(ranks.WatchedComm.all_reduce)


@pytest.fixture(scope="module")
def one_rank():
    if dist.is_initialized():
        pytest.skip("a process group is already running in this process")
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1,
                            timeout=datetime.timedelta(seconds=60))
    yield
    dist.destroy_process_group()


def _run(tmp_path, reducer_source: str, guard=tripwire.armed, batch_seed: int = 5) -> dict:
    namespace = {"torch": torch}
    exec(compile(BUCKETS + reducer_source, "/tmp/ipykernel_0/cell.py", "exec"), namespace)
    path = tmp_path / "reducer.marshal"
    path.write_bytes(experiments.code_payload(namespace["assign_buckets"], namespace["Reducer"]))
    args = argparse.Namespace(world=1, rank=0, cap_bytes=24 * 1024, first_bucket_bytes=1024, batch_seed=batch_seed,
                              reducer_file=str(path))
    return ranks.run_learner(args, torch.device("cpu"), guard)


def test_the_views_reducer_shows_every_piece_of_evidence(one_rank, tmp_path):
    r = _run(tmp_path, VIEWS)
    assert r["equal"] and r["tripped"] == [] and r["guarded"]
    assert r["payload_buckets"] == [0, 1, 2] and r["calls"] == {"all_reduce": 3}
    assert r["first_bucket_missing"] == 6  # 8 parameters, the first bucket holds the last layer's 2
    assert r["grads_are_views"] is True


def test_launching_every_bucket_from_the_last_hook_overlaps_nothing(one_rank, tmp_path):
    r = _run(tmp_path, LAST_HOOK)
    assert r["equal"] and r["calls_during_backward"] == 3  # every call "during backward" …
    assert r["first_bucket_missing"] == 0  # … and none while a gradient was missing


def test_decoys_through_comm_and_the_real_reduction_elsewhere_are_seen(one_rank, tmp_path):
    r = _run(tmp_path, DECOY_AND_RENAMED)
    assert r["equal"]  # the gradients are right: only the evidence tells
    assert r["payload_buckets"] == [None, None, None]  # zeros are no bucket's gradients
    assert r["tripped"] and "torch.distributed directly" in r["tripped"][0]
    unguarded = _run(tmp_path, DECOY_AND_RENAMED, guard=None)
    assert unguarded["tripped"] == [] and not unguarded["guarded"]


def test_copies_are_not_views(one_rank, tmp_path):
    r = _run(tmp_path, COPIES)
    assert r["equal"] and r["payload_buckets"] == [0, 1, 2] and r["first_bucket_missing"] == 6
    assert r["grads_are_views"] is False


def test_the_checksum_is_against_this_ranks_own_gradients():
    """evidence() on a hand-filled WatchedComm (no process group): a payload matches its bucket only."""
    model = kernels.small_model()
    x, y = ranks.batch(1, torch.device("cpu"), 7)
    kernels.loss_on(model, x[:8], y[:8]).backward()
    local = [p.grad.detach().clone() for p in model.parameters()]
    buckets = kernels.assign_buckets([p.numel() * 4 for p in model.parameters()], 24 * 1024, 1024)
    comm = ranks.WatchedComm(1, 0)
    real = torch.cat([local[i].reshape(-1) for i in buckets[0]])
    comm.seen = [(real.clone(), real, 2), (torch.zeros(5), torch.zeros(5), 8),
                 (real.clone() + 1e-3, real, 8)]
    found = ranks.evidence(comm, model, local, buckets)
    assert found["payload_buckets"] == [0, None, None]
    assert found["first_bucket_missing"] == 6
    assert found["grads_are_views"] is False


def test_each_learner_run_draws_its_own_batch(monkeypatch):
    seen = []

    def launched(commands, **_):
        seen.append(commands[0][commands[0].index("--batch-seed") + 1])
        raise RuntimeError("stop before any process starts")

    monkeypatch.setattr(experiments.ranklaunch, "run", launched)
    namespace = {"torch": torch}
    exec(compile(BUCKETS + VIEWS, "/tmp/ipykernel_0/cell.py", "exec"), namespace)
    for reducer in ((namespace["assign_buckets"], namespace["Reducer"]), ()):
        with pytest.raises(RuntimeError):
            experiments.run_ranks(["flat"], reducer=reducer, start=experiments.GUARDED_START)
    assert seen[0] != "1" and seen[1] == "1"  # the lesson's own runs keep the fixed batch
