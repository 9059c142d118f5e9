"""Lesson 08's model and counts: timelines worked out by hand, bytes counted by hand, charts' captions."""

import math

import pytest

from gpucourse.errors import InvalidConfig
from gpucourse.lessons import feeding
from gpucourse.lessons.feeding import model
from gpucourse.viz import charts

P = model.Params(launch_us=5.0, pinned_gbps=10.0, pageable_gbps=5.0, copy_latency_us=0.0, graph_gap_us=1.0)


def rows(tl, engine):
    part = tl[tl.engine == engine]
    return list(zip(part.start_us, part.end_us))


def test_long_kernels_run_back_to_back_after_the_first_launch():
    # launches at 0–5, 5–10, 10–15; each 10 µs kernel waits for the previous one
    tl = model.timeline(model.small_kernels(3, 10.0), P)
    assert rows(tl, model.SMS) == [(5, 15), (15, 25), (25, 35)]
    assert rows(tl, model.HOST) == [(0, 5), (5, 10), (10, 15)]
    assert model.summary(tl)["makespan_us"] == 35


def test_short_kernels_are_launch_bound():
    # 2 µs kernels issued every 5 µs: the SMs idle 3 µs out of every 5
    tl = model.timeline(model.small_kernels(3, 2.0), P)
    assert rows(tl, model.SMS) == [(5, 7), (10, 12), (15, 17)]
    s = model.summary(tl)
    assert s["makespan_us"] == 17 and s["busy_us"][model.SMS] == 6
    assert s["sm_idle_fraction"] == pytest.approx(11 / 17)


def test_a_graph_pays_one_launch_and_a_gap_between_kernels():
    tl = model.timeline(model.small_kernels(3, 2.0, graph=True), P)
    assert rows(tl, model.HOST) == [(0, 5)]
    assert rows(tl, model.SMS) == [(5, 7), (8, 10), (11, 13)]
    assert model.per_kernel_us(3, 2.0, graph=True, params=P) == pytest.approx(13 / 3)
    assert model.per_kernel_us(3, 2.0, graph=False, params=P) == pytest.approx(17 / 3)


def test_two_streams_overlap_copies_with_kernels():
    # 2 chunks of 100 kB at 10 GB/s (10 µs each way), 40 µs of kernel in total (20 per chunk)
    ops = model.pipeline(200_000, 40.0, chunks=2, streams=2)
    tl = model.timeline(ops, P)
    # host issues: H2D0 0–5, K0 5–10, D2H0 10–15, H2D1 15–20, K1 20–25, D2H1 25–30
    assert rows(tl, model.H2D) == [(5, 15), (20, 30)]
    assert rows(tl, model.SMS) == [(15, 35), (35, 55)]  # kernel 1 waits for the SMs, not for its copy
    assert rows(tl, model.D2H) == [(35, 45), (55, 65)]
    # one stream, one chunk: 5+20 copy in, 40 kernel, 20 copy out, strictly in order
    serial = model.timeline(model.pipeline(200_000, 40.0), P)
    assert rows(serial, model.H2D) == [(5, 25)]
    assert rows(serial, model.SMS) == [(25, 65)]
    assert rows(serial, model.D2H) == [(65, 85)]
    assert model.summary(tl)["makespan_us"] < model.summary(serial)["makespan_us"]


def test_a_pageable_copy_keeps_the_host_waiting():
    tl = model.timeline([model.Copy(100_000, "H2D", pinned=False), model.Kernel(10.0)], P)
    # issue 0–5, copy 5–25 at 5 GB/s, the host waits 5–25, then launches the kernel 25–30
    assert rows(tl, model.H2D) == [(5, 25)]
    waits = tl[(tl.engine == model.HOST) & (tl.kind == "wait")]
    assert list(zip(waits.start_us, waits.end_us)) == [(5, 25)]
    assert rows(tl, model.SMS) == [(30, 40)]


def test_a_sync_makes_the_host_wait_for_the_device():
    tl = model.timeline([model.Kernel(50.0), model.Sync("loss.item()"), model.HostWork(10.0), model.Kernel(1.0)], P)
    # kernel 5–55; host waits 5–55, works 55–65, launches 65–70; the next kernel runs 70–71
    assert rows(tl, model.SMS) == [(5, 55), (70, 71)]
    assert model.summary(tl)["makespan_us"] == 71


