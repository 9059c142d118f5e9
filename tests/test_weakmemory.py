"""The race scheduler and the weak-memory model (gpucourse.lessons.races.weakmemory): litmus outcomes, kernels
under adversarial schedules (the microscope's scheduler), lost-update and stale-read accounting, bad input."""

from collections import Counter

import numpy as np
import pytest

from gpucourse.errors import InvalidConfig
from gpucourse.lessons.races import weakmemory
from gpucourse.measure import runtime
from gpucourse.viz import charts

cuda = runtime.cuda  # kernels reach `cuda` through a module-level name

# What the model must allow (weak outcome reachable) and forbid, test by test: the explicit list.
# The fence.acq_rel rows follow the PTX ISA's release/acquire patterns (a strong flag synchronises, a
# weak one does not) and its Fence-SC axiom (only fence.sc forbids store buffering).
MODEL_ALLOWS = {"MP", "MP+fence (producer only)", "MP+fence (consumer only)", "MP+threadfence_block",
                "MP+atomic flag", "SB", "MP+acq_rel fences", "SB+acq_rel fences"}
MODEL_FORBIDS = {"MP+fences", "MP+atomic flag+fences", "MP, same block", "SB+fences", "LB", "CoRR",
                 "MP+acq_rel fences+atomic flag"}
# Where the model is stronger than PTX (the PTX column says "allowed", the model forbids): by hand from
# the PTX ISA, "Memory Consistency Model".
STRONGER_THAN_PTX = {"MP, same block", "LB", "CoRR"}


@cuda.jit
def counter_kernel(counter):
    counter[0] += 1


@cuda.jit
def histogram_kernel(values, counts):
    start, stride, n = cuda.grid(1), cuda.gridsize(1), counts.size
    for i in range(start, values.size, stride):
        b = min(int(values[i] * n), n - 1)
        counts[b] += 1


@cuda.jit
def mp(data, flag, out, fence, block_scope):
    if cuda.blockIdx.x == 0:
        data[0] = 1
        if fence:
            if block_scope:
                cuda.threadfence_block()
            else:
                cuda.threadfence()
        flag[0] = 1
    else:
        seen = flag[0]
        if fence:
            if block_scope:
                cuda.syncthreads()
            else:
                cuda.threadfence()
        out[0] = seen
        out[1] = data[0]


@cuda.jit
def mp_spin(data, flag, out, fence):
    """fence: 0 none, 1 threadfence on both sides, 2 block scope (threadfence_block / syncthreads)."""
    if cuda.blockIdx.x == 0:
        data[0] = 1
        if fence == 1:
            cuda.threadfence()
        elif fence == 2:
            cuda.threadfence_block()
        flag[0] = 1
    else:
        polls = 0
        seen = flag[0]
        while seen == 0 and polls < 100:
            seen = flag[0]
            polls += 1
        if fence == 1:
            cuda.threadfence()
        elif fence == 2:
            cuda.syncthreads()
        out[0] = seen
        out[1] = data[0]


@cuda.jit
def uncapped_wait(flag, out):
    if cuda.blockIdx.x == 1:
        flag[0] = 1
    else:
        while cuda.atomic.add(flag, 0, 0) == 0:
            pass
        out[0] = 1


@cuda.jit
def half_barrier(out):
    if cuda.threadIdx.x < 2:
        cuda.syncthreads()
    out[cuda.threadIdx.x] = 1


@cuda.jit
def read_uninitialised_shared(out):
    s = cuda.shared.array(4, np.int32)
    out[cuda.threadIdx.x] = s[cuda.threadIdx.x]


def test_litmus_model_matches_the_explicit_list():
    assert set(weakmemory.LITMUS) == MODEL_ALLOWS | MODEL_FORBIDS
    for name, test in weakmemory.LITMUS.items():
        allowed = weakmemory.allows(name, "weak")
        assert allowed == (name in MODEL_ALLOWS), name
        assert test.model == ("allowed" if allowed else "forbidden"), name
        assert not weakmemory.allows(name, "sc"), f"{name}: sequential consistency forbids every weak outcome"


