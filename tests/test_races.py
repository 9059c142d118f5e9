"""Lesson 06 (gpucourse.lessons.races): kernels, counts under the race scheduler, figures, widget, pictures,
patterns, lab helpers, sweep registration, bad input — and every kernel compiled for sm_90."""

import inspect
import subprocess
import sys
import textwrap

import numpy as np
import pandas as pd
import pytest
from lab06_kernels import lab_handoff_fenced, lab_handoff_unfenced

from gpucourse.errors import InvalidConfig, NoGPU
from gpucourse.lessons import races
from gpucourse.lessons.races import weakmemory
from gpucourse.measure import reference, runtime
from gpucourse.measure.reference import Recording
from gpucourse.viz import charts

cuda = runtime.cuda


def fake_recording(name: str, data: pd.DataFrame) -> Recording:
    from pathlib import Path

    provenance = {"device": {"device": "NVIDIA H200"}, "sweeps": {name: {"date": "2026-10-01T00:00:00"}}}
    return Recording(name, "nvidia-h200", data, provenance, Path(f"/x/data/reference/nvidia-h200/{name}.csv"))


# --- 1. lost updates ---------------------------------------------------------------------------


def test_reference_histogram_and_plain_simulator():
    values = races.histogram_values(1000, seed=3)
    expected = races.histogram_reference(values, 7)
    assert expected.sum() == 1000 and expected.dtype == np.int32
    assert np.array_equal(expected, np.histogram(values, bins=7, range=(0, 1))[0])
    for variant, kernel in races.HISTOGRAM_KERNELS.items():
        counts = np.zeros(7, np.int32)
        kernel[races.SIM_BLOCKS, races.SIM_THREADS](values, counts)
        # the plain simulator runs one thread at a time: even the racy kernel is right there
        assert np.array_equal(counts, expected), variant


def test_counter_demo_shows_both():
    table = races.counter_demo(threads=512, blocks=4, seed=0)
    assert table.run.iloc[0].startswith("plain simulator") and table.lost.iloc[0] == 0
    assert (table.lost.iloc[1:] > 0).all() and (table.counter + table.lost == 512).all()


def test_lost_updates_per_variant():
    table = races.lost_updates(bins=4, items=300, seed=1)
    assert list(table["where"].unique()) == ["plain simulator", "race scheduler (random, seed 1)"]
    lost = table.set_index(["variant", "where"]).lost
    assert lost["racy", "plain simulator"] == 0
    assert lost["racy", "race scheduler (random, seed 1)"] > 0
    assert lost["atomic", "race scheduler (random, seed 1)"] == 0
    assert lost["privatised", "race scheduler (random, seed 1)"] == 0
    assert table.equals(races.lost_updates(bins=4, items=300, seed=1)), "same seed, same counts"
    assert races.lost_updates(bins=3, items=0).lost.sum() == 0


def test_privatised_counts_in_shared_memory():
    counts, report = races.race_histogram("privatised", bins=8, items=200, seed=2)
    ev = report.events
    assert counts.sum() == 200
    assert ((ev.space == "shared") & (ev.op == "atomic")).sum() == 200
    assert ((ev.space == "global") & (ev.op == "atomic")).sum() <= races.SIM_BLOCKS * 8


def test_histogram_figure_without_recording(monkeypatch):
    monkeypatch.setattr(reference, "load", lambda name, *a, **k: None)
    fig = races.histogram_figure(bins=4, items=256, seed=0)
    assert fig.layout.title.text == "Histogram, 4 bins: updates lost and time per variant"
    assert fig.layout.yaxis.title.text == "updates lost (count)"
    assert fig.layout.yaxis2.title.text == "time per launch (ms)"
    caption = charts.caption_of(fig)
    assert caption.startswith("Counted by the microscope") and "no recording of races.histogram yet" in caption
    assert any("No GPU timing" in (a.text or "") for a in fig.layout.annotations)
    assert [t.name for t in fig.data] == ["lost: plain simulator", "lost: race scheduler (random, seed 0)"]
    table = charts.data_table(fig)
    assert set(table.x) == {"racy +=", "global atomics", "privatised"}


