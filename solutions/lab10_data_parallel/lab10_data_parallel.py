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
# *About 70 minutes. Goes after lesson 10 "Data-parallel training: overlap and sharding".*
#
# You build the heart of PyTorch's DistributedDataParallel: (1) put the parameters into buckets the way DDP
# does, (2) compute from a timeline how much of the buckets' communication is exposed, and (3) write the
# bucket reducer the way DDP lays it out, with every gradient a **view into its bucket's flat buffer** (no
# copy in, none out), and show, on two real processes (gloo, on this machine), that the gradients equal one
# process's on the whole batch.
#
# How you are graded (never on time, so the lab grades the same without a GPU): your buckets and your
# exposed time against the rule on many hidden cases; your reducer by what the two processes **saw**: the
# gradients they end with (on a batch drawn afresh for each run), what each all-reduce carried (checked
# against the real gradients of its bucket), when the first one started (while later buckets' gradients were
# still missing?) and where the gradients live at the end.
#
# How to work: fill in every cell that says `YOUR CODE HERE` (delete the `raise NotImplementedError()`
# line). Don't edit the test cells: they are locked and are graded again, with more hidden cases, after you
# submit. Write the code yourself: while your code runs, the grader watches for calls (however they are
# spelled) to the lesson's code (`dataparallel.assign_buckets`, which is PyTorch's own bucketing,
# `BucketedReducer`, the timeline), to PyTorch's bucketing and DDP, and to any `torch.distributed`
# collective but the `comm` you are given; one such call costs the exercise's points. In JupyterLab,
# **Kernel → Restart Kernel and Run All Cells** before you submit, then use **Validate**.

# %% nbgrader={"grade": false, "grade_id": "setup", "locked": true, "schema_version": 3, "solution": false, "task": false}
import torch

from gpucourse.measure import runtime  # first: it decides GPU or simulator
from gpucourse.tooling.grading import check, tripwire
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
import json as _json
import random as _random

_BUCKETING = {"gpucourse.lessons.dataparallel.kernels:assign_buckets": "the lesson's bucketing (PyTorch's)",
              "gpucourse.lessons.dataparallel.model:layer_buckets": "the lesson's bucketing of layers",
              "torch.distributed:_compute_bucket_assignment_by_size": "PyTorch's own bucketing"}
_rng = _random.Random(10)
_cases = []
for _ in range(300):
    _sizes = [_rng.choice([4, 8, 100, 1000, 4096, 65536]) * _rng.randint(1, 9) for _ in range(_rng.randint(1, 30))]
    _cases.append((_sizes, _rng.choice([0, 1, 64, 1000, 4096, 50000, 10**9]), _rng.choice([None, 0, 1, 512, 4096])))
_cases += [([], 10, None), ([5, 5], 10, 10)]
with tripwire.armed(_BUCKETING) as _trips:  # your answers first, frozen to plain lists; the expected ones after
    _got = _json.dumps(call_each(assign_buckets, [(list(_s), _c, _f) for _s, _c, _f in _cases]))
check(not _trips.tripped)
check(_json.loads(_got) == [dataparallel.assign_buckets(_s, _c, _f) for _s, _c, _f in _cases])
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

_TIMELINE = {"gpucourse.lessons.dataparallel.model:ddp_schedule": "the lesson's timeline",
             "gpucourse.lessons.dataparallel.model:summary": "the lesson's timeline",
             "gpucourse.lessons.dataparallel.model:bucket_sweep": "the lesson's timeline"}
_rng = _random.Random(20)
_cases = []
for _ in range(300):
    _n = _rng.randint(1, 12)
    _ready = sorted(_rng.uniform(0, 1) for _ in range(_n))
    _cases.append((_ready, [_rng.uniform(0, 0.3) for _ in range(_n)], _ready[-1] + _rng.uniform(0, 0.2)))
for _cap in (0.125, 25, 4096):
    _tl = dataparallel.ddp_schedule(dataparallel.transformer_layers(4, 512, 256),
                                    dataparallel.alpha_beta(5e-6, 50e9, 8), cap_bytes=int(_cap * 2**20))
    _c = _tl[_tl.stream == "communication"]
    # each start is the bucket's own ready time or later: the same answer
    _cases.append(([float(r) for r in _c.start_s], [float(c) for c in _c.end_s - _c.start_s],
                   dataparallel.summary(_tl)["compute_s"]))
with tripwire.armed(_TIMELINE) as _trips:
    _got = call_each(exposed_s, [(list(_r), list(_c), _e) for _r, _c, _e in _cases])