def test_the_model_is_stronger_than_ptx_exactly_where_it_says():
    stronger = {name for name, t in weakmemory.LITMUS.items() if t.model == "forbidden" and t.ptx.startswith("allowed")}
    assert stronger == STRONGER_THAN_PTX
    weaker = {name for name, t in weakmemory.LITMUS.items() if t.model == "allowed" and not t.ptx.startswith("allowed")}
    assert weaker == set(), "the model never allows what PTX forbids"
    assert "CoRR" in weakmemory.__doc__ and "stronger" in weakmemory.__doc__


def test_release_acquire_fences_need_a_strong_flag_and_do_not_forbid_store_buffering():
    """fence.acq_rel vs fence.sc: the case where the per-block release/acquire views decide the outcome."""
    outcomes = lambda name: {tuple(v for _, v in o) for o in weakmemory.explore(name)}  # noqa: E731
    assert outcomes("SB+acq_rel fences") == {(0, 0), (0, 1), (1, 0), (1, 1)}
    assert outcomes("SB+fences") == {(0, 1), (1, 0), (1, 1)}
    assert (1, 0) in outcomes("MP+acq_rel fences")
    assert outcomes("MP+acq_rel fences+atomic flag") == {(0, 0), (0, 1), (1, 1)}

    def handoff(kind, strong_write, strong_read=None):
        strong_read = strong_write if strong_read is None else strong_read
        m = weakmemory.WeakMemory(weakmemory.StalestChooser(), lambda loc: 0)
        m.store(0, "data", 1)
        m.fence(0, "gpu", kind)
        if strong_write:
            m.rmw(0, "flag", lambda v: 1)
        else:
            m.store(0, "flag", 1)
        read = (lambda: m.rmw(1, "flag", lambda v: v)[0]) if strong_read else (lambda: m.load(1, "flag")[0])
        while read() != 1:
            pass
        m.fence(1, "gpu", kind)
        return m.load(1, "data")[0]

    assert handoff("acq_rel", strong_write=True) == 1, "release pattern + acquire pattern synchronise"
    assert handoff("acq_rel", strong_write=False) == 0, "a weak flag carries no release"
    assert handoff("acq_rel", strong_write=True, strong_read=False) == 0, "a weak read acquires nothing"
    assert handoff("acq_rel", strong_write=False, strong_read=True) == 0, "a weak write releases nothing"
    assert handoff("sc", strong_write=False) == 1, "two fence.sc are ordered: the weak flag works"
    assert handoff("sc", strong_write=True) == 1


def test_the_model_only_adds_behaviours_to_sequential_consistency():
    for name in weakmemory.LITMUS:
        sc, weak = set(weakmemory.explore(name, "sc")), set(weakmemory.explore(name, "weak"))
        assert sc <= weak, name


def test_message_passing_outcomes_exactly():
    outcomes = lambda name: {tuple(v for _, v in o) for o in weakmemory.explore(name)}  # noqa: E731
    assert outcomes("MP") == {(0, 0), (0, 1), (1, 0), (1, 1)}
    assert outcomes("MP+fences") == {(0, 0), (0, 1), (1, 1)}
    assert outcomes("CoRR") == {(0, 0), (0, 1), (1, 1)}


def test_sampling_is_seeded_and_stays_inside_the_allowed_outcomes():
    a = weakmemory.sample("MP", runs=300, seed=4)
    assert a == weakmemory.sample("MP", runs=300, seed=4)
    assert set(a) <= set(weakmemory.explore("MP"))
    assert sum(a.values()) == 300
    assert ((("r0", 1), ("r1", 0))) in a  # the weak outcome shows up in 300 random schedules
    assert all(dict(o) != {"r0": 1, "r1": 0} for o in weakmemory.sample("MP+fences", runs=300, seed=4))


