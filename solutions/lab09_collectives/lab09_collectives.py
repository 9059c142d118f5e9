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
# # Lab 09 · Rings on the microscope
#
# *About 35 minutes. Goes after lesson 09 "Collectives". No GPU needed.*
#
# NCCL does not build its rings in rank order: it follows the wires (NVLink, PCIe, the network), so a ring on
# 8 GPUs may visit them as 0 → 2 → 4 → 6 → 7 → 5 → 3 → 1 → 0. You will write the **ring reduce-scatter** and the
# **ring all-gather** for any ring order on the collective microscope, then **predict** collective times
# with the α-β model.
#
# How you are graded (never on wall time):
#
# * **values**: every rank holds exactly what NumPy says;
# * **bytes and steps**: the microscope counts every message. A ring sends (p − 1)/p · S bytes per rank in
#   p − 1 steps, each message to the next rank of *the ring order*. A version with the right values that
#   sends more (the whole buffer each step, say) earns 0;
# * **predictions**: within 2 % of the model.
#
# How to work: fill in every cell that says `YOUR CODE HERE` (delete the `raise
# NotImplementedError()` line). Don't edit the test cells: they are locked and are graded
# again, with more hidden cases, after you submit. In JupyterLab, **Kernel → Restart Kernel and
# Run All Cells** before you submit, then use **Validate**.

# %% nbgrader={"grade": false, "grade_id": "setup", "locked": true, "schema_version": 3, "solution": false, "task": false}
import numpy as np
from IPython.display import display

from gpucourse.measure import runtime  # first: it decides GPU or simulator before numba is imported
from gpucourse.tooling.grading import check
from gpucourse.lessons import collectives
from gpucourse.lessons.collectives import World


def run_ring(fn, op, ranks, nbytes, order=None, seed=0):
    """Run your ``fn(world, order)`` for ``op`` ("reduce_scatter" or "all_gather") on the microscope."""
    order = list(range(ranks)) if order is None else list(order)

    def on_the_ring(world):
        fn(world, order)

    on_the_ring.__name__ = f"{fn.__name__}, order {order}"
    return collectives.execute(op, on_the_ring, ranks, nbytes, seed=seed)


runtime.banner()


# %% [markdown] nbgrader={"grade": false, "grade_id": "world", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## The microscope's world
#
# `world.ranks` ranks each hold `world.data[r]`, a float32 buffer of S bytes cut into `world.ranks` chunks:
# `world.chunk(c)` is the slice of chunk c. In a **step**, each rank sends at most one message and receives at
# most one: `world.send(src, dst, world.chunk(c), reduce=True)` queues chunk c of `src` for `dst` (added into
# `dst`'s chunk c with `reduce=True`, copied over it without); `world.step()` delivers every queued message at
# once. The world counts bytes, steps and reductions. Here is the library's ring all-gather **in rank order**
# (your version takes any order):

# %% nbgrader={"grade": false, "grade_id": "show_world", "locked": true, "schema_version": 3, "solution": false, "task": false}
import inspect

print(inspect.getsource(collectives.kernels.ring_all_gather))
r = collectives.run("all_gather", "ring", 4, 64)
display(r.per_rank())

# %% [markdown] nbgrader={"grade": false, "grade_id": "ex1_spec", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## Exercise 1 · Ring reduce-scatter in any ring order (4 points)
#
# **Goal.** `ring_reduce_scatter(world, order)`: `order` is a permutation of the ranks; rank `order[i]` sends
# only to rank `order[(i + 1) % p]`. Afterwards rank r holds, in its chunk r, the sum over all ranks of chunk r
# (the rest of its buffer may hold anything).
#
# **Evidence to reach**: values equal NumPy's; p − 1 steps; every rank sends exactly (p − 1)/p · S bytes; every
# message goes to the next rank of the order; for p = 2 … 16, odd p included.
#
# *Hints: in the collapsed cell below. Try without them first.*

# %% [markdown] jupyter={"source_hidden": true} nbgrader={"grade": false, "grade_id": "ex1_hints", "locked": true, "schema_version": 3, "solution": false, "task": false}
# **Hints for exercise 1**
#
# * Work in **positions** i = 0 … p − 1 along the ring; the rank at position i is `order[i]`.
# * Position i must end with chunk `order[i]` complete. In rank order the library sends chunk (r − s − 1) mod p at
#   step s; in positions, send chunk `order[(i - s - 1) % p]`.
# * Queue all p sends of a step, then call `world.step()` once.

