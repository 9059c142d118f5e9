# ---
# jupyter:
#   jupytext:
#     cell_metadata_filter: nbgrader,-all
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3 (gpucourse)
#     language: python
#     name: python3
# ---

# %% [markdown] nbgrader={"grade": false, "grade_id": "intro", "locked": true, "schema_version": 3, "solution": false, "task": false}
# # Lab 05 · Occupancy by hand
#
# *About 75 minutes. Goes with lesson 05 "Occupancy".*
#
# How to work: fill in every cell that says `YOUR CODE HERE` (delete the `raise
# NotImplementedError()` line). Don't edit the test cells: they are locked and are graded
# again, with configurations you have not seen, after you submit. Run each test cell after your
# answer; a cell that runs without error has passed its visible checks. In JupyterLab,
# **Kernel → Restart Kernel and Run All Cells** before you submit, then use **Validate**.
#
# Work it out yourself: the course's own calculator (`gpucourse.lessons.occupancy.calculator`) is what the grader
# compares you with, so calling it teaches nothing (and the tests refuse it). No GPU is needed.

# %% nbgrader={"grade": false, "grade_id": "setup", "locked": true, "schema_version": 3, "solution": false, "task": false}
from IPython.display import display

from gpucourse.measure import runtime
from gpucourse.tooling.grading import check
from gpucourse.lessons.occupancy import learner_curve_figure

display(runtime.banner())  # first output: the mode banner

KB = 1024
WARP_SIZE = 32
REGISTERS_PER_SM = 65536  # 64 K 32-bit registers per SM on every part below
SUB_PARTITIONS = 4  # each SM is 4 sub-partitions with a quarter of the registers each
REGISTER_UNIT = 256  # registers are given to a warp in multiples of 256
LIMITER_NAMES = ("registers", "shared memory", "warps", "blocks")

# Per compute capability (CUDA C++ Programming Guide, "Compute Capabilities"):
#   max_warps: warp slots per SM · max_blocks: resident blocks per SM · shared_per_sm: bytes of
#   shared memory per SM (the largest carve-out) · reserved: bytes the driver reserves per block ·
#   granularity: shared memory is given to a block in multiples of this many bytes.
ARCH = {
    cc: {"max_warps": w, "max_blocks": b, "shared_per_sm": smem_kb * KB, "reserved": res, "granularity": gran}
    for cc, w, b, smem_kb, res, gran in [
        ((7, 0), 64, 32, 96, 0, 256),
        ((7, 5), 32, 16, 64, 0, 256),
        ((8, 0), 64, 32, 164, KB, 128),
        ((8, 6), 48, 16, 100, KB, 128),
        ((8, 9), 48, 24, 100, KB, 128),
        ((9, 0), 64, 32, 228, KB, 128),
    ]
}

# %% [markdown] nbgrader={"grade": false, "grade_id": "ex1_spec", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## Exercise 1 · Three configurations with pencil and paper (3 points)
#
# For each configuration, work out the blocks resident per SM, the occupancy (resident warps ÷
# warp slots, in %) and the **set** of limiters (every resource that allows exactly that many
# blocks; ties name several). The rules, from the lesson:
#
# * registers: per warp = registers/thread × 32 rounded **up** to a multiple of 256; one
#   sub-partition holds ⌊(65,536 / 4) ÷ that⌋ warps; the SM holds 4 × as many; blocks =
#   ⌊those warps ÷ warps per block⌋;
# * shared memory: per block = its bytes + `reserved`, rounded **up** to `granularity`; blocks =
#   ⌊`shared_per_sm` ÷ that⌋ (no limit when a block takes nothing);
# * warps: ⌊`max_warps` ÷ warps per block⌋, where warps per block = ⌈threads ÷ 32⌉;
# * blocks: `max_blocks`.
#
# | | cc | threads per block | registers per thread | shared memory per block |
# |---|---|---|---|---|
# | A | 8.6 | 256 | 40 | 8 KB |
# | B | 9.0 | 96 | 90 | 0 |
# | C | 8.0 | 512 | 32 | 40 KB |
#
# Write numbers, not code: e.g. `"A": {"blocks": 3, "occupancy_pct": 25.0, "limiters": {"warps"}}`.