def test_histogram_figure_with_recording(monkeypatch):
    rows = [{"bins": b, "items": 10**7, "variant": v, "median_ms": t, "iqr_ms": 0.01, "lost": 0}
            for b in (1, 16, 1024) for v, t in zip(races.VARIANTS, (1.0, 4.0, 0.5), strict=True)]
    monkeypatch.setattr(reference, "load", lambda name, *a, **k: fake_recording(name, pd.DataFrame(rows)))
    fig = races.histogram_figure(bins=8, items=256)
    assert "measured by this course on an NVIDIA H200 (not your GPU)" in charts.caption_of(fig)
    assert "2026-10-01" in charts.caption_of(fig)
    assert "nearest recorded: 16 bins" in charts.caption_of(fig)
    assert list(fig.data[-1].y) == [1.0, 4.0, 0.5] and fig.data[-1].xaxis == "x2"


def test_histogram_widget_updates_and_reports_errors():
    widget = races.histogram_widget(threaded=False)
    assert widget.runs == 1 and widget.errors == 0
    if not runtime.is_gpu():  # a move traces four launches: at most 1,024 values keeps it under a second
        from gpucourse.lessons.races import figures as race_figures

        assert widget.controls["items"].max == race_figures.WIDGET_SIM_ITEMS == 1024
        assert widget.controls["items"].value == 1024  # the lesson's prediction: "The histogram has 1,024 values"
    widget.controls["bins"].value = 1
    assert widget.runs == 2 and "1 bin:" in widget.figure.layout.title.text
    widget.compute = lambda **values: races.histogram_figure(bins=0)
    widget.controls["bins"].value = 2
    assert widget.errors == 1 and "bins must be an integer" in widget.status.value


def test_lost_update_timeline():
    fig = races.lost_update_timeline(bins=2, items=64, seed=0)
    assert fig.layout.title.text.startswith("A lost update")
    assert charts.caption_of(fig).startswith("Counted by the microscope")
    assert len(fig.data) == 2


# --- 2. message passing, hand-off, litmus ------------------------------------------------------------


def test_mp_kernel_outcomes_under_the_model():
    none = races.mp_outcomes("none", runs=40, seed=0)
    both = races.mp_outcomes("both", runs=40, seed=0)
    assert sum(none.values()) == 40 and none[(1, 0)] > 0
    assert both[(1, 0)] == 0


def test_handoff_table_tells_the_four_stories():
    table = races.handoff_table(seed=0)
    assert list(table.outcome) == ["gave up: the flag never came", "correct: saw the flag and the data",
                                   "WRONG: saw the flag but stale data", "correct: saw the flag and the data",
                                   "correct: saw the flag and the data"]
    assert table.polls.iloc[0] == 200, "the cap ended the wait"
    assert list(table.memory) == ["sc", "sc", "weak", "weak", "weak-acqrel"]


@cuda.jit
def handoff_weak_flag(data, flag, out):
    """The hand-off with a plain (weak) flag store and load: correct only if threadfence is fence.sc."""
    if cuda.blockIdx.x == 1:
        data[0] = 42
        cuda.threadfence()
        flag[0] = 1
    else:
        seen, polls = flag[0], 0
        while seen == 0 and polls < 200:
            seen = flag[0]
            polls += 1
        cuda.threadfence()
        out[0] = seen
        out[1] = data[0]


def test_handoff_needs_a_strong_flag_when_fences_only_release_and_acquire():
    def weak_flag(memory):
        data, flag, out = np.zeros(1, np.int32), np.zeros(1, np.int32), np.full(2, -1, np.int32)
        weakmemory.run_kernel(handoff_weak_flag, 2, 1, data, flag, out, schedule="round-robin", memory=memory)
        return tuple(int(v) for v in out)

    assert weak_flag("weak") == (1, 42), "fence.sc on both sides: even a weak flag carries the data"
    assert weak_flag("weak-acqrel") == (1, 0), "fence.acq_rel and a weak flag: stale data"
    for seed in range(5):  # the lesson's kernel, with its atomic flag, is correct under release/acquire fences
        run = races.handoff(1, 200, True, "random", seed, "weak-acqrel")
        assert run["outcome"] == "correct: saw the flag and the data", seed
    source = inspect.getsource(races.handoff_kernel.py_func)
    assert "cuda.atomic.exch(flag" in source and "        flag[0] = 1" not in source


