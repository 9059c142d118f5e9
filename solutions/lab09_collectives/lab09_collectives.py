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
# **ring all-gather** for any ring order on the collective microscope, then **predict** what the lesson's
# formulas do not say outright: two rings at once, and the busbw of a reduction done inside the switch.
#
# How you are graded (never on wall time):
#
# * **by the messages, replayed**: the world notes every message it delivers. The grader sends the same
#   messages again on a fresh world with the same inputs, and only that replay counts: it must end with
#   NumPy's values. Values written straight into the buffers count for nothing;
# * **every message**: to the next rank of *the ring order*, one whole chunk the receiver needs, p − 1 steps,
#   (p − 1)/p · S bytes per rank. A version with the right values that sends more (the whole buffer each
#   step, say) earns 0. Use only the `world` you are given: the course's own rings (in rank order) and its
#   runners, however they are reached, earn 0;
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
from gpucourse.tooling.grading import check, tripwire
from gpucourse.lessons import collectives


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
# * Follow one chunk: the rank that must end with it complete receives it last, so where does its journey start,
#   and where is it after s steps? Every position sends in every step, each a different chunk.
# * Queue all p sends of a step, then call `world.step()` once. Check your answer on p = 3 by hand first.

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
"""Replay the messages your world delivered on a fresh world: the values, every message, steps and bytes."""
for p, order in ((4, [0, 1, 2, 3]), (4, [0, 2, 3, 1]), (5, [4, 1, 0, 3, 2])):
    why = collectives.judge_ring(ring_reduce_scatter, "reduce_scatter", order, 4 * p * 8)
    assert why is None, f"p = {p}, order {order}: {why}"
### BEGIN HIDDEN TESTS
_rng = np.random.default_rng(9)
_cases = [(list(_rng.permutation(p)), 4 * p * 6, p) for p in range(2, 17)] + [([0, 2, 4, 6, 7, 5, 3, 1], 4 * 8 * 6, 1)]
with tripwire.armed(collectives.RING_FORBIDDEN) as _trips:
    # the judge runs your ring on the grader's fresh thread; its verdicts come back frozen (plain text or None)
    _why = call_each(collectives.judge_ring, [(ring_reduce_scatter, "reduce_scatter", _o, _n, _s) for _o, _n, _s in _cases])
check(not _trips.tripped)
check(all(_w is None for _w in _why))
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
# * At step 0 a position can only pass on what it already holds; after that, what it received last is what
#   its next neighbour lacks. Copy, do not add.
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
"""Replay the messages your world delivered on a fresh world: the values, every message, steps and bytes."""
for p, order in ((4, [0, 1, 2, 3]), (4, [0, 2, 3, 1]), (5, [4, 1, 0, 3, 2])):
    why = collectives.judge_ring(ring_all_gather, "all_gather", order, 4 * p * 8)
    assert why is None, f"p = {p}, order {order}: {why}"
### BEGIN HIDDEN TESTS
_rng = np.random.default_rng(10)
_cases = [(list(_rng.permutation(p)), 4 * p * 6, p) for p in range(2, 17)] + [([0, 2, 4, 6, 7, 5, 3, 1], 4 * 8 * 6, 2)]
with tripwire.armed(collectives.RING_FORBIDDEN) as _trips:
    # the judge runs your ring on the grader's fresh thread; its verdicts come back frozen (plain text or None)
    _why = call_each(collectives.judge_ring, [(ring_all_gather, "all_gather", _o, _n, _s) for _o, _n, _s in _cases])