# %% nbgrader={"grade": false, "grade_id": "ex1_solution", "locked": false, "schema_version": 3, "solution": true, "task": false}
### BEGIN SOLUTION
# A: 8 warps; 40 × 32 = 1280 (a multiple of 256) → ⌊16384/1280⌋ = 12 per sub-partition → 48 warps / 8 = 6;
#    warps 48/8 = 6; blocks 16; shared 8192 + 1024 = 9216 → 102400/9216 = 11 → 6 blocks, 48/48 warps.
# B: 3 warps; 90 × 32 = 2880 → 3072 → 5 per sub-partition → 20 warps / 3 = 6; warps 64/3 = 21;
#    shared 0 + 1024 → 228 → 6 blocks, 18/64 warps.
# C: 16 warps; 1024 per warp → 16 per sub-partition → 64 / 16 = 4; warps 64/16 = 4;
#    shared 40960 + 1024 = 41984 → 167936/41984 = 4 exactly → a three-way tie, 64/64 warps.
answers = {
    "A": {"blocks": 6, "occupancy_pct": 100.0, "limiters": {"registers", "warps"}},
    "B": {"blocks": 6, "occupancy_pct": 28.125, "limiters": {"registers"}},
    "C": {"blocks": 4, "occupancy_pct": 100.0, "limiters": {"registers", "shared memory", "warps"}},
}
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "ex1_test", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
"""Check the three hand-computed answers (the values are checked when graded)."""
assert set(answers) == {"A", "B", "C"}, "answer all three configurations"
for key, answer in answers.items():
    assert {"blocks", "occupancy_pct", "limiters"} <= set(answer), f"{key}: blocks, occupancy_pct, limiters?"
    assert set(answer["limiters"]) <= set(LIMITER_NAMES), f"{key}: limiters are among {LIMITER_NAMES}"
### BEGIN HIDDEN TESTS
_answers = freeze(answers, "answers")  # plain data: no code of the notebook runs after this line
expected = {
    "A": (6, 100.0, {"registers", "warps"}),
    "B": (6, 28.125, {"registers"}),
    "C": (4, 100.0, {"registers", "shared memory", "warps"}),
}
for key, (blocks, pct, limiters) in expected.items():
    check(lambda k=key, b=blocks: int(_answers[k]["blocks"]) == b)
    check(lambda k=key, p=pct: abs(float(_answers[k]["occupancy_pct"]) - p) < 0.01)
    check(lambda k=key, names=limiters: set(_answers[k]["limiters"]) == names)
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": false, "grade_id": "ex2_spec", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## Exercise 2 · The calculator, in your own code (4 + 1 points)
#
# Write `occupancy_by_hand(threads_per_block, registers_per_thread, shared_bytes_per_block, cc)`
# for any block of 1–1024 threads, 1–255 registers per thread, 0–48 KB of shared memory and a
# `cc` in `ARCH`. Return a dict with
#
# * `"blocks"`: blocks resident per SM (0 when a single block does not fit),
# * `"warps"`: resident warps per SM,
# * `"occupancy_pct"`: resident warps ÷ `max_warps` × 100,
# * `"limiters"`: the set of resources whose limit equals `"blocks"`.
#
# References: NVIDIA's example (cc 7.0, 128 threads, 37 registers) gives 12 blocks, 48 warps,
# 75 % limited by `{"registers"}`; with 320 threads, 4 blocks, 40 warps, 62.5 %.
# The grader tries about 200 configurations you have not seen, on all six compute capabilities.