def test_item_every_step_costs_time_in_the_training_loop():
    with_item = model.summary(model.timeline(model.training_loop(item_each_step=True)))
    without = model.summary(model.timeline(model.training_loop(item_each_step=False)))
    assert with_item["makespan_us"] > without["makespan_us"]
    assert with_item["sm_idle_fraction"] > without["sm_idle_fraction"]


def test_copy_bandwidth_is_latency_bound_for_small_copies():
    assert model.copy_time_us(25_000, 25.0, 10.0) == pytest.approx(11.0)
    assert model.copy_gbps(64 * 2**10, 25.0, 10.0) == pytest.approx(65536 / (10 + 65536 / 25e3) / 1e3)
    assert model.copy_gbps(1 << 30, 25.0, 10.0) > 0.99 * 25
    assert model.copy_gbps(4096, 25.0, 10.0) < 0.02 * 25


def test_chain_bytes_counted_by_hand():
    # unfused: x→t (8 B), t,bias→t (12 B), relu (8), square (8), +1 (8) = 44 B per fp32 element; fused 12 B
    assert model.chain_bytes(1) == 44 and model.chain_bytes(1, fused=True) == 12
    assert model.chain_bytes(1000, itemsize=2) == 22_000
    assert (model.chain_launches(), model.chain_launches(fused=True)) == (5, 1)
    # at 1000 GB/s, n = 2^20: bandwidth-bound, so the time ratio is the byte ratio
    n = 1 << 20
    assert model.chain_time_us(n, 1000.0) / model.chain_time_us(n, 1000.0, fused=True) == pytest.approx(44 / 12)
    # n = 256: launch-bound, 5 launches of 5 µs against 1
    assert model.chain_time_us(256, 1000.0) == pytest.approx(25.0)


def test_amdahl_for_the_sources_claim():
    assert model.speedup_from_fusion(0.0, 4.0) == 1.0
    assert model.speedup_from_fusion(1.0, 4.0) == pytest.approx(4.0)
    assert model.speedup_from_fusion(0.5, 2.0) == pytest.approx(4 / 3)
    f = model.fraction_for_speedup(1.8, 44 / 12)
    assert f == pytest.approx((1 - 1 / 1.8) / (1 - 12 / 44)) and model.speedup_from_fusion(f, 44 / 12) == (
        pytest.approx(1.8))
    assert model.fraction_for_speedup(3.0, 2.0) > 1  # 3× from a 2× smaller chain is impossible