check(not _trips.tripped)
check(all(_w is None for _w in _why))
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": false, "grade_id": "ex3_spec", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## Exercise 3 · Predict what the formulas do not say (2 points)
#
# The lesson's model gives one ring's time: p − 1 steps, each α + (S/p)/β (no γ here). NVLink 4 on 8 GPUs:
# α = 2 µs, β = 450 GB/s **in each direction at once** (a link is full duplex). One ring uses each link in
# one direction only. **Goal.** Predict, in the lesson's model:
#
# * `"two_rings_us"`: a **reduce-scatter** of 256 MiB (2²⁸ bytes) on the 8 GPUs run as **two rings at once**,
#   in opposite directions, each ring reducing half of the buffer (NCCL builds several rings for this
#   reason). Microseconds.
# * `"two_rings_bytes"`: the smallest buffer S (bytes) at which the two rings make that reduce-scatter **1.5×
#   faster** than one ring, on the same 8 GPUs and link.
# * `"nvls_busbw_gbps"`: an all-reduce of 1 GiB (2³⁰ bytes) on the 8 GPUs **inside the switch** (NVLS, lesson
#   09 part 2), idealised: each GPU's link carries its S once to the switch and the reduced S once back, both
#   directions at the same time at β, plus one α. nccl-tests reports its busbw as for any all-reduce: what
#   number (GB/s) does it print?
#
# **Evidence to reach**: each within 2 % of the model. Compare the last one with β, and say why a busbw above
# the line rate is no paradox.
#
# *Hints: in the collapsed cell below. Try without them first.*

# %% [markdown] jupyter={"source_hidden": true} nbgrader={"grade": false, "grade_id": "ex3_hints", "locked": true, "schema_version": 3, "solution": false, "task": false}
# **Hints for exercise 3**
#
# * Two rings: the step count does not change; what does one step's message on a link hold now?
# * The 1.5× buffer: write both times as a function of S and solve; below it, which term of a step dominates?
# * NVLS: the time first (what crosses one GPU's link, each way), then algbw = S / t, then nccl-tests' factor for
#   an all-reduce, which does not know that the switch did the adding.

# %% nbgrader={"grade": false, "grade_id": "ex3_solution", "locked": false, "schema_version": 3, "solution": true, "task": false}
### BEGIN SOLUTION
_p, _alpha_s, _beta = 8, 2e-6, 450e9
predicted = {
    # two rings: the same p − 1 steps, each link carries S/(2p) each way in a step
    "two_rings_us": (_p - 1) * (_alpha_s + 2**28 / (2 * _p) / _beta) * 1e6,
    # (α + x) = 1.5 (α + x/2) with x = S/(pβ): x = 2α, S = 2αpβ
    "two_rings_bytes": 2 * _alpha_s * _p * _beta,
    # t = α + S/β; busbw = S/t × 2(p − 1)/p: above β, since each GPU sent S, not 2(p − 1)/p · S
    "nvls_busbw_gbps": 2**30 / (_alpha_s + 2**30 / _beta) * 2 * (_p - 1) / _p / 1e9,
}
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "ex3_test", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
"""Check each prediction against the model, within 2 %."""
assert set(predicted) == {"two_rings_us", "two_rings_bytes", "nvls_busbw_gbps"}, "predict the three numbers"
assert all(type(v) in (int, float) and v > 0 for v in predicted.values()), "each a positive number"
assert predicted["nvls_busbw_gbps"] > 450, "busbw is algbw × 2(p − 1)/p: is your NVLS busbw a busbw?"
### BEGIN HIDDEN TESTS
_predicted = freeze(predicted, "predicted")  # plain data before any expected value exists
_got = {k: float(v) for k, v in _predicted.items() if type(v) in (int, float)}
_nv = collectives.model.Link("nvlink4", 2e-6, 450e9, "lab 09")


def _gain(half_bytes):
    """One ring's time on 2·half over two rings' (each a ring on half) in the model."""
    return (collectives.model.collective_time_s("reduce_scatter", "ring", 2 * half_bytes, 8, _nv)
            / collectives.model.collective_time_s("reduce_scatter", "ring", half_bytes, 8, _nv))


_low, _high = 4, 1 << 40  # the gain grows with S: bisect for 1.5 on the model itself
while _high - _low > 1:
    _mid = (_low + _high) // 2
    _low, _high = (_mid, _high) if _gain(_mid) < 1.5 else (_low, _mid)
_want = {
    "two_rings_us": collectives.model.collective_time_s("reduce_scatter", "ring", 2**27, 8, _nv) * 1e6,
    "two_rings_bytes": 2 * _high,
    "nvls_busbw_gbps": collectives.model.busbw_bytes_per_s("all_reduce", 2**30, 8, 2e-6 + 2**30 / 450e9) / 1e9,
}
check(set(_got) == set(_want))
check(all(abs(_got[k] - v) <= 0.02 * v for k, v in _want.items()))
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