# %% nbgrader={"grade": false, "grade_id": "ex2_solution", "locked": false, "schema_version": 3, "solution": true, "task": false}
def occupancy_by_hand(threads_per_block, registers_per_thread, shared_bytes_per_block, cc):
    ### BEGIN SOLUTION
    arch = ARCH[tuple(cc)]
    warps_per_block = -(-threads_per_block // WARP_SIZE)
    per_warp = -(-registers_per_thread * WARP_SIZE // REGISTER_UNIT) * REGISTER_UNIT
    warps_by_registers = (REGISTERS_PER_SM // SUB_PARTITIONS) // per_warp * SUB_PARTITIONS
    per_block = -(-(shared_bytes_per_block + arch["reserved"]) // arch["granularity"]) * arch["granularity"]
    limits = {
        "registers": warps_by_registers // warps_per_block,
        "shared memory": arch["shared_per_sm"] // per_block if per_block else None,
        "warps": arch["max_warps"] // warps_per_block,
        "blocks": arch["max_blocks"],
    }
    blocks = min(v for v in limits.values() if v is not None)
    warps = blocks * warps_per_block
    return {
        "blocks": blocks,
        "warps": warps,
        "occupancy_pct": 100.0 * warps / arch["max_warps"],
        "limiters": {name for name, v in limits.items() if v == blocks},
    }
    ### END SOLUTION


# %% [markdown] nbgrader={"grade": false, "grade_id": "ex2_show_spec", "locked": true, "schema_version": 3, "solution": false, "task": false}
# Your function, drawn: occupancy against block size for a kernel with 37 registers per thread
# and 4 KB of shared memory on cc 8.6. Each marker is shaped and coloured by the limiters you
# named. Does it look like the lesson's first chart?

# %% nbgrader={"grade": false, "grade_id": "ex2_show", "locked": true, "schema_version": 3, "solution": false, "task": false}
try:
    display(learner_curve_figure(occupancy_by_hand, 37, 4 * KB, (8, 6)))
except NotImplementedError:
    print("Write occupancy_by_hand first, then run this cell again.")

# %% nbgrader={"grade": true, "grade_id": "ex2_test_blocks", "locked": true, "points": 4, "schema_version": 3, "solution": false, "task": false}
"""Check blocks, warps and occupancy of occupancy_by_hand against NVIDIA's rules."""
import gpucourse.lessons.occupancy.calculator as _calculator

_names = occupancy_by_hand.__code__.co_names
_used = [occupancy_by_hand.__globals__.get(name) for name in _names]
assert not any("gpucourse" in name for name in _names) and not any(
    obj is _calculator or getattr(obj, "__module__", "") == "gpucourse.lessons.occupancy.calculator" for obj in _used
), "compute it yourself: occupancy_by_hand must not call gpucourse.lessons.occupancy.calculator"
r = occupancy_by_hand(128, 37, 0, (7, 0))
assert (r["blocks"], r["warps"], r["occupancy_pct"]) == (12, 48, 75.0), f"NVIDIA's example: got {r}"
r = occupancy_by_hand(320, 37, 0, (7, 0))
assert (r["blocks"], r["warps"], r["occupancy_pct"]) == (4, 40, 62.5), f"NVIDIA's second example: got {r}"
r = occupancy_by_hand(1024, 32, 0, (9, 0))
assert (r["blocks"], r["occupancy_pct"]) == (2, 100.0), f"1024 threads, 32 registers on cc 9.0: got {r}"
### BEGIN HIDDEN TESTS
FORBIDDEN = {"gpucourse.lessons.occupancy.calculator:occupancy": "the course's calculator is what you are compared with",
             "gpucourse.lessons.occupancy.calculator:best_block_size": "the course's calculator answers it",
             "gpucourse.lessons.occupancy.calculator:register_budget": "the course's calculator answers it"}
import random as _random

from gpucourse.lessons.occupancy.calculator import occupancy as _reference
from gpucourse.tooling.grading import reaches_package as _reaches_the_course

check(not call(_reaches_the_course, occupancy_by_hand))  # on the grader's fresh thread: it reads your function's globals


def _hidden_cases():
    rng = _random.Random(20261)
    cases = [(96, 90, 0, (9, 0)), (256, 32, 32 * KB, (9, 0)), (64, 40, 0, (8, 0)), (32, 96, 0, (9, 0)),
             (100, 64, 0, (9, 0)), (192, 48, 2048, (8, 9)), (128, 32, 20000, (8, 6)), (1024, 65, 0, (9, 0)),
             (64, 16, 12 * KB, (7, 0)), (96, 72, 5000, (7, 5)), (32, 8, 0, (8, 0)), (128, 32, 0, (7, 5))]
    for _ in range(200):
        cases.append((rng.randint(1, 1024), rng.randint(1, 255), rng.choice([0, rng.randint(0, 48 * KB)]),
                      rng.choice(list(ARCH))))
    return cases


_cases = _hidden_cases()
_got = call_each(occupancy_by_hand, _cases)  # frozen, before any expected value exists


def _same_numbers(got, case):
    want = _reference(*case)
    return (int(got["blocks"]), int(got["warps"])) == (want.active_blocks, want.active_warps) and abs(
        float(got["occupancy_pct"]) - want.occupancy_pct) < 1e-6


for _one, _case in zip(_got, _cases, strict=True):
    check(lambda got=_one, case=_case: _same_numbers(got, case))
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "ex2_test_limiters", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
"""Check that occupancy_by_hand names every binding resource (ties included)."""
assert set(occupancy_by_hand(128, 37, 0, (7, 0))["limiters"]) == {"registers"}
assert set(occupancy_by_hand(256, 32, 0, (7, 0))["limiters"]) == {"registers", "warps"}, "a tie names both"
### BEGIN HIDDEN TESTS
FORBIDDEN = {"gpucourse.lessons.occupancy.calculator:occupancy": "the course's calculator is what you are compared with",
             "gpucourse.lessons.occupancy.calculator:best_block_size": "the course's calculator answers it",
             "gpucourse.lessons.occupancy.calculator:register_budget": "the course's calculator answers it"}
import random as _random

from gpucourse.lessons.occupancy.calculator import occupancy as _reference

_rng = _random.Random(7)
_limiter_cases = [(512, 32, 40 * KB, (8, 0)), (64, 32, 0, (8, 9)), (32, 32, 0, (8, 6)), (1024, 65, 0, (8, 0)),
                  (256, 40, 8 * KB, (8, 6)), (128, 32, 0, (7, 0))]
for _ in range(200):
    _shared = _rng.choice([0, _rng.randint(0, 48 * KB)])
    _limiter_cases.append((_rng.randint(1, 1024), _rng.randint(1, 255), _shared, _rng.choice(list(ARCH))))
_got = call_each(occupancy_by_hand, _limiter_cases)
for _one, _case in zip(_got, _limiter_cases, strict=True):
    check(lambda got=_one, case=_case: set(got["limiters"]) == set(_reference(*case).limiters))
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": false, "grade_id": "ex3_spec", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## Exercise 3 · Choose a block size (2 points)
#
# A kernel uses `registers_per_thread` registers and `shared_bytes_per_block` bytes of shared
# memory per block whatever the block size. Write `best_block_size(registers_per_thread,
# shared_bytes_per_block, cc)`: among 32, 64, …, 1024 threads, the **smallest** block size that
# reaches the highest occupancy. (Smaller blocks are easier to schedule at the end of a grid.)
# Reference: 64 registers, no shared memory, cc 8.6 → 64 threads (66.7 %; nothing reaches more).
# Compute it with your `occupancy_by_hand`: a function that calls `gpucourse.lessons.occupancy.calculator` scores 0.

# %% nbgrader={"grade": false, "grade_id": "ex3_solution", "locked": false, "schema_version": 3, "solution": true, "task": false}
def best_block_size(registers_per_thread, shared_bytes_per_block, cc):
    ### BEGIN SOLUTION
    best, best_pct = None, -1.0
    for threads in range(32, 1025, 32):
        pct = occupancy_by_hand(threads, registers_per_thread, shared_bytes_per_block, cc)["occupancy_pct"]
        if pct > best_pct + 1e-9:
            best, best_pct = threads, pct
    return best
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "ex3_test", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
"""Check best_block_size on kernels with different register and shared-memory needs."""
assert best_block_size(64, 0, (8, 6)) == 64
_names = best_block_size.__code__.co_names
assert not any("gpucourse" in name or name == "_calculator" for name in _names), (
    "compute it yourself: best_block_size must not call gpucourse.lessons.occupancy.calculator")
### BEGIN HIDDEN TESTS
FORBIDDEN = {"gpucourse.lessons.occupancy.calculator:occupancy": "the course's calculator is what you are compared with",
             "gpucourse.lessons.occupancy.calculator:best_block_size": "the course's calculator answers it",
             "gpucourse.lessons.occupancy.calculator:register_budget": "the course's calculator answers it"}
from gpucourse.tooling.grading import reaches_package as _reaches_the_course

check(not call(_reaches_the_course, best_block_size))  # on the grader's fresh thread: it reads your function's globals
# Worked out with the rules of exercise 1 (independent of any library), e.g. 40 registers, 16 KB, cc 9.0:
# 1280 registers per warp → at most 48 warps (75 %) whatever the size; 17408 bytes per block → 13 blocks.
# 96 threads: 13 blocks × 3 warps = 39; 128 threads: 12 blocks × 4 warps = 48, the first to reach 75 %.
_cases = [(40, 16 * KB, (9, 0)), (100, 0, (8, 9)), (32, 0, (8, 6)), (72, 6000, (7, 5)), (128, 0, (8, 0)),
          (24, 30 * KB, (9, 0)), (56, 2 * KB, (7, 0)), (255, 0, (9, 0)), (64, 40000, (8, 6)), (20, 0, (7, 5))]
_got = call_each(best_block_size, _cases)
for _one, expected in zip(_got, [128, 32, 96, 128, 32, 512, 64, 32, 512, 64], strict=True):
    check(_one == expected)
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": false, "grade_id": "ex4_spec", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## Exercise 4 · A register budget (2 points)
#
# You launch blocks of `threads_per_block` threads with no shared memory and want at least
# `target_pct` % occupancy. Write `register_budget(threads_per_block, target_pct, cc)`: the
# **largest** registers per thread (1–255) that still reaches the target — the number you
# would give `cuda.jit(max_registers=...)`. Return `None` if not even 1 register reaches it.
# Reference: 256 threads, 50 %, cc 8.0 → 64 registers.
#
# Remember the lesson's warning: a cap below what the kernel needs makes the compiler spill.
# Compute it with your `occupancy_by_hand`: a function that calls `gpucourse.lessons.occupancy.calculator` scores 0.

# %% nbgrader={"grade": false, "grade_id": "ex4_solution", "locked": false, "schema_version": 3, "solution": true, "task": false}
def register_budget(threads_per_block, target_pct, cc):
    ### BEGIN SOLUTION
    for regs in range(255, 0, -1):
        if occupancy_by_hand(threads_per_block, regs, 0, cc)["occupancy_pct"] >= target_pct - 1e-9:
            return regs
    return None
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "ex4_test", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
"""Check register_budget for several block sizes, targets and compute capabilities."""
assert register_budget(256, 50, (8, 0)) == 64
_names = register_budget.__code__.co_names
assert not any("gpucourse" in name or name == "_calculator" for name in _names), (
    "compute it yourself: register_budget must not call gpucourse.lessons.occupancy.calculator")
### BEGIN HIDDEN TESTS
FORBIDDEN = {"gpucourse.lessons.occupancy.calculator:occupancy": "the course's calculator is what you are compared with",
             "gpucourse.lessons.occupancy.calculator:best_block_size": "the course's calculator answers it",
             "gpucourse.lessons.occupancy.calculator:register_budget": "the course's calculator answers it"}
from gpucourse.tooling.grading import reaches_package as _reaches_the_course

check(not call(_reaches_the_course, register_budget))  # on the grader's fresh thread: it reads your function's globals
# Worked out with the rules of exercise 1, e.g. 128 threads, 100 %, cc 8.6: 48 warps = 12 per sub-partition
# → at most 16384 / 12 = 1365 registers per warp → 1280 (a multiple of 256) → 40 per thread.
_cases = [(128, 100, (8, 6)), (1024, 50, (9, 0)), (192, 75, (8, 9)), (96, 60, (7, 5)), (64, 100, (9, 0)),
          (320, 62.5, (7, 0)), (512, 100, (8, 0)), (1024, 100, (7, 5)), (32, 10, (8, 0))]
_got = call_each(register_budget, _cases)
for _one, expected in zip(_got, [40, 64, 56, 80, 32, 48, 32, 64, 255], strict=True):
    check(_one == expected)
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": false, "grade_id": "ex5_spec", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## Exercise 5 · What occupancy buys a copy: Little's law, step by step (3 points)
#
# Lesson 05's copy runs a grid of exactly the resident blocks; each warp keeps `loads_per_warp`
# independent 128-byte loads in flight (ILP), and each load has a 128-byte store behind it. By
# Little's law, DRAM stays busy only while bytes in flight = bandwidth × latency (GB/s = bytes per ns).
# Write the model as three functions, each one step:
#
# 1. `warp_copies_needed(bandwidth_gbps, latency_ns, sm_count)`: how many warp copies (one load and its
#    store) each SM must keep in flight to keep DRAM busy;
# 2. `copy_speed_share(warps, loads_per_warp, copies_needed)`: the copy's speed as a share of the
#    bandwidth (0 to 1) with `warps` resident warps per SM;
# 3. `copy_speed_ratio(bandwidth_gbps, latency_ns, sm_count, warps_low, warps_high, loads_per_warp)`: the
#    predicted speed with `warps_low` resident warps per SM ÷ the speed with `warps_high`.
#
# Reference (the H200's 4,271 GB/s copy ceiling and 132 SMs, with 876 ns: the latency the first
# attempt's recorded ILP-4 point implies; the lesson predicts with the 823 ns calibrated on lesson 03's
# copy): 16 vs 64 warps → 0.25 with one load per warp, ≈ 0.578 with four (that attempt's recorded
# 2,470 GB/s over the 4,271 ceiling). The grader checks each step on inputs you have not seen
# (other GPUs, other ILPs), and that no step says fewer warps are faster. Compute it yourself: calling
# `gpucourse` scores 0.

# %% nbgrader={"grade": false, "grade_id": "ex5_solution", "locked": false, "schema_version": 3, "solution": true, "task": false}
def warp_copies_needed(bandwidth_gbps, latency_ns, sm_count):
    ### BEGIN SOLUTION
    return bandwidth_gbps / sm_count * latency_ns / 256  # bytes in flight per SM ÷ 256 B per warp copy
    ### END SOLUTION


def copy_speed_share(warps, loads_per_warp, copies_needed):
    ### BEGIN SOLUTION
    return min(1.0, warps * loads_per_warp / copies_needed)  # the cap comes after the loads are counted
    ### END SOLUTION


def copy_speed_ratio(bandwidth_gbps, latency_ns, sm_count, warps_low, warps_high, loads_per_warp):
    ### BEGIN SOLUTION
    needed = warp_copies_needed(bandwidth_gbps, latency_ns, sm_count)
    return copy_speed_share(warps_low, loads_per_warp, needed) / copy_speed_share(warps_high, loads_per_warp, needed)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "ex5_test_steps", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
"""Check each step of the model: the warp copies an SM needs, and the share of the bandwidth they buy."""
assert abs(warp_copies_needed(4271, 876, 132) - 110.7) < 0.1, "4,271 GB/s × 876 ns ÷ 132 SMs, in 256-B warp copies"
assert abs(copy_speed_share(16, 1, 110.7) - 16 / 110.7) < 1e-9, "16 warps, one load each, of 110.7 needed"
assert 0 < copy_speed_share(64, 4, 110.7) <= 1, "a share of the bandwidth is at most 1"
### BEGIN HIDDEN TESTS
FORBIDDEN = {"gpucourse.lessons.occupancy.model:SpeedModel": "it is the model you are asked to write",
             "gpucourse.lessons.occupancy.model:speed_model": "it is the model you are asked to write"}
import random as _random

_rng = _random.Random(5052)
_needed_cases = [(_rng.uniform(100, 9000), _rng.uniform(200, 1500), _rng.randint(8, 160)) for _ in range(100)]
_share_cases = [(w, ilp, n) for w, ilp, n in [(16, 4, 40.0), (8, 8, 32.0), (32, 2, 48.0), (12, 1, 12.1)]]
_share_cases += [(_rng.randint(1, 64), _rng.choice([1, 2, 4, 8]), _rng.uniform(4, 300)) for _ in range(200)]
_got_needed = call_each(warp_copies_needed, _needed_cases)
_got_share = call_each(copy_speed_share, _share_cases)
for _one, (_gbps, _ns, _sms) in zip(_got_needed, _needed_cases, strict=True):
    check(lambda got=_one, want=_gbps / _sms * _ns / 256: abs(float(got) - want) < 1e-6 * want)
for _one, (_warps, _ilp, _n) in zip(_got_share, _share_cases, strict=True):
    # the cap applies to warps × loads in flight: capping the warps first would pass 1 (or a lower
    # occupancy would look faster); 16 warps × 4 loads of 40 needed is exactly the bandwidth
    check(abs(float(_one) - min(1.0, _warps * _ilp / _n)) < 1e-9)
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "ex5_test", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
"""Check copy_speed_ratio against Little's law, below and above the bytes a GPU needs in flight."""
assert abs(copy_speed_ratio(4271, 876, 132, 16, 64, 1) - 0.25) < 1e-3, "one load per warp: 0.25"
assert abs(copy_speed_ratio(4271, 876, 132, 16, 64, 4) - 0.578) < 2e-3, "four loads per warp: 0.578"
_names = copy_speed_ratio.__code__.co_names
assert not any("gpucourse" in name for name in _names), "compute it yourself: copy_speed_ratio must not call gpucourse"
### BEGIN HIDDEN TESTS
FORBIDDEN = {"gpucourse.lessons.occupancy.model:SpeedModel": "it is the model you are asked to write",
             "gpucourse.lessons.occupancy.model:speed_model": "it is the model you are asked to write"}
import random as _random

from gpucourse.lessons.occupancy.model import SpeedModel as _SpeedModel
from gpucourse.tooling.grading import reaches_package as _reaches_the_course

check(not call(_reaches_the_course, copy_speed_ratio))  # on the grader's fresh thread: it reads your function's globals
# The course's model of lesson 05 (gpucourse.lessons.occupancy.model.SpeedModel) on several GPUs' inputs,
# then a randomized sweep; a lower occupancy is never faster.
_cases = [(4271, 876, 132, 16, 64, 1), (3350, 600, 132, 8, 64, 4), (300, 600, 58, 12, 48, 1),
          (320, 600, 40, 8, 32, 2), (8000, 700, 148, 32, 64, 4), (1008, 500, 128, 6, 48, 1),
          (2000, 900, 114, 64, 64, 1), (1555, 650, 108, 4, 64, 8)]
_rng = _random.Random(5053)
for _ in range(300):
    _high = _rng.randint(2, 64)
    _cases.append((_rng.uniform(100, 9000), _rng.uniform(200, 1500), _rng.randint(8, 160), _rng.randint(1, _high),
                   _high, _rng.choice([1, 2, 3, 4, 8])))
_got = call_each(copy_speed_ratio, _cases)
for _one, (_gbps, _ns, _sms, _low, _high, _ilp) in zip(_got, _cases, strict=True):
    _model = _SpeedModel("memory", "x", _gbps / _sms * _ns / 256, _high, "")
    _want = float(_model.relative_speed(_low, _ilp) / _model.relative_speed(_high, _ilp))
    check(lambda got=_one, w=_want: abs(float(got) - w) < 1e-6 and float(got) <= 1 + 1e-12)
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": false, "grade_id": "ex6_spec", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## Exercise 6 · The first attempt: which assumption failed? (2 points)
#
# The first version of lesson 05's experiment launched the obvious copy: one element per thread, one
# 64-thread block per 64 elements. The cell below shows what it measured on an H200 (read from the
# course's recordings). The model of exercise 5, with the latency taken from this very recording's ILP-4
# point at 25 % (`FIRST_LATENCY_NS`), predicts the ILP-1 copy at 25 % runs at a quarter of its speed at
# 100 %. Read the model backwards:
#
# 1. Write `warps_in_flight(gbps, latency_ns, sm_count, loads_per_warp)`: the warps per SM that must have
#    been keeping a copy in flight to deliver `gbps` (the inverse of exercise 5's steps, below the cap).
# 2. With it, fill `first_attempt`: the warps per SM the ILP-1 copy really kept in flight at the
#    calculator's 25 % and at its 100 % (from the recording's GB/s and `FIRST_LATENCY_NS`), and which
#    assumption of the model failed, one of `ASSUMPTIONS`.

# %% nbgrader={"grade": false, "grade_id": "ex6_setup", "locked": true, "schema_version": 3, "solution": false, "task": false}
from gpucourse.lessons.occupancy.model import FIRST_ATTEMPT_SWEEP, recorded_latency_ns
from gpucourse.measure import reference

first_recording = reference.load(FIRST_ATTEMPT_SWEEP, "nvidia-h200")
FIRST_SM_COUNT = int(first_recording.provenance["device"]["sm_count"])
FIRST_LATENCY_NS = recorded_latency_ns(first_recording)
display(first_recording.data[["kernel", "ilp", "active_blocks", "threads_per_block", "occupancy_pct", "gbps"]])
print(f"{first_recording.device}, {FIRST_SM_COUNT} SMs; latency from its ILP-4 point at 25 %: {FIRST_LATENCY_NS:.0f} ns")
ASSUMPTIONS = {
    "latency": "the loaded DRAM latency is the same at both occupancies",
    "bandwidth": "the copy can reach the 4,271 GB/s ceiling",
    "resident warps": "the warps resident on an SM are the calculator's (theoretical) occupancy",
    "bytes per warp": "each warp keeps one 128-B load and its store in flight per load",
}

# %% nbgrader={"grade": false, "grade_id": "ex6_solution", "locked": false, "schema_version": 3, "solution": true, "task": false}
def warps_in_flight(gbps, latency_ns, sm_count, loads_per_warp):
    ### BEGIN SOLUTION
    return gbps / sm_count * latency_ns / (256 * loads_per_warp)
    ### END SOLUTION


### BEGIN SOLUTION
_ilp1 = first_recording.data[first_recording.data.kernel == "copy"].set_index("occupancy_pct")
first_attempt = {
    "warps_at_25": warps_in_flight(float(_ilp1.gbps[25.0]), FIRST_LATENCY_NS, FIRST_SM_COUNT, 1),
    "warps_at_100": warps_in_flight(float(_ilp1.gbps[100.0]), FIRST_LATENCY_NS, FIRST_SM_COUNT, 1),
    # about 22 warps in flight at both: the SM never held the 64 warps the calculator allows (tiny blocks
    # retire as fast as the GPU starts them), so the occupancy achieved was not the theoretical one
    "failed": "resident warps",
}
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "ex6_test", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
"""Check warps_in_flight and the diagnosis of the first attempt."""
assert abs(warps_in_flight(4271, 876, 132, 1) - warp_copies_needed(4271, 876, 132)) < 1e-6, (
    "at the ceiling, the warps in flight are the warp copies needed")
assert set(first_attempt) == {"warps_at_25", "warps_at_100", "failed"}, "three entries"
assert first_attempt["failed"] in ASSUMPTIONS, f"one of {sorted(ASSUMPTIONS)}"
### BEGIN HIDDEN TESTS
import random as _random

from gpucourse.lessons.occupancy.model import FIRST_ATTEMPT_SWEEP as _SWEEP
from gpucourse.lessons.occupancy.model import recorded_latency_ns as _latency
from gpucourse.measure import reference as _reference

_answer = freeze(first_attempt, "first_attempt")
_rng = _random.Random(5061)
_cases = [(_rng.uniform(50, 9000), _rng.uniform(200, 1500), _rng.randint(8, 160), _rng.choice([1, 2, 4, 8]))
          for _ in range(100)]
_got = call_each(warps_in_flight, _cases)
for _one, (_gbps, _ns, _sms, _ilp) in zip(_got, _cases, strict=True):
    check(lambda got=_one, want=_gbps / _sms * _ns / (256 * _ilp): abs(float(got) - want) < 1e-6 * want)
_recording = _reference.load(_SWEEP, "nvidia-h200")  # the grader's own reading, not the notebook's names
_sms, _ns = int(_recording.provenance["device"]["sm_count"]), _latency(_recording)
_rows = _recording.data[_recording.data.kernel == "copy"].set_index("occupancy_pct")
for _key, _pct in (("warps_at_25", 25.0), ("warps_at_100", 100.0)):
    _want = float(_rows.gbps[_pct]) / _sms * _ns / 256
    check(lambda got=_answer[_key], want=_want: abs(float(got) - want) < 0.01 * want)
check(_answer["failed"] == "resident warps")
### END HIDDEN TESTS