# %% nbgrader={"grade": false, "grade_id": "ex1_solution", "locked": false, "schema_version": 3, "solution": true, "task": false}
def ring_reduce_scatter(world, order):
    ### BEGIN SOLUTION
    p = world.ranks
    for s in range(p - 1):
        for i in range(p):
            world.send(order[i], order[(i + 1) % p], world.chunk(order[(i - s - 1) % p]), reduce=True)
        world.step()
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "ex1_test", "locked": true, "points": 4, "schema_version": 3, "solution": false, "task": false}
"""Check the values, the steps, the bytes per rank and that every message follows the ring order."""
for p, order in ((4, [0, 1, 2, 3]), (4, [0, 2, 3, 1]), (5, [4, 1, 0, 3, 2])):
    run = run_ring(ring_reduce_scatter, "reduce_scatter", p, 4 * p * 8, order)
    assert run.correct, f"p = {p}, order {order}: a rank's chunk is not the sum NumPy gives"
    assert run.steps == p - 1, f"p = {p}: {run.steps} steps, a ring takes p − 1 = {p - 1}"
    assert (run.bytes_sent == (p - 1) * 4 * 8).all(), f"p = {p}: bytes sent per rank {run.bytes_sent.tolist()}"
### BEGIN HIDDEN TESTS
def _tapped(fn, op, p, nbytes, order, seed):
    """Run fn on a world whose deliveries are recorded apart from the counters the world shows."""
    log = []

    class _Tap(World):
        def step(self):
            log.append([(m.src, m.dst, int(m.payload.nbytes), m.part.start, m.part.stop) for m in self.pending])
            World.step(self)

    world = _Tap(p, nbytes // 4, seed=seed)
    inputs = [d.copy() for d in world.data]
    fn(world, list(order))
    total = np.sum(inputs, axis=0)
    return world, log, inputs, total


def _rs_ok(p, order, seed):
    S = 4 * p * 6
    world, log, inputs, total = _tapped(ring_reduce_scatter, "reduce_scatter", p, S, order, seed)
    nxt = {order[i]: order[(i + 1) % p] for i in range(p)}
    sent = np.zeros(p, dtype=np.int64)
    for step in log:
        for src, _dst, nb, _, _ in step:
            sent[src] += nb
    return (not world.pending and len(log) == p - 1 and all(len(step) == p for step in log)
            and all(dst == nxt[src] for step in log for src, dst, *_ in step)
            and bool((sent == (p - 1) * S // p).all())
            and all(np.array_equal(world.data[r][world.chunk(r)], total[world.chunk(r)]) for r in range(p)))


_rng = np.random.default_rng(9)
check(all(_rs_ok(p, list(_rng.permutation(p)), seed=p) for p in range(2, 17)))
check(_rs_ok(8, [0, 2, 4, 6, 7, 5, 3, 1], seed=1))
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": false, "grade_id": "ex2_spec", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## Exercise 2 · Ring all-gather in any ring order (4 points)
#
# **Goal.** `ring_all_gather(world, order)`: rank r starts with its chunk r (`world.data[r][world.chunk(r)]`;
# the rest of its buffer is zero) and ends with every rank's chunk in place — the whole buffer. Rank `order[i]`
# sends only to `order[(i + 1) % p]`.
#
# **Evidence to reach**: values equal NumPy's; p − 1 steps; (p − 1)/p · S bytes sent per rank; ring order kept.
#
# *Hints: in the collapsed cell below. Try without them first.*

# %% [markdown] jupyter={"source_hidden": true} nbgrader={"grade": false, "grade_id": "ex2_hints", "locked": true, "schema_version": 3, "solution": false, "task": false}
# **Hints for exercise 2**
#
# * Position i starts with the finished chunk `order[i]`; at step s it passes on the chunk it received last,
#   `order[(i - s) % p]`, without `reduce`.
# * After p − 1 steps every position has received the p − 1 chunks it did not have.

# %% nbgrader={"grade": false, "grade_id": "ex2_solution", "locked": false, "schema_version": 3, "solution": true, "task": false}
def ring_all_gather(world, order):
    ### BEGIN SOLUTION
    p = world.ranks
    for s in range(p - 1):
        for i in range(p):
            world.send(order[i], order[(i + 1) % p], world.chunk(order[(i - s) % p]))
        world.step()
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "ex2_test", "locked": true, "points": 4, "schema_version": 3, "solution": false, "task": false}
"""Check the values, the steps, the bytes per rank and that every message follows the ring order."""
for p, order in ((4, [0, 1, 2, 3]), (4, [0, 2, 3, 1]), (5, [4, 1, 0, 3, 2])):
    run = run_ring(ring_all_gather, "all_gather", p, 4 * p * 8, order)
    assert run.correct, f"p = {p}, order {order}: a rank's buffer is not every chunk in place"
    assert run.steps == p - 1, f"p = {p}: {run.steps} steps, a ring takes p − 1 = {p - 1}"
    assert (run.bytes_sent == (p - 1) * 4 * 8).all(), f"p = {p}: bytes sent per rank {run.bytes_sent.tolist()}"
### BEGIN HIDDEN TESTS
def _ag_ok(p, order, seed):
    S = 4 * p * 6
    log = []

    class _Tap(World):
        def step(self):
            log.append([(m.src, m.dst, int(m.payload.nbytes)) for m in self.pending])
            World.step(self)

    world = _Tap(p, S // 4, seed=seed)
    for r in range(p):
        keep = world.data[r][world.chunk(r)].copy()
        world.data[r][:] = 0
        world.data[r][world.chunk(r)] = keep
    want = np.concatenate([world.data[r][world.chunk(r)].copy() for r in range(p)])
    ring_all_gather(world, list(order))
    nxt = {order[i]: order[(i + 1) % p] for i in range(p)}
    sent = np.zeros(p, dtype=np.int64)
    for step in log:
        for src, _, nb in step:
            sent[src] += nb
    return (not world.pending and len(log) == p - 1 and all(dst == nxt[src] for step in log for src, dst, _ in step)
            and bool((sent == (p - 1) * S // p).all()) and all(np.array_equal(world.data[r], want) for r in range(p)))


_rng = np.random.default_rng(10)
check(all(_ag_ok(p, list(_rng.permutation(p)), seed=p) for p in range(2, 17)))
check(_ag_ok(8, [0, 2, 4, 6, 7, 5, 3, 1], seed=2))
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": false, "grade_id": "ex3_spec", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## Exercise 3 · Predict with the α-β model (2 points)
#
# **Goal.** `predicted_us`: a dictionary with the modelled time in **microseconds** of each of these, in the
# lesson's model (a ring step costs α + (S/p)/β; no γ):
#
# * `"a"`: a ring **all-reduce** of 256 MiB (2²⁸ bytes) on 8 ranks over NVLink 4 (α = 2 µs, β = 450 GB/s);
# * `"b"`: a ring **all-gather** of 64 KiB (2¹⁶ bytes, the whole gathered buffer) on 16 ranks over InfiniBand
#   NDR (α = 2 µs, β = 50 GB/s);
# * `"c"`: a **naive** (through rank 0) all-reduce of 1 MiB on 8 ranks over PCIe 5 (α = 5 µs, β = 63 GB/s):
#   p − 1 messages of S in, then p − 1 messages of S out.
#
# and `crossover_bytes`: n* = α·β of InfiniBand NDR.
#
# **Evidence to reach**: each within 2 % of the model. Use your counts from exercises 1 and 2: steps × α + bytes
# per rank ÷ β.

# %% nbgrader={"grade": false, "grade_id": "ex3_solution", "locked": false, "schema_version": 3, "solution": true, "task": false}
### BEGIN SOLUTION
def _ring(steps, p, S, alpha_s, beta):
    return steps * (alpha_s + S / p / beta)


predicted_us = {
    "a": _ring(2 * 7, 8, 2**28, 2e-6, 450e9) * 1e6,
    "b": _ring(15, 16, 2**16, 2e-6, 50e9) * 1e6,
    "c": 2 * 7 * (5e-6 + 2**20 / 63e9) * 1e6,
}
crossover_bytes = 2e-6 * 50e9
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "ex3_test", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
"""Check each prediction against the model (within 2 %) and n* of InfiniBand NDR."""
assert set(predicted_us) == {"a", "b", "c"}, "predict a, b and c"
assert all(isinstance(v, (int, float)) and v > 0 for v in predicted_us.values()), "times in µs, positive numbers"
assert isinstance(crossover_bytes, (int, float)) and crossover_bytes > 0, "n* in bytes, a positive number"
### BEGIN HIDDEN TESTS
_L = collectives.model.Link
_want = {
    "a": collectives.model.collective_time_s("all_reduce", "ring", 2**28, 8, _L("nv", 2e-6, 450e9, "lab")),
    "b": collectives.model.collective_time_s("all_gather", "ring", 2**16, 16, _L("ib", 2e-6, 50e9, "lab")),
    "c": collectives.model.collective_time_s("all_reduce", "naive", 2**20, 8, _L("pcie", 5e-6, 63e9, "lab")),
}
check(all(abs(float(predicted_us[k]) - v * 1e6) <= 0.02 * v * 1e6 for k, v in _want.items()))
check(abs(float(crossover_bytes) - 100e3) <= 2e3)
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": false, "grade_id": "wrapup", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## Look at it
#
# Your reduce-scatter on the 8-GPU ring order above, on the microscope: bytes per link. Only the ring's eight
# links carry bytes, each the same amount.

# %% nbgrader={"grade": false, "grade_id": "show_links", "locked": true, "schema_version": 3, "solution": false, "task": false}
try:
    display(collectives.link_bytes_figure(run_ring(ring_reduce_scatter, "reduce_scatter", 8, 4 * 8 * 16,
                                                   [0, 2, 4, 6, 7, 5, 3, 1])))
except NotImplementedError:
    print("(exercise 1 first)")
