# ---
# jupyter:
#   jupytext:
#     cell_metadata_filter: jupyter,nbgrader,-all
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3 (gpucourse)
#     language: python
#     name: python3
# ---

# %% [markdown] nbgrader={"grade": false, "grade_id": "intro", "locked": true, "schema_version": 3, "solution": false, "task": false}
# # Lab 10 · Buckets that overlap
#
# *About 65 minutes. Goes after lesson 10 "Data-parallel training: overlap and sharding".*
#
# You build the heart of PyTorch's DistributedDataParallel: (1) put the parameters into buckets the way DDP
# does, (2) compute from a timeline how much of the buckets' communication is exposed, and (3) write the
# bucket hook that all-reduces each bucket during backward, and show, on two real processes (gloo, on this
# machine), that the gradients equal one process's on the whole batch.
#
# How you are graded (never on time, so the lab grades the same without a GPU): your buckets and your
# exposed time against the rule on many hidden cases; your hook by the gradients the two processes end with
# and by what they **counted** — how many all-reduces, and whether they started during backward.
#
# How to work: fill in every cell that says `YOUR CODE HERE` (delete the `raise NotImplementedError()`
# line). Don't edit the test cells: they are locked and are graded again, with more hidden cases, after you
# submit. Write the code yourself: the tests check that it does not call the lesson's code
# (`dataparallel.assign_buckets`, which is PyTorch's own bucketing, `BucketedReducer`, the timeline). In
# JupyterLab, **Kernel → Restart Kernel and Run All Cells** before you submit, then use **Validate**.

# %% nbgrader={"grade": false, "grade_id": "setup", "locked": true, "schema_version": 3, "solution": false, "task": false}
import torch

from gpucourse.measure import runtime  # first: it decides GPU or simulator
from gpucourse.tooling.grading import check
from gpucourse.tooling.grading import reaches_package as _reaches_the_course
from gpucourse.lessons import dataparallel

runtime.banner()

# %% [markdown] nbgrader={"grade": false, "grade_id": "ex1_spec", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## Exercise 1 · Assign parameters to buckets (4 points)
#
# **Goal.** `assign_buckets(param_bytes, cap_bytes, first_bucket_bytes=None)`: `param_bytes[i]` is the size of
# parameter `i` (in the model's order). Return a list of buckets, each a list of parameter indices, in the
# order they will be all-reduced:
#
# * walk the parameters in **reverse** order (backward produces the last layer's gradients first);
# * add each parameter to the current bucket; once the bucket holds **at least** its limit, close it and
#   start a new one;
# * the first bucket's limit is `first_bucket_bytes` (a small first bucket starts communication early), or
#   `cap_bytes` when it is `None`; every later bucket's limit is `cap_bytes`;
# * a last bucket that never reached its limit is still a bucket.
#
# **Evidence to reach**: `assign_buckets([10, 10, 10, 10], 20)` is `[[3, 2], [1, 0]]`; with
# `first_bucket_bytes=5` it is `[[3], [2, 1], [0]]`.

# %% nbgrader={"grade": false, "grade_id": "ex1_solution", "locked": false, "schema_version": 3, "solution": true, "task": false}
def assign_buckets(param_bytes, cap_bytes, first_bucket_bytes=None):
    ### BEGIN SOLUTION
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
    ### END SOLUTION


# %% [markdown] nbgrader={"grade": false, "grade_id": "ex1_show_text", "locked": true, "schema_version": 3, "solution": false, "task": false}
# The lesson's small model, bucketed by your function with the caps the lesson's two processes used (24 KiB,
# a first bucket of 1 KiB):

# %% nbgrader={"grade": false, "grade_id": "ex1_show", "locked": true, "schema_version": 3, "solution": false, "task": false}
named = list(dataparallel.small_model().named_parameters())
sizes = [p.numel() * p.element_size() for _, p in named]
try:
    for b, members in enumerate(assign_buckets(sizes, 24 * 1024, 1024)):
        print(f"bucket {b}: {[named[i][0] for i in members]}, {sum(sizes[i] for i in members)} bytes")
except NotImplementedError:
    print("Write assign_buckets first, then run this cell again.")

# %% nbgrader={"grade": true, "grade_id": "ex1_test", "locked": true, "points": 4, "schema_version": 3, "solution": false, "task": false}
"""Check assign_buckets: reverse order, a bucket closes at its limit, the small first bucket."""
assert not _reaches_the_course(assign_buckets), "write assign_buckets yourself: it must not call the course's code"
assert not _reaches_the_course(assign_buckets, "_compute_bucket_assignment"), \
    "write assign_buckets yourself: not with PyTorch's own bucketing (dist._compute_bucket_assignment_by_size)"