def test_gpu_harness_kernel_logic_under_the_model():
    # mp_harness is the GPU litmus kernel; one pair of tiny blocks shows its bookkeeping is right.
    def run(fp, fc, round_, schedule, seed=0):
        slots = races.LITMUS_SLOT_STRIDE
        data, flag, counts = np.zeros(slots, np.int32), np.zeros(slots, np.int32), np.zeros(4, np.int64)
        scratch = np.zeros(64, np.int32)
        weakmemory.run_kernel(races.mp_harness, 2, 4, data, flag, counts, scratch, fp, fc, 50, 2, round_,
                              schedule=schedule, seed=seed, memory="weak")
        return counts

    for round_ in (0, 1):  # the producer's block alternates with the round
        counts = run(1, 1, round_, "round-robin")
        assert counts.sum() == 1 and counts[3] == 1  # saw the flag, new data
    assert run(0, 0, 0, "round-robin")[2] == 1  # no fences: flag seen, old data
    assert all(run(1, 1, 0, "random", s)[2] == 0 for s in range(5))


def test_litmus_figure_without_recording(monkeypatch):
    monkeypatch.setattr(reference, "load", lambda name, *a, **k: None)
    fig = races.litmus_figure(runs=20, seed=0)
    assert fig.layout.xaxis.title.text == "threadfence placed on"
    assert fig.layout.yaxis.title.text == "runs with the weak outcome (%)"
    assert charts.caption_of(fig).startswith("Counted by the microscope")
    assert "no recording yet" in charts.caption_of(fig)
    assert len(fig.data) == 1 and list(fig.data[0].x) == ["no fence", "producer only", "consumer only", "both sides"]
    assert fig.data[0].y[3] == 0 and fig.data[0].text[3].endswith("(forbidden)")
    assert races.litmus_recording() is None
    assert "no GPU recording yet" in races.litmus_recording_table().iloc[0, 0]


def test_litmus_figure_with_recording(monkeypatch):
    rows = [{"fences": f, "outcome": races.OUTCOMES[k], "flag_seen": k[0], "data_seen": k[1],
             "count": 1000 if k == (1, 1) else 0, "runs": 1000} for f in races.LITMUS_FENCES for k in races.OUTCOMES]
    monkeypatch.setattr(reference, "load", lambda name, *a, **k: fake_recording(name, pd.DataFrame(rows)))
    fig = races.litmus_figure(runs=5)
    assert [t.name for t in fig.data] == ["weak-memory model (race scheduler)", "GPU"]
    assert list(fig.data[1].y) == [0, 0, 0, 0] and fig.data[1].text[0] == "0 of 1,000"
    assert "measured by this course on an NVIDIA H200" in charts.caption_of(fig)


def test_sweeps_are_registered():
    for name, columns in [("races.histogram", ("bins", "items", "variant", "median_ms", "lost")),
                          ("races.litmus_mp", ("fences", "outcome", "count", "runs"))]:
        sweep = reference.SWEEPS[name]
        assert sweep.lesson == "06_races" and sweep.columns == columns
    assert "gpucourse.lessons.races" in reference.SWEEP_MODULES


@pytest.mark.skipif(runtime.is_gpu(), reason="simulator-mode behaviour")
def test_gpu_only_functions_say_so():
    with pytest.raises(NoGPU):
        races.run_litmus("none")
    with pytest.raises(NoGPU):
        races.measure_histogram()


# --- 3. pictures ------------------------------------------------------------------------------------------


def test_pictures():
    unfenced, fenced = races.memory_model_picture(False), races.memory_model_picture(True)
    assert "old data" in unfenced.layout.title.text and "brings the data" in fenced.layout.title.text
    assert len(fenced.layout.shapes) > len(unfenced.layout.shapes)  # the two fences are drawn
    texts = " ".join(a.text or "" for a in races.scopes_picture().layout.annotations)
    assert all(word in texts for word in ("system", "GPU", "cluster", "block", "warp", "threadfence()"))


# --- 4. correct patterns -------------------------------------------------------------------------------------


