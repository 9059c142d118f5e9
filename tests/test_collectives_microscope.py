"""Lesson 09's collective microscope: values equal NumPy's, bytes and steps equal the closed forms for
p = 2 … 64, and the time it reports equals the model's closed form."""

import numpy as np
import pytest

from gpucourse.lessons.collectives import experiments, kernels, model

LINK = model.Link("test", alpha_s=1e-6, bandwidth_bytes_per_s=1e9, source="round numbers for the tests")
ALL_P = list(range(2, 65))
POW2 = [2, 4, 8, 16, 32, 64]
# recursive halving/doubling needs a power of two; every other algorithm takes any p
PAIRS = [(op, alg) for op in model.OPS for alg in model.MODELLED[op]]


def size_for(p: int) -> int:
    return 4 * p * 6  # six float32 per chunk: S divisible by p


@pytest.mark.parametrize("op,alg", PAIRS)
def test_values_bytes_steps_and_time_for_every_p(op, alg):
    ranks = POW2 if alg == "recursive" else ALL_P
    for p in ranks:
        S = size_for(p)
        r = experiments.run(op, alg, p, S, LINK, gamma_s_per_byte=1e-10)
        assert r.correct, (op, alg, p)
        want = experiments.closed_form_counts(op, alg, p, S)
        assert r.steps == want["steps"], (op, alg, p)
        assert int(r.bytes_sent.max()) == want["max_bytes_sent_per_rank"], (op, alg, p)
        assert r.time_s == pytest.approx(model.collective_time_s(op, alg, S, p, LINK, 1e-10), rel=1e-12), (op, alg, p)
        assert r.bytes_sent.sum() == r.bytes_received.sum() == sum(r.link_bytes.values())


@pytest.mark.parametrize("p", ALL_P)
def test_ring_sends_exactly_its_share_on_every_rank(p):
    S = size_for(p)
    for op, factor in (("reduce_scatter", 1), ("all_gather", 1), ("all_reduce", 2)):
        r = experiments.run(op, "ring", p, S, LINK)
        assert (r.bytes_sent == factor * (p - 1) * S // p).all()
        assert set(r.link_bytes) == {(i, (i + 1) % p) for i in range(p)}  # only neighbours talk
    rs = experiments.run("reduce_scatter", "ring", p, S, LINK)
    assert (rs.bytes_reduced == (p - 1) * S // p).all()
    assert (rs.peak_buffer_bytes == S + S // p).all()


@pytest.mark.parametrize("p", POW2)
def test_recursive_takes_log2_p_steps(p):
    r = experiments.run("all_reduce", "recursive", p, size_for(p), LINK)
    assert r.steps == 2 * int(np.log2(p)) and (r.bytes_sent == 2 * (p - 1) * size_for(p) // p).all()


def test_non_powers_of_two_are_refused_by_recursive_only():
    with pytest.raises(ValueError, match="power-of-two"):
        experiments.run("all_reduce", "recursive", 6, 4 * 6, LINK)
    assert experiments.run("all_reduce", "tree", 6, 4 * 6, LINK).steps == 2 * 3


def test_uneven_chunks_still_give_the_right_values():
    for op, alg in PAIRS:
        if op == "all_to_all":  # equal blocks by definition (nccl's sendcount)
            continue
        p = 4 if alg == "recursive" else 5
        assert experiments.run(op, alg, p, 4 * 13, LINK).correct, (op, alg)


def whole_buffer_reduce_scatter(world):
    """Known wrong: the ring's steps, but the whole buffer every step (right values, p× the bytes)."""
    p = world.ranks
    for s in range(p - 1):
        snapshot = [d.copy() for d in world.data]
        for r in range(p):
            world.send(r, (r + 1) % p, world.whole(), reduce=False)
        world.step()
        for r in range(p):
            c, received = world.chunk((r - s - 2) % p), world.data[r].copy()
            world.data[r][:] = snapshot[r]
            world.data[r][c] += received[c]


def test_a_known_wrong_version_is_caught_by_the_counts():
    p, S = 8, size_for(8)
    r = experiments.execute("reduce_scatter", whole_buffer_reduce_scatter, p, S, LINK)
    assert r.correct  # right values …
    assert int(r.bytes_sent.max()) == (p - 1) * S != experiments.closed_form_counts("reduce_scatter", "ring", p, S)[
        "max_bytes_sent_per_rank"]  # … p× the bytes


def test_a_wrong_reduction_is_caught_by_the_values():
    def off_by_one(world):
        p = world.ranks
        for s in range(p - 1):
            for r in range(p):
                world.send(r, (r + 1) % p, world.chunk((r - s) % p), reduce=True)
            world.step()
    assert not experiments.execute("reduce_scatter", off_by_one, 4, 64, LINK).correct


def test_world_rules_are_one_line_errors():
    w = kernels.World(4, 8)
    w.send(0, 1, w.chunk(0))
    for call in (lambda: w.send(0, 2, w.chunk(1)), lambda: w.send(3, 1, w.chunk(1)), lambda: w.send(2, 2, w.chunk(1)),
                 lambda: w.send(0, 9, w.chunk(1)), lambda: w.chunk(4), lambda: kernels.World(0, 4),
                 lambda: experiments.run("all_reduce", "ring", 2, 6, LINK),
                 lambda: experiments.run("all_to_all", "tree", 2, 8, LINK)):
        with pytest.raises(ValueError) as info:
            call()
        assert "\n" not in str(info.value)


def test_undelivered_messages_are_an_error():
    def forgets_to_step(world):
        world.send(0, 1, world.chunk(0))
    with pytest.raises(ValueError, match="step"):
        experiments.execute("broadcast", forgets_to_step, 2, 16, LINK)


def test_nccl_tests_vocabulary():
    r = experiments.run("all_reduce", "ring", 8, 1 << 20, LINK)
    row = r.summary()
    assert row["busbw_gbps"] == pytest.approx(row["algbw_gbps"] * 1.75)
    sweep = experiments.model_sweep("all_reduce", "ring", 8, LINK, experiments.sizes_bytes(8, 1 << 30))
    assert sweep.busbw_gbps.iloc[-1] == pytest.approx(1.0, rel=0.01)  # large sizes approach β = 1 GB/s
    assert sweep.busbw_gbps.iloc[0] < 0.01


def test_step_view_shows_the_ring_filling_up():
    from gpucourse.lessons.collectives import figures
    states, history = figures.step_states("reduce_scatter", "ring", 4)
    assert len(states) == 4 and len(history) == 3
    assert all(states[-1][r, r] == 4 for r in range(4))  # rank r holds all of chunk r
    assert states[0].max() == 1
    fig = figures.ring_steps_figure("all_reduce", "ring", 4)
    assert len(fig.frames) == 2 * 3 + 1
    with pytest.raises(ValueError):
        figures.ring_steps_figure("all_reduce", "ring", 17)


def test_charts_say_where_their_numbers_come_from():
    from gpucourse.lessons.collectives import figures
    busbw = figures.busbw_figure(8)
    names = [t.name for t in busbw.data]
    assert any(n.startswith("published: NVIDIA H100") for n in names) and any("model: ring" in n for n in names)
    text = " ".join(a.text for a in busbw.layout.annotations)
    assert "Azure" in text and "not your GPU" in text and "model parameters" in text
    w = figures.explorer_widget()
    assert w.errors == 0
    w.controls["ranks"].value = 6
    w.controls["algorithm"].value = "recursive"
    assert w.errors == 0 and "power-of-two" in " ".join(a.text for a in w.figure.layout.annotations)