assert assign_buckets([10, 10, 10, 10], 20) == [[3, 2], [1, 0]], assign_buckets([10, 10, 10, 10], 20)
assert assign_buckets([10, 10, 10, 10], 20, first_bucket_bytes=5) == [[3], [2, 1], [0]]
assert assign_buckets([10, 10, 10], 0) == [[2], [1], [0]], "cap 0: every parameter its own bucket"
### BEGIN HIDDEN TESTS
import random as _random

_rng = _random.Random(10)
for _ in range(300):
    _sizes = [_rng.choice([4, 8, 100, 1000, 4096, 65536]) * _rng.randint(1, 9) for _ in range(_rng.randint(1, 30))]
    _cap = _rng.choice([0, 1, 64, 1000, 4096, 50000, 10**9])
    _first = _rng.choice([None, 0, 1, 512, 4096])
    check(assign_buckets(list(_sizes), _cap, _first) == dataparallel.assign_buckets(_sizes, _cap, _first))
check(assign_buckets([], 10) == [])
check(assign_buckets([5, 5], 10, 10) == [[1, 0]])
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": false, "grade_id": "ex2_spec", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## Exercise 2 · The exposed communication (4 points)
#
# **Goal.** `exposed_s(ready_s, comm_s, backward_end_s)`: bucket `b`'s last gradient exists at `ready_s[b]`
# (seconds into the step, buckets in launch order) and its all-reduce takes `comm_s[b]`. All-reduces run on
# **one** communication stream, one at a time in launch order: bucket `b` starts when it is ready **and** the
# stream has finished bucket `b − 1`. Backward ends at `backward_end_s`. Return the exposed communication:
# how long after `backward_end_s` the last all-reduce ends (0 if it ends before).
#
# **Evidence to reach**: `exposed_s([1, 2, 3], [0.5, 0.5, 0.5], 3)` is 0.5 (only the last bucket shows);
# `exposed_s([3, 3, 3], [0.5, 0.5, 0.5], 3)` is 1.5 (all of it waits for backward).

# %% nbgrader={"grade": false, "grade_id": "ex2_solution", "locked": false, "schema_version": 3, "solution": true, "task": false}
def exposed_s(ready_s, comm_s, backward_end_s):
    ### BEGIN SOLUTION
    free = 0.0
    for ready, cost in zip(ready_s, comm_s):
        free = max(free, ready) + cost
    return max(0.0, free - backward_end_s)
    ### END SOLUTION


# %% [markdown] nbgrader={"grade": false, "grade_id": "ex2_show_text", "locked": true, "schema_version": 3, "solution": false, "task": false}
# Your function on the lesson's timeline model (its 64-rank NVLink scenario): the buckets' ready times and
# all-reduce costs come from `dataparallel.ddp_schedule`; the exposed time is yours. The lesson's U-curve
# should appear in the last column.

# %% nbgrader={"grade": false, "grade_id": "ex2_show", "locked": true, "schema_version": 3, "solution": false, "task": false}
def timeline_inputs(cap_mib):
    s = dataparallel.SCENARIO
    layers = dataparallel.transformer_layers(s["blocks"], s["d_model"], s["tokens"])
    cost = dataparallel.collective_cost("all_reduce", s["link"], s["ranks"])
    tl = dataparallel.ddp_schedule(layers, cost, cap_bytes=int(cap_mib * 2**20))
    compute = tl[tl.stream == "compute"]
    buckets = dataparallel.layer_buckets(layers, int(cap_mib * 2**20))
    ready = [float(compute.end_s[compute.name.isin([layers[i].name for i in b])
                                 & (compute.kind == "backward")].max()) for b in buckets]
    costs = [cost(sum(layers[i].params for i in b) * 2) for b in buckets]
    return ready, costs, float(compute.end_s.max())


try:
    for cap_mib in (0.125, 4, 25, 45, 256, 4096):
        print(f"cap {cap_mib:>8} MiB: exposed {1e3 * exposed_s(*timeline_inputs(cap_mib)):6.1f} ms")
except NotImplementedError:
    print("Write exposed_s first, then run this cell again.")

# %% nbgrader={"grade": true, "grade_id": "ex2_test", "locked": true, "points": 4, "schema_version": 3, "solution": false, "task": false}
"""Check exposed_s: one stream in launch order, and only what ends after backward counts."""
assert not _reaches_the_course(exposed_s), "write exposed_s yourself: it must not call the course's code"
assert abs(exposed_s([1, 2, 3], [0.5, 0.5, 0.5], 3) - 0.5) < 1e-12, exposed_s([1, 2, 3], [0.5, 0.5, 0.5], 3)
assert abs(exposed_s([3, 3, 3], [0.5, 0.5, 0.5], 3) - 1.5) < 1e-12, "buckets ready together queue on one stream"
assert exposed_s([0.1], [0.1], 1.0) == 0, "an all-reduce that ends before backward is not exposed"
### BEGIN HIDDEN TESTS
import random as _random