def test_litmus_table_columns_and_verdicts():
    table = weakmemory.litmus_table()
    assert list(table.columns[:7]) == ["test", "block of each thread", "programs", "weak outcome",
                                       "plain simulator (SC)", "this model", "PTX memory model"]
    row = table.set_index("test").loc["MP+fences"]
    assert row["this model"] == "forbidden" and row["PTX memory model"].startswith("forbidden")
    assert table.set_index("test").loc["LB", "PTX memory model"].startswith("allowed")


def test_weak_memory_rules_directly():
    memory = weakmemory.WeakMemory(weakmemory.StalestChooser(), lambda loc: 0)
    memory.store(0, "data", 1)
    memory.store(0, "flag", 1)
    assert memory.load(0, "data")[0] == 1, "a block sees its own writes"
    assert memory.load(1, "flag")[0] == 0, "another block may read the old value first"
    assert memory.load(1, "flag")[0] == 1, "…but values arrive (stalest-first never repeats a stale read)"
    assert memory.load(1, "flag")[0] == 1, "coherence: never back in time"
    assert memory.load(1, "data")[0] == 0, "no fences: seeing the flag says nothing about the data"
    fenced = weakmemory.WeakMemory(weakmemory.StalestChooser(), lambda loc: 0)
    fenced.store(0, "data", 1)
    fenced.fence(0, "gpu")
    fenced.store(0, "flag", 1)
    while fenced.load(1, "flag")[0] != 1:
        pass
    fenced.fence(1, "gpu")
    assert fenced.load(1, "data") == (1, 1, 1), "fence on both sides: the flag carries the data"
    assert fenced.rmw(2, "data", lambda v: v + 1) == (1, 2), "atomics act on the newest value"
    assert fenced.final() == {"data": 2, "flag": 1}


def test_the_simulator_hides_races_the_scheduler_shows_them():
    counter = np.zeros(1, np.int32)
    counter_kernel[4, 64](counter)
    assert counter[0] == 256  # Numba's simulator: one thread at a time
    for schedule in ("round-robin", "random"):
        counter = np.zeros(1, np.int32)
        report = weakmemory.run_kernel(counter_kernel, 4, 64, counter, schedule=schedule)
        assert counter[0] < 256
        assert len(report.lost_updates()) == 256 - counter[0]
    counter = np.zeros(1, np.int32)
    weakmemory.run_kernel(counter_kernel, 4, 64, counter, schedule="sequential")
    assert counter[0] == 256


def test_lost_updates_account_for_every_missing_count():
    values = np.random.default_rng(0).random(200).astype(np.float32)
    for seed in (0, 1):
        counts = np.zeros(4, np.int32)
        report = weakmemory.run_kernel(histogram_kernel, 2, 32, values, counts, schedule="random", seed=seed,
                                       memory="weak")
        lost = report.lost_updates()
        assert 0 < len(lost) == 200 - counts.sum()
        assert report.microscope is not None and report.microscope.race_count() > 0
        row = lost.iloc[0]
        assert row["array"] == "counts" and row.lost_thread != row.thread and row.load_step < row.store_step


def test_same_seed_same_interleaving_other_seed_another():
    values = np.random.default_rng(1).random(64).astype(np.float32)
    runs = []
    for seed in (3, 3, 4):
        counts = np.zeros(2, np.int32)
        runs.append(weakmemory.run_kernel(histogram_kernel, 2, 8, values, counts, seed=seed))
    assert runs[0].events.equals(runs[1].events)
    # another seed reorders the same accesses: 64 values / 16 threads = 4 each × (load value, load + store count)
    assert Counter(runs[2].events.thread) == Counter(runs[0].events.thread) == {t: 4 * 3 for t in range(16)}
    assert list(runs[0].events.thread) != list(runs[2].events.thread)