def test_last_block_reduction():
    values = np.arange(1, 65, dtype=np.float64)
    partial, ticket, out = np.zeros(4), np.zeros(1, np.uint32), np.zeros(1)
    races.reduce_last_block[4, 8](values, partial, ticket, out, 1)
    assert out[0] == values.sum() and ticket[0] == 0, "the ticket wraps back to 0 for the next launch"
    assert races.fence_reduction(values, fence=True) == values.sum()
    assert races.fence_reduction(values, fence=False) != values.sum()
    table = races.fence_reduction_table(runs=8, seed=0)
    assert table.iloc[1, -1] == 8 and table.iloc[0, -1] < 8


def test_training_loop_drifts_only_when_merges_race():
    correct = races.train(steps=6, racy=False, examples=32, block=16, seed=0)
    racy = races.train(steps=6, racy=True, examples=32, block=16, seed=0)
    x, y = races.training_data(32, 4, 0)
    w, exact = np.zeros(4), []
    for _ in range(6):
        exact.append(np.mean((x @ w - y) ** 2) / 2)
        w = w - 0.3 * (x.T @ (x @ w - y)) / 32
    np.testing.assert_allclose(correct, exact, rtol=1e-4)
    assert correct[-1] < correct[0] and not np.allclose(racy, correct)


def test_training_figure():
    fig = races.training_figure(steps=4, seed=0)
    assert fig.layout.title.text.startswith("The same training loop, 4 steps")
    assert fig.layout.yaxis.type == "log" and fig.layout.xaxis.title.text.startswith("training step")
    names = [t.name for t in fig.data]
    assert names[1:] == ["blocks merge with cuda.atomic.add", "blocks merge with a plain += (race)"]
    assert charts.caption_of(fig).startswith("Counted by the microscope")


# --- lab helpers -------------------------------------------------------------------------------------------------


def test_lab_helpers():
    counts, expected, _ = races.check_histogram(races.histogram_atomic, bins=5, items=100, schedule="round-robin")
    assert np.array_equal(counts, expected)
    counts, expected, _ = races.check_histogram(races.histogram_racy, bins=5, items=100, schedule="round-robin")
    assert counts.sum() < 100
    out, _ = races.run_handoff(lab_handoff_fenced, producer=1, schedule="round-robin")
    assert tuple(out) == (36, 1)
    out, _ = races.run_handoff(lab_handoff_unfenced, producer=0, schedule="round-robin")
    assert out[1] == 1 and out[0] != 36
    out, _ = races.run_handoff(lab_handoff_fenced, producer=1, spin_cap=10, schedule="sequential", memory="sc")
    assert out[1] == 0, "blocks one after another, consumer first: it gives up after its cap"
    assert races.show_handoff(lab_handoff_unfenced).layout.title.text.startswith("A stale read")
    assert "no stale read" in races.show_handoff(lab_handoff_fenced).layout.title.text
    assert races.show_histogram(races.histogram_racy, bins=4, items=64).layout.title.text.startswith("histogram_racy: ")


# --- bad input --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("call, message", [
    (lambda: races.histogram_figure(bins=0), "bins must be an integer from 1 to 1024"),
    (lambda: races.histogram_figure(bins=-4), "bins must be an integer"),
    (lambda: races.histogram_figure(bins=2000), "bins must be an integer"),
    (lambda: races.histogram_figure(items=-1), "items must be an integer"),
    (lambda: races.histogram_figure(seed=1.5), "seed must be an integer"),
    (lambda: races.histogram_figure(seed="7"), "seed must be an integer"),
    (lambda: races.lost_updates(bins=0), "bins must be an integer"),
    (lambda: races.lost_updates(items=-5), "items must be an integer"),
    (lambda: races.race_histogram("fast"), "variant must be one of"),
    (lambda: races.race_histogram("racy", seed=None), "seed must be an integer"),
    (lambda: races.lost_update_timeline(seed=2.0), "seed must be an integer"),
    (lambda: races.histogram_reference(np.zeros(3), 0), "bins must be an integer"),
    (lambda: races.mp_outcomes("sometimes"), "fences must be one of"),
    (lambda: races.handoff(producer_block=2), "producer_block must be an integer"),
    (lambda: races.fence_reduction(np.ones(4), threads=6), "power of two"),
    (lambda: races.litmus_figure(seed=-1), "seed must be an integer"),
    (lambda: races.training_figure(steps=1), "steps must be an integer"),
    (lambda: races.counter_demo(threads=100, blocks=3), "multiple of blocks"),
    (lambda: races.check_histogram(races.histogram_atomic, bins=0), "bins must be an integer"),
    (lambda: races.run_handoff(lab_handoff_fenced, seed="x"), "seed must be an integer"),
])
def test_bad_input_is_one_clear_error(call, message):
    with pytest.raises(InvalidConfig, match=message):
        call()