_rng = _random.Random(20)
for _ in range(300):
    _n = _rng.randint(1, 12)
    _ready = sorted(_rng.uniform(0, 1) for _ in range(_n))
    _costs = [_rng.uniform(0, 0.3) for _ in range(_n)]
    _end = _ready[-1] + _rng.uniform(0, 0.2)
    _free = 0.0
    for _r, _c in zip(_ready, _costs):
        _free = max(_free, _r) + _c
    check(abs(exposed_s(list(_ready), list(_costs), _end) - max(0.0, _free - _end)) < 1e-9)
for _cap in (0.125, 25, 4096):
    _tl = dataparallel.ddp_schedule(dataparallel.transformer_layers(4, 512, 256),
                                    dataparallel.alpha_beta(5e-6, 50e9, 8), cap_bytes=int(_cap * 2**20))
    _c = _tl[_tl.stream == "communication"]
    _b = dataparallel.summary(_tl)
    _ready = [float(r) for r in _c.start_s]  # each start is the bucket's own ready time or later: same answer
    check(abs(exposed_s(_ready, list(_c.end_s - _c.start_s), _b["compute_s"]) - _b["exposed_comm_s"]) < 1e-9)
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": false, "grade_id": "ex3_spec", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## Exercise 3 · The bucket hook, on two processes (6 points)
#
# **Goal.** A class `Reducer(model, comm, cap_bytes, first_bucket_bytes)` with a method `finish()`, which
# the two processes use like this (each on its half of the batch):
#
# ```python
# reducer = Reducer(model, comm, cap_bytes, first_bucket_bytes)
# loss_on(model, x, y).backward()      # your hooks start each bucket's all-reduce in here
# reducer.finish()                     # wait for them; every p.grad is now the average over the ranks
# ```
#
# * bucket the parameters with your `assign_buckets` (sizes in bytes: `p.numel() * p.element_size()`);
# * register a hook on every parameter with `p.register_post_accumulate_grad_hook(hook)` — PyTorch calls
#   `hook(p)` once `p.grad` holds this step's gradient;
# * when a bucket's last gradient arrives, copy the bucket's gradients into one flat tensor
#   (`torch.cat([g.reshape(-1) …])`) and start `work = comm.all_reduce(flat, async_op=True)`;
# * in `finish()`: `work.wait()` for each bucket, divide by `comm.world`, copy back into each `p.grad`.
#
# `comm` is the lesson's counting communicator (`dataparallel.Comm`): use **only** `comm.all_reduce`, so that
# the processes can count your calls. Your class and your `assign_buckets` are sent to the two processes as
# code: there they may use `torch` and each other, nothing else of this notebook (no closures either).
#
# **Evidence to reach**: the processes' gradients equal one process's (exercise 3a, 4 points); one all-reduce
# per bucket, every one started **during** backward (3b, 2 points).
#
# *Hints: in the collapsed cell below. Try without them first.*

# %% [markdown] jupyter={"source_hidden": true} nbgrader={"grade": false, "grade_id": "ex3_hints", "locked": true, "schema_version": 3, "solution": false, "task": false}
# **Hints for exercise 3**
#
# * Keep, per bucket, a count of gradients still missing; the hook lowers it and launches at zero.
# * `dataparallel.kernels.reduce_flat` (shown by `inspect.getsource`) copies gradients into a flat buffer and
#   back: the same moves, once per bucket.
# * Reset the counts in `finish()`, so that the next step starts fresh.

# %% nbgrader={"grade": false, "grade_id": "ex3_solution", "locked": false, "schema_version": 3, "solution": true, "task": false}
class Reducer:
    ### BEGIN SOLUTION
    def __init__(self, model, comm, cap_bytes, first_bucket_bytes):
        self.params = list(model.parameters())
        self.comm = comm
        self.buckets = assign_buckets([p.numel() * p.element_size() for p in self.params], cap_bytes,
                                      first_bucket_bytes)
        self.bucket_of = {i: b for b, members in enumerate(self.buckets) for i in members}
        self.missing = [len(b) for b in self.buckets]
        self.pending = []
        for i, p in enumerate(self.params):
            p.register_post_accumulate_grad_hook(self._hook(i))

    def _hook(self, index):
        def hook(param):
            b = self.bucket_of[index]
            self.missing[b] -= 1
            if self.missing[b] == 0:
                flat = torch.cat([self.params[i].grad.reshape(-1) for i in self.buckets[b]])
                self.pending.append((b, flat, self.comm.all_reduce(flat, async_op=True)))
        return hook

    def finish(self):
        for b, flat, work in self.pending:
            work.wait()
            flat /= self.comm.world
            offset = 0
            for i in self.buckets[b]:
                g = self.params[i].grad
                g.copy_(flat[offset:offset + g.numel()].view_as(g))
                offset += g.numel()
        self.pending = []
        self.missing = [len(b) for b in self.buckets]
    ### END SOLUTION