def test_l2_model_plateau_then_hbm():
    l2 = 50 * 2**20
    assert model.l2_gbps(l2 // 4, l2, 1000.0) == pytest.approx(2500.0)
    assert model.l2_gbps(l2, l2, 1000.0) == pytest.approx(2500.0)
    far = model.l2_gbps(64 * l2, l2, 1000.0)
    assert 1000.0 < far < 1050.0
    assert model.l2_gbps(2 * l2, l2, 1000.0) == pytest.approx(1 / (0.5 / 2500 + 0.5 / 1000))


@pytest.mark.parametrize("bad", [
    lambda: model.Params(launch_us=-1),
    lambda: model.Params(pinned_gbps=0),
    lambda: model.pipeline(0, 1.0),
    lambda: model.pipeline(100, 1.0, chunks=0),
    lambda: model.small_kernels(0),
    lambda: model.chain_bytes(10, itemsize=3),
    lambda: model.timeline([model.Copy(10, "sideways")]),
    lambda: model.timeline(["kernel"]),
    lambda: model.timeline([model.Graph(())]),
    lambda: model.timeline([], params={"launch_us": 5}),
    lambda: feeding.scenario_ops("no such scenario"),
    lambda: feeding.fusion_figure(n=10),
])
def test_bad_input_is_refused_with_a_message(bad):
    with pytest.raises(InvalidConfig):
        bad()


def test_model_defaults_all_say_where_they_come_from():
    assert set(model.PARAM_SOURCES) == {f for f in model.Params.__dataclass_fields__}
    assert all(("assumption" in text) or ("claim" in text) for text in model.PARAM_SOURCES.values())


def test_the_unfused_and_fused_chains_agree_with_numpy():
    table = feeding.chain_check(n=300)
    assert table.correct.all() and list(table.launches) == [5, 1]
    assert list(table.counted_bytes) == [44 * 300, 12 * 300]


@pytest.mark.parametrize("build", [feeding.copy_figure, feeding.launch_figure, feeding.sync_figure,
                                   feeding.fusion_figure, feeding.fusion_claim_figure, feeding.l2_figure,
                                   feeding.measured_overlap_figure, feeding.model_timeline_figure])
def test_every_chart_says_where_its_numbers_came_from(build):
    fig = build()
    caption = charts.caption_of(fig)
    kinds = ("Measured now", "Recorded on a real GPU", "Model", "No data", "Bytes counted (exact)")
    assert caption.startswith(kinds), caption
    assert "simulator" not in caption.lower() or "not" in caption.lower()


def test_every_scenario_draws_a_timeline():
    for scenario in feeding.SCENARIOS:
        fig = feeding.model_timeline_figure(scenario)
        assert len(fig.data) >= 2 and "µs" in fig.layout.title.text


def test_the_published_streaming_rate_is_read_not_typed():
    assert feeding.published_hbm_gbps() == 1704.0  # gpu-stream/h100_pcie.txt, the best block size
    assert math.isclose(feeding.published_hbm_gbps("NVIDIA H200"), 3165.0)


def test_profile_counts_find_the_hidden_syncs():
    torch = pytest.importorskip("torch")
    loss = torch.tensor(0.5)
    for action in (lambda: loss.item(), lambda: float(loss), lambda: bool(loss > 0), lambda: print(loss)):
        assert feeding.profile_counts(action)["aten::_local_scalar_dense"] >= 1
    assert feeding.profile_counts(lambda: loss * 2)["aten::_local_scalar_dense"] == 0


def test_profiling_writes_nothing_to_stderr(capfd):
    """nbgrader counts any stderr output of a test cell as a failure: the profiler's native log lines
    must not reach file descriptor 2."""
    torch = pytest.importorskip("torch")
    feeding.profile_counts(lambda: torch.ones(3) * 2)
    feeding.profile_counts(lambda: torch.ones(3) * 2)
    assert capfd.readouterr().err == ""


def test_the_training_loop_scenarios_show_what_a_sync_costs_at_their_default_batch():
    """Review D18: at the pipelines' 8 MiB the batch copy hid the .item() (68 % against 65 % idle);
    the training loop's own default batch makes the prediction visible (instructor/08's numbers)."""
    assert feeding.DATA_MIB["training loop with .item() each step"] == 0.25
    shown = {}
    for scenario in ("training loop with .item() each step", "training loop, no sync in the loop"):
        s = model.summary(model.timeline(feeding.scenario_ops(scenario)))
        shown[scenario] = (round(s["makespan_us"]), round(100 * s["sm_idle_fraction"]))
    assert shown == {"training loop with .item() each step": (901, 33), "training loop, no sync in the loop": (726, 17)}
    explorer = feeding.timeline_explorer()
    explorer.controls["scenario"].value = "training loop with .item() each step"
    assert explorer.controls["batch_mib"].value == 0.25 and "idle 33 %" in explorer.figure.layout.title.text


def _events():
    import pandas as pd

    rows = []
    for c in range(4):
        for k, engine in enumerate((model.H2D, model.SMS, model.D2H)):
            rows.append({"engine": engine, "name": f"op {c}.{k}", "kind": "kernel" if engine == model.SMS else "copy",
                         "stream": c % 2, "start_us": 10.0 * (c + k), "end_us": 10.0 * (c + k) + 8})
    return pd.DataFrame(rows)


def test_event_timelines_are_drawn_as_streams_never_as_engines():
    """Review D5: CUDA events time a stream's progress, not an engine's work; no label of a chart drawn
    from events may call its rows or bars engines, and its caption says what the bars are."""
    fig = feeding.stream_timeline_figure(_events(), "from events", charts.source_caption("measured", "X, CUDA events"))
    labels = [str(c) for c in fig.layout.yaxis.categoryarray] + [t.name for t in fig.data]
    labels += [str(y) for t in fig.data for y in t.y] + [fig.layout.title.text]
    assert not [label for label in labels if "engine" in label.lower()], labels
    assert set(fig.layout.yaxis.categoryarray) == {"stream 0", "stream 1"}
    assert len(fig.data) == 3 and all("stream interval" in t.name for t in fig.data)
    caption = charts.caption_of(fig)
    assert "stream interval between two CUDA events" in caption and "not when a copy engine" in caption


def test_the_fusion_chart_keeps_bytes_and_time_on_separate_axes_with_units(no_recordings):
    """Review 3.3 #2: model ms and counted MB never share one axis."""
    fig = feeding.fusion_figure(n=1 << 24)
    by_name = {t.name: t for t in fig.data}
    mb = next(t for name, t in by_name.items() if name.startswith("MB"))
    ms = next(t for name, t in by_name.items() if "ms (" in name)
    assert (mb.yaxis, ms.yaxis) == ("y", "y2")
    assert "MB" in fig.layout.yaxis.title.text and fig.layout.yaxis2.title.text.startswith("ms")
    assert ms.y[0] / ms.y[1] == pytest.approx(44 / 12, rel=0.01) and mb.y[0] / mb.y[1] == pytest.approx(44 / 12)


def test_the_spy_counts_every_line_that_waits_and_only_those():
    """Review C3/D8/D9: .tolist(), .cpu(), a blocking copy and torch.cuda.synchronize() leave no
    aten::_local_scalar_dense; the spy counts them (on the CPU too), and not a non_blocking copy, a
    dtype conversion or torch's own internal calls."""
    table = feeding.hidden_sync_table().set_index("line")
    scalar, spied = table["aten::_local_scalar_dense"], table["host syncs (spy)"]
    assert list(scalar[["loss.item()", "float(loss)", "if loss > 0:"]]) == [1, 1, 1] and scalar["print(loss)"] > 1
    assert list(scalar[["loss.tolist()", "loss.cpu()", "batch.to(device)", "torch.cuda.synchronize()"]]) == [0] * 4
    assert (spied.drop("pinned.to(device, non_blocking=True)") == 1).all()
    assert spied["pinned.to(device, non_blocking=True)"] == 0
    torch = pytest.importorskip("torch")
    x = torch.randn(8, 8)
    quiet = feeding.profile_counts(lambda: (x.to(torch.bfloat16), torch.nn.Linear(8, 8)(x).sum().backward()))
    assert feeding.host_syncs(quiet) == {}
    assert torch.Tensor.item is torch._C.TensorBase.item and "item" not in torch.Tensor.__dict__  # restored


def test_code_lines_ignore_comments_and_spaces():
    def f():
        y = 1  # a comment
        return  y

    assert feeding.code_line("  y = 1   # another") == "y = 1" and "return y" in feeding.code_lines(f)


def _minutes(text: str) -> tuple[int, int]:
    import re

    core = sum(int(m) for m in re.findall(r"^# ## .*\((\d+) min\)$", text, re.M))
    optional = sum(int(m) for m in re.findall(r"^# ## .*\(optional, (\d+) min\)$", text, re.M))
    return core, optional


def test_the_lesson_s_minutes_add_up_and_its_optional_sections_are_marked():
    """Review 3.1 / issue 32 item 8: the header's core and optional minutes are the sums of the
    sections' own minutes, the optional sections say so in their titles, and instructor/08 paces the same."""
    import re

    from gpucourse.tooling.build import ROOT

    lesson = (ROOT / "notebooks" / "08_feeding.py").read_text()
    sections, optional = _minutes(lesson)
    assert (sections, optional) == (46, 16)  # tests/test_minutes.py holds each to the course's rule
    header = " ".join(lesson.split("## Objectives")[0].split())
    rest = int(re.search(r"objectives and wrap-up (\d+)", header).group(1))  # the unnumbered sections
    core = sections + rest
    assert re.search(rf"\*{core} minutes of core\b", header) and re.search(rf"\b{optional} optional minutes\b", header)
    titles = re.findall(r"^# ## (\d) · (.*)$", lesson, re.M)
    assert {n for n, title in titles if "(optional," in title} == {"3", "6"}
    notes = " ".join((ROOT / "instructor" / "08_feeding.md").read_text().split())
    assert f"{core} min of core + {optional} optional" in notes
    assert "§3 launches and graphs 7 min" in notes and "§6 the L2 9 min" in notes