def test_message_passing_kernel_under_the_model():
    def run(kernel, *flags, schedule="random", seed=0):
        data, flag, out = np.zeros(1, np.int32), np.zeros(1, np.int32), np.full(2, -1, np.int32)
        weakmemory.run_kernel(kernel, 2, 1, data, flag, out, *flags, schedule=schedule, seed=seed, memory="weak")
        return tuple(int(v) for v in out)

    # round-robin = stalest reads: a polling reader sees the flag arrive, and still the old data
    assert run(mp_spin, 0, schedule="round-robin") == (1, 0)
    assert run(mp_spin, 2, schedule="round-robin") == (1, 0), "block scope orders nothing across blocks"
    assert run(mp_spin, 1, schedule="round-robin") == (1, 1)
    fenced = Counter(run(mp, 1, 0, seed=s) for s in range(20))
    assert fenced[(1, 0)] == 0 and fenced[(1, 1)] > 0, "fences on both sides: never the weak outcome"
    assert Counter(run(mp, 0, 0, seed=s) for s in range(40))[(1, 0)] > 0, "no fences: the weak outcome shows"


def test_weak_memory_hook_plugs_into_the_microscope():
    from gpucourse import microscope

    data, flag, out = np.zeros(1, np.int32), np.zeros(1, np.int32), np.full(2, -1, np.int32)
    hook = weakmemory.WeakMemoryHook("weak")
    report = microscope.trace(mp_spin, 2, 1, data, flag, out, 0, schedule="round-robin", memory=hook)
    assert tuple(out) == (1, 0) and tuple(data) == (1,) and tuple(flag) == (1,)
    ops = [e[4] for e in hook.events]
    assert ops[:3] == ["store", "load", "store"] and ops.count("store") == 4
    assert report.race_count() > 0  # the microscope's own race detector flags the unordered flag/data accesses
    with pytest.raises(InvalidConfig, match="memory must be one of"):
        weakmemory.WeakMemoryHook("tso")


def test_uncapped_wait_cannot_hang():
    with pytest.raises(weakmemory.TooManySteps, match="Cap every spin-wait"):
        weakmemory.run_kernel(uncapped_wait, 2, 1, np.zeros(1, np.int32), np.zeros(1, np.int32),
                              schedule="sequential", max_steps=500)
    with pytest.raises(weakmemory.TooManySteps):  # one resident block: the producer never starts
        weakmemory.run_kernel(uncapped_wait, 2, 1, np.zeros(1, np.int32), np.zeros(1, np.int32),
                              schedule="random", resident_blocks=1, max_steps=500)
    out = np.zeros(1, np.int32)
    weakmemory.run_kernel(uncapped_wait, 2, 1, np.zeros(1, np.int32), out, schedule="round-robin")
    assert out[0] == 1  # with both blocks resident the wait ends


def test_resident_blocks_start_in_index_order_as_others_end():
    counter = np.zeros(1, np.int32)
    report = weakmemory.run_kernel(counter_kernel, 4, 4, counter, schedule="round-robin", resident_blocks=1)
    blocks = list(report.events.block)
    assert blocks == sorted(blocks), "one resident block at a time: block b starts after block b - 1 ended"
    assert counter[0] == 4, "a block's 4 threads race (all read the same value), blocks never overlap: 1 per block"
    counter = np.zeros(1, np.int32)
    report = weakmemory.run_kernel(counter_kernel, 4, 4, counter, schedule="round-robin", resident_blocks=2)
    first_of = {b: report.events.step[report.events.block == b].min() for b in range(4)}
    last_of = {b: report.events.step[report.events.block == b].max() for b in range(4)}
    assert first_of[1] < last_of[0] and first_of[2] > min(last_of[0], last_of[1])


def test_barriers_and_shared_garbage():
    from gpucourse.microscope import BarrierError

    with pytest.raises(BarrierError, match="every thread of a block must reach"):
        weakmemory.run_kernel(half_barrier, 1, 4, np.zeros(4, np.int32))
    out = np.zeros(4, np.int32)
    weakmemory.run_kernel(read_uninitialised_shared, 1, 4, out)
    assert (out == weakmemory.SHARED_GARBAGE).all(), "shared memory is never zeroed for you"