# %% [markdown] nbgrader={"grade": false, "grade_id": "ex3_show_text", "locked": true, "schema_version": 3, "solution": false, "task": false}
# Your `Reducer` on two gloo processes (about 10 seconds; at most two minutes): what rank 0 counted, and the
# largest difference from one process's gradients.

# %% nbgrader={"grade": false, "grade_id": "ex3_show", "locked": true, "schema_version": 3, "solution": false, "task": false}
def run_reducer():
    """Your assign_buckets and Reducer, on two gloo processes (they get your code, torch, and nothing else)."""
    return dataparallel.run_ranks(["flat"], reducer=(assign_buckets, Reducer), timeout_s=90)["results"]["learner"]


try:
    mine = run_reducer()
    print({key: mine[key] for key in ("calls", "nbytes", "calls_during_backward", "max_abs_diff", "equal")})
except NotImplementedError:
    print("Write Reducer first, then run this cell again.")

# %% nbgrader={"grade": true, "grade_id": "ex3a_test", "locked": true, "points": 4, "schema_version": 3, "solution": false, "task": false}
"""Check that two gloo processes with your Reducer end with one process's gradients, using only
comm.all_reduce."""
_names = dataparallel.experiments.code_names(assign_buckets, Reducer)
_banned = _names & {"dist", "distributed", "gpucourse", "dataparallel", "open", "exec", "eval", "__import__",
                    "importlib", "sys", "os", "subprocess", "globals", "ranks", "reference", "batch",
                    "all_gather", "broadcast", "BucketedReducer", "reduce_flat", "calls", "nbytes", "sizes",
                    "_count", "setattr", "__dict__", "__class__", "vars", "getattr"}
assert not _banned, f"use only torch, your assign_buckets and comm.all_reduce; not {sorted(_banned)}"
_result = run_reducer()
assert _result["equal"], f"the gradients differ from one process's by up to {_result['max_abs_diff']:.3g}"
### BEGIN HIDDEN TESTS
_grads, _ = dataparallel.experiments.ranks_reference()
check(len(_result["grads"]) == len(_grads))
check(max(abs(a - b) for a, b in zip(_result["grads"], _grads)) <= 1e-6)
check(set(_result["calls"]) == {"all_reduce"})
check(_result["nbytes"]["all_reduce"] == sum(p.numel() * 4 for p in dataparallel.small_model().parameters()))
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "ex3b_test", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
"""Check one all-reduce per bucket, every one started during backward (the overlap), and the gradients."""
_names = dataparallel.experiments.code_names(assign_buckets, Reducer)
_banned = _names & {"dist", "distributed", "gpucourse", "dataparallel", "open", "exec", "eval", "__import__",
                    "importlib", "sys", "os", "subprocess", "globals", "ranks", "reference", "batch",
                    "all_gather", "broadcast", "BucketedReducer", "reduce_flat", "calls", "nbytes", "sizes",
                    "_count", "setattr", "__dict__", "__class__", "vars", "getattr"}
assert not _banned, f"use only torch, your assign_buckets and comm.all_reduce; not {sorted(_banned)}"
_result = run_reducer()
assert _result["equal"], "the gradients must be right first (exercise 3a)"
assert _result["calls_during_backward"] == sum(_result["calls"].values()), (
    f"{_result['calls_during_backward']} of {sum(_result['calls'].values())} all-reduces started during "
    "backward: start each bucket's from the hook")
### BEGIN HIDDEN TESTS
_sizes = [p.numel() * 4 for p in dataparallel.small_model().parameters()]
check(_result["calls"]["all_reduce"] == len(dataparallel.assign_buckets(_sizes, 24 * 1024, 1024)) == 3)
check(_result["calls_during_backward"] == 3)
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": false, "grade_id": "wrapup", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## What you built
#
# Your `Reducer` is DistributedDataParallel's reducer in thirty lines: reverse-order buckets, a small first one,
# hooks that launch asynchronous all-reduces while backward runs, and an average at the end. What PyTorch adds:
# the buckets are views into one contiguous gradient buffer (no copies), the order is checked and rebuilt
# after the first step from the order gradients really arrived, unused parameters are handled, and on a GPU
# the all-reduces run on NCCL's own stream. On an instructor's node, `python tools/ddp_ranks.py --backend nccl
# --world 8` runs the lesson's variants on NCCL.