check(not _trips.tripped)
check(all(type(_g) in (int, float) for _g in _got))  # plain numbers, frozen before any expected value exists
_got = [float(_g) for _g in _got]
_want = []
for _r, _c, _e in _cases:
    _free = 0.0
    for _ri, _ci in zip(_r, _c):
        _free = max(_free, _ri) + _ci
    _want.append(max(0.0, _free - _e))
check(all(abs(_g - _w) < 1e-9 for _g, _w in zip(_got, _want)))
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": false, "grade_id": "ex3_spec", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## Exercise 3 · Buckets as views of one flat buffer, on two processes (6 points)
#
# The lesson's `BucketedReducer` copies: at each launch it concatenates the bucket's gradients into a new
# flat tensor, and after the all-reduce it copies the averages back into every `p.grad`. DDP copies neither
# way: each bucket owns one flat buffer, and every gradient of the bucket **is a view** of its slice of that
# buffer, so backward writes the gradients straight into what the all-reduce sends.
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
# * give each bucket one flat buffer, and make every `p.grad` a view of its slice **before** backward;
#   backward then adds each new gradient into the existing `p.grad`, in place;
# * register a hook on every parameter with `p.register_post_accumulate_grad_hook(hook)` — PyTorch calls
#   `hook(p)` once `p.grad` holds this step's gradient — and start a bucket's all-reduce,
#   `comm.all_reduce(buffer, async_op=True)` (it returns a handle with `.wait()`), as soon as the bucket is
#   complete, no later;
# * in `finish()`: wait for every bucket and leave the average over the `comm.world` ranks in every `p.grad`,
#   still a view of its bucket's buffer.
#
# `comm` is the lesson's counting communicator (`dataparallel.Comm`): use **only** `comm.all_reduce`. Your
# class and your `assign_buckets` are sent to the two processes as code: there they may use `torch` and each
# other, nothing else of this notebook (no closures either).
#
# **Evidence to reach**: the processes' gradients equal one process's, and each all-reduce carried exactly
# one bucket's real gradients (exercise 3a, 3 points); the first bucket's all-reduce started while later
# buckets' gradients were still missing (3b, 1 point); at the end every gradient lives in the very buffer its
# bucket's all-reduce was given (3c, 2 points).
#
# *Hints: in the collapsed cell below. Try without them first.*

# %% [markdown] jupyter={"source_hidden": true} nbgrader={"grade": false, "grade_id": "ex3_hints", "locked": true, "schema_version": 3, "solution": false, "task": false}
# **Hints for exercise 3**
#
# * `flat[offset:offset + n].view_as(p)` shares `flat`'s storage; assigning it to `p.grad` keeps it shared, as
#   long as nothing replaces `p.grad` afterwards (`model.zero_grad()` sets it to `None` by default).
# * Keep, per bucket, a count of gradients still missing; the hook lowers it.
# * In place keeps the views: `buffer /= world`, not `buffer = buffer / world`.
# * Reset what a step counts in `finish()`, so that the next step starts fresh.

# %% nbgrader={"grade": false, "grade_id": "ex3_solution", "locked": false, "schema_version": 3, "solution": true, "task": false}
class Reducer:
    ### BEGIN SOLUTION
    def __init__(self, model, comm, cap_bytes, first_bucket_bytes):
        self.params = list(model.parameters())
        self.comm = comm
        self.buckets = assign_buckets([p.numel() * p.element_size() for p in self.params], cap_bytes,
                                      first_bucket_bytes)
        self.buffers = []
        for members in self.buckets:
            buffer = torch.zeros(sum(self.params[i].numel() for i in members), dtype=self.params[members[0]].dtype,
                                 device=self.params[members[0]].device)
            offset = 0
            for i in members:
                p = self.params[i]
                p.grad = buffer[offset:offset + p.numel()].view_as(p)  # backward adds into it, in place
                offset += p.numel()
            self.buffers.append(buffer)
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
                self.pending.append((b, self.comm.all_reduce(self.buffers[b], async_op=True)))
        return hook

    def finish(self):
        for b, work in self.pending:
            work.wait()
            self.buffers[b] /= self.comm.world
        self.pending = []
        self.missing = [len(b) for b in self.buckets]
    ### END SOLUTION


# %% [markdown] nbgrader={"grade": false, "grade_id": "ex3_show_text", "locked": true, "schema_version": 3, "solution": false, "task": false}
# Your `Reducer` on two gloo processes (about 10 seconds; at most two minutes): what rank 0 saw, and the
# largest difference from one process's gradients.

# %% nbgrader={"grade": false, "grade_id": "ex3_show", "locked": true, "schema_version": 3, "solution": false, "task": false}
def run_reducer():
    """Your assign_buckets and Reducer, on two gloo processes (they get your code, torch, and nothing else),
    each armed with the grader's tripwires."""
    return dataparallel.run_ranks(["flat"], reducer=(assign_buckets, Reducer), timeout_s=90,
                                  start=dataparallel.experiments.GUARDED_START)["results"]["learner"]