@pytest.mark.skipif(runtime.is_gpu(), reason="the simulator's size limit")
def test_simulator_size_limits():
    with pytest.raises(InvalidConfig, match="items must be an integer from 0 to 4096"):
        races.histogram_figure(items=10**7)
    with pytest.raises(InvalidConfig, match="at most 256 examples"):
        races.train(steps=2, examples=1000)


# --- the GPU build of every kernel ----------------------------------------------------------------------------

PTX_SCRIPT = textwrap.dedent('''
    import ast
    import numpy as np
    from numba import cuda, float32, float64, int32, int64, uint32
    tree = ast.parse(open("gpucourse/lessons/races/kernels.py").read())
    ns = {"cuda": cuda, "np": np}
    for node in tree.body:
        constant = isinstance(node, ast.Assign) and all(
            isinstance(t, ast.Name) and t.id.isupper() for t in node.targets)
        kernel = isinstance(node, ast.FunctionDef) and any(ast.unparse(d) == "cuda.jit" for d in node.decorator_list)
        if kernel or (constant and isinstance(node.value, (ast.Constant, ast.BinOp, ast.Tuple))):
            try:
                exec(compile(ast.Module([node], []), "kernels.py", "exec"), ns)
            except NameError:
                pass
    i, f, i64 = int32[:], float32[:], int64
    signatures = {
        "histogram_racy": (f, i), "histogram_atomic": (f, i), "histogram_privatised": (f, i), "_zero_int32": (i,),
        "racing_counter": (i,), "mp_kernel": (i, i, i, i64, i64), "handoff_kernel": (i, i, i, i64, i64, i64),
        "mp_harness": (i, i, int64[:], i, i64, i64, i64, i64, i64), "_reset_litmus": (i, i),
        "reduce_last_block": (float64[:], float64[:], uint32[:], float64[:], i64),
        "gradient_kernel": (float32[:, :], f, f, f, i64),
    }
    for name, sig in signatures.items():
        ptx, _ = cuda.compile_ptx(ns[name].py_func, sig, cc=(9, 0))
        print(name, "membar.gl" in ptx, "atom." in ptx)
''')


def test_every_kernel_compiles_for_sm90():
    """The simulator accepts code a GPU rejects: compile each kernel to PTX with the real CUDA target."""
    import os

    from gpucourse.tooling.build import ROOT

    env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_ENABLE_CUDASIM", "GPUCOURSE_MODE")}
    done = subprocess.run([sys.executable, "-c", PTX_SCRIPT], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)
    if done.returncode != 0 and "NVVM" in done.stderr and "not found" in done.stderr.lower():
        pytest.skip("no NVVM (numba-cuda[cu13]) in this environment to compile PTX")
    assert done.returncode == 0, done.stderr[-3000:]
    result = dict(line.split(" ", 1) for line in done.stdout.strip().splitlines())
    assert len(result) == 11
    assert result["mp_kernel"] == "True False" and result["histogram_racy"] == "False False"
    assert result["histogram_atomic"] == "False True" and result["reduce_last_block"] == "True True"


def test_last_block_reduction_needs_only_release_acquire_fences():
    """Its ticket is an atomic (a strong access), so it stays correct when fences only release and acquire."""
    values = np.arange(1, 65, dtype=np.float64)
    total = float(values.sum())
    assert races.fence_reduction(values, fence=True, schedule="round-robin", memory="weak-acqrel") == total
    assert all(races.fence_reduction(values, fence=True, schedule="random", seed=s, memory="weak-acqrel") == total
               for s in range(5))
    assert races.fence_reduction(values, fence=False, schedule="round-robin", memory="weak-acqrel") != total