def test_timeline_figures():
    values = np.random.default_rng(0).random(64).astype(np.float32)
    report = weakmemory.run_kernel(histogram_kernel, 2, 8, values, np.zeros(2, np.int32), seed=1)
    fig = weakmemory.timeline_figure(report, "lost", 0)
    assert fig.layout.title.text.startswith("A lost update")
    assert fig.layout.xaxis.title.text.startswith("step of the interleaving")
    assert charts.caption_of(fig).startswith("Counted by the microscope")
    assert len(fig.data) == 2 and any(a.showarrow for a in fig.layout.annotations)
    empty = weakmemory.timeline_figure(report, "stale", 0)  # sequentially consistent: no stale read
    assert empty.layout.title.text.startswith("No stale read")
    data, flag, out = np.zeros(1, np.int32), np.zeros(1, np.int32), np.zeros(2, np.int32)
    stale = weakmemory.run_kernel(mp_spin, 2, 1, data, flag, out, 0, schedule="round-robin", memory="weak")
    fig = weakmemory.timeline_figure(stale, "stale")
    assert "stale read" in fig.layout.title.text and "data[0] = 0" in fig.layout.title.text


@pytest.mark.parametrize("kwargs, message", [
    ({"schedule": "fifo"}, "schedule must be one of"),
    ({"seed": 1.5}, "seed must be an integer"),
    ({"seed": "3"}, "seed must be an integer"),
    ({"seed": True}, "seed must be an integer"),
    ({"seed": -1}, "seed must be an integer ≥ 0"),
    ({"memory": "tso"}, "memory must be one of"),
    ({"resident_blocks": 0}, "resident_blocks must be an integer"),
])
def test_bad_input_is_refused_before_running(kwargs, message):
    counter = np.zeros(1, np.int32)
    with pytest.raises(InvalidConfig, match=message):
        weakmemory.run_kernel(counter_kernel, 2, 2, counter, **kwargs)
    assert counter[0] == 0


def test_one_interpreter_runs_kernels():
    """The weak model has no kernel interpreter of its own: the microscope's scheduler runs every launch."""
    import inspect

    assert "engine" not in inspect.signature(weakmemory.run_kernel).parameters
    for gone in ("_Launch", "_SchedulerCuda", "_Fiber", "_ThreadFiber", "Deadlock", "ENGINES"):
        assert not hasattr(weakmemory, gone), gone
    report = weakmemory.run_kernel(counter_kernel, 1, 2, np.zeros(1, np.int32), schedule="round-robin")
    assert report.microscope.schedule == "round-robin"


def test_bad_launches_are_refused():
    with pytest.raises(InvalidConfig, match="at most 2048 threads"):
        weakmemory.run_kernel(counter_kernel, 8, 512, np.zeros(1, np.int32))
    with pytest.raises(InvalidConfig, match="needs a @cuda.jit kernel"):
        weakmemory.run_kernel(lambda c: None, 1, 1, np.zeros(1, np.int32))
    with pytest.raises(InvalidConfig, match="takes 1 argument"):
        weakmemory.run_kernel(counter_kernel, 1, 1, np.zeros(1, np.int32), 3)
    with pytest.raises(InvalidConfig):
        weakmemory.explore("MP", memory="relaxed")
    with pytest.raises(InvalidConfig):
        weakmemory.sample("MP", runs=0)


def test_the_microscope_counts_only_the_kernels_lines_under_the_memory_model():
    # The memory model's own Python (loads, stores, fences, barriers) is not the kernel's code:
    # the microscope's line tables of a race-scheduler run list the kernel's lines only.
    values = np.linspace(0, 0.99, 200).astype(np.float32)
    counts = np.zeros(4, np.int32)
    report = weakmemory.run_kernel(histogram_kernel, 2, 32, values, counts, schedule="random", seed=0, memory="weak")
    branches = report.microscope.branches()
    assert set(branches.function) == {histogram_kernel.py_func.__name__}
    assert (branches.via == "").all()