try:
    mine = run_reducer()
    print({key: mine[key] for key in ("calls", "payload_buckets", "first_bucket_missing", "grads_are_views",
                                      "max_abs_diff", "equal", "tripped")})
except NotImplementedError:
    print("Write Reducer first, then run this cell again.")

# %% nbgrader={"grade": true, "grade_id": "ex3a_test", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
"""Check that two gloo processes with your Reducer end with one process's gradients, and that each all-reduce
carried one bucket's real gradients, through comm.all_reduce only."""
_names = dataparallel.experiments.code_names(assign_buckets, Reducer)
_banned = _names & {"dist", "distributed", "gpucourse", "dataparallel", "open", "exec", "eval", "__import__",
                    "importlib", "sys", "os", "subprocess", "globals", "ranks", "reference", "batch",
                    "all_gather", "broadcast", "BucketedReducer", "reduce_flat", "calls", "nbytes", "sizes",
                    "_count", "seen", "ready", "setattr", "__dict__", "__class__", "vars", "getattr"}
assert not _banned, f"use only torch, your assign_buckets and comm.all_reduce; not {sorted(_banned)}"
_result = run_reducer()
assert not _result["tripped"], _result["tripped"][0]
assert _result["equal"], f"the gradients differ from one process's by up to {_result['max_abs_diff']:.3g}"
assert None not in _result["payload_buckets"], (
    f"all-reduce number {_result['payload_buckets'].index(None)} carried something other than one bucket's gradients")
### BEGIN HIDDEN TESTS
_sizes = [p.numel() * 4 for p in dataparallel.small_model().parameters()]
_rule = dataparallel.assign_buckets(_sizes, 24 * 1024, 1024)
check(_result["guarded"] and _result["tripped"] == [])
check(sorted(_result["payload_buckets"]) == list(range(len(_rule))))
check(_result["calls"] == {"all_reduce": len(_rule)})
check(_result["nbytes"]["all_reduce"] == sum(_sizes))
check(_result["buckets"] == _rule)
_grads, _ = dataparallel.experiments.ranks_reference(2, _result["batch_seed"])
check(len(_result["grads"]) == len(_grads) and max(abs(a - b) for a, b in zip(_result["grads"], _grads)) <= 1e-6)
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "ex3b_test", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
"""Check the overlap: the first bucket's all-reduce starts while later buckets' gradients are still missing."""
_result = run_reducer()
assert not _result["tripped"], _result["tripped"][0]
assert _result["equal"] and None not in _result["payload_buckets"], "the gradients must be right first (3a)"
assert _result["first_bucket_missing"], (
    "the first bucket's all-reduce started when backward had produced every gradient: start each bucket's "
    "from the hook that completes it")
### BEGIN HIDDEN TESTS
_sizes = [p.numel() * 4 for p in dataparallel.small_model().parameters()]
_rule = dataparallel.assign_buckets(_sizes, 24 * 1024, 1024)
check(_result["tripped"] == [] and sorted(_result["payload_buckets"]) == list(range(len(_rule))))
check(_result["payload_buckets"] == list(range(len(_rule))))  # launched in bucket order, as backward fills them
check(_result["first_bucket_missing"] == len(_sizes) - len(_rule[0]))  # launched the moment bucket 0 is full
check(_result["calls_during_backward"] == len(_rule))
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "ex3c_test", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
"""Check the views: every gradient ends in the buffer its bucket's all-reduce was given (no copy in or out)."""
_result = run_reducer()
assert not _result["tripped"], _result["tripped"][0]
assert _result["equal"] and None not in _result["payload_buckets"], "the gradients must be right first (3a)"
assert _result["grads_are_views"], ("a p.grad is not a view of the buffer its bucket's all-reduce was given: "
                                    "make the gradients views before backward and keep them")
### BEGIN HIDDEN TESTS
check(_result["tripped"] == [] and _result["grads_are_views"] is True)
check(sorted(_result["payload_buckets"]) == [0, 1, 2])
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": false, "grade_id": "wrapup", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## What you built
#
# Your `Reducer` is DistributedDataParallel's reducer in forty lines: reverse-order buckets, a small first one,
# gradients that are views of their bucket's buffer (`gradient_as_bucket_view=True` in DDP), hooks that launch
# asynchronous all-reduces while backward runs, and an average at the end. What PyTorch adds: the order is
# checked and rebuilt after the first step from the order gradients really arrived, unused parameters are
# handled, and on a GPU the all-reduces run on NCCL's own stream. On an instructor's node,
# `python tools/ddp_ranks.py --backend nccl --world 8` runs the lesson's variants on NCCL.
