"""Lesson 09's α-β-γ model: closed forms by hand, nccl-tests' busbw factors, bad input in one line."""

import pytest

from gpucourse.lessons.collectives import model

LINK = model.Link("test", alpha_s=1e-6, bandwidth_bytes_per_s=1e9, source="round numbers for the tests")
MB = 1_000_000


def test_public_api():
    assert model.OPS == ("all_reduce", "reduce_scatter", "all_gather", "broadcast", "reduce", "all_to_all")
    assert model.ALGORITHMS == ("ring", "tree", "naive", "recursive")
    for name in ("nvlink4", "pcie5", "ib_ndr", "loopback"):
        link = model.LINKS[name]
        assert link.name == name and link.alpha_s > 0 and link.bandwidth_bytes_per_s > 0
        assert "model parameter" in link.source
    assert model.LINKS["nvlink4"].bandwidth_bytes_per_s == 450e9


@pytest.mark.parametrize("p", [2, 3, 4, 7, 8, 64])
def test_ring_closed_forms(p):
    S = 8 * MB
    ar = model.collective_time_s("all_reduce", "ring", S, p, LINK)
    assert ar == pytest.approx(2 * (p - 1) * 1e-6 + 2 * (p - 1) / p * S / 1e9)
    for op in ("reduce_scatter", "all_gather", "all_to_all"):
        t = model.collective_time_s(op, "ring", S, p, LINK)
        assert t == pytest.approx((p - 1) * 1e-6 + (p - 1) / p * S / 1e9)
    # γ is charged on reduced bytes only
    g = 1e-10
    assert model.collective_time_s("reduce_scatter", "ring", S, p, LINK, g) - model.collective_time_s(
        "reduce_scatter", "ring", S, p, LINK) == pytest.approx((p - 1) / p * S * g)
    assert model.collective_time_s("all_gather", "ring", S, p, LINK, g) == model.collective_time_s(
        "all_gather", "ring", S, p, LINK)


@pytest.mark.parametrize("p", [2, 4, 8, 16, 64])
def test_recursive_and_tree_closed_forms(p):
    S = 8 * MB
    L = p.bit_length() - 1
    assert model.collective_time_s("all_reduce", "recursive", S, p, LINK) == pytest.approx(
        2 * L * 1e-6 + 2 * (p - 1) / p * S / 1e9)
    assert model.collective_time_s("broadcast", "tree", S, p, LINK) == pytest.approx(L * (1e-6 + S / 1e9))
    assert model.collective_time_s("all_reduce", "tree", S, p, LINK) == pytest.approx(2 * L * (1e-6 + S / 1e9))


def test_tree_rounds_up_for_odd_rank_counts():
    assert model.collective_time_s("broadcast", "tree", 0, 5, LINK) == pytest.approx(3e-6)
    assert model.log2_ceil(1) == 0 and model.log2_ceil(2) == 1 and model.log2_ceil(5) == 3


def test_naive_is_linear_in_ranks_and_ring_is_not():
    S = 64 * MB
    naive = [model.collective_time_s("all_reduce", "naive", S, p, LINK) for p in (2, 4, 8)]
    ring = [model.collective_time_s("all_reduce", "ring", S, p, LINK) for p in (2, 4, 8)]
    assert naive[2] / naive[0] == pytest.approx(7, rel=1e-3)
    assert ring[2] / ring[0] < 2


def test_one_rank_costs_nothing():
    for op in model.OPS:
        for alg in model.MODELLED[op]:
            assert model.collective_time_s(op, alg, MB, 1, LINK) == 0.0


def test_busbw_factors_from_performance_md():
    assert model.busbw_factor("all_reduce", 8) == pytest.approx(1.75)
    for op in ("reduce_scatter", "all_gather", "all_to_all"):
        assert model.busbw_factor(op, 8) == pytest.approx(7 / 8)
    assert model.busbw_factor("broadcast", 8) == 1.0 and model.busbw_factor("reduce", 8) == 1.0
    # the identity: a ring all-reduce at large size reports busbw = β
    S, p = 1 << 34, 8
    t = model.collective_time_s("all_reduce", "ring", S, p, LINK)
    assert model.busbw_bytes_per_s("all_reduce", S, p, t) == pytest.approx(1e9, rel=1e-3)
    assert model.algbw_bytes_per_s(S, t) == pytest.approx(1e9 / 1.75, rel=1e-3)


def test_crossover_and_fit():
    assert model.crossover_bytes(model.LINKS["ib_ndr"]) == pytest.approx(100e3)
    sizes = [1e3, 1e4, 1e5, 1e6]
    fitted = model.fit_alpha_beta(sizes, [2e-6 + n / 5e9 for n in sizes])
    assert fitted.alpha_s == pytest.approx(2e-6) and fitted.bandwidth_bytes_per_s == pytest.approx(5e9)


# One pingpong run of lesson 09 (learner-walk-2 W12): 1 KiB and 16 KiB measured 142 and 128 µs, and the
# 4 MiB and 32 MiB points a few per cent off the line. An absolute least-squares fit printed α = 171 µs.
PINGPONG_SIZES = [1 << 10, 1 << 14, 1 << 18, 1 << 22, 1 << 25]
PINGPONG_TIMES_S = [142e-6, 128e-6, 230e-6, 1.9e-3, 12.9e-3]


def test_the_fit_describes_the_small_messages_too():
    fitted = model.fit_alpha_beta(PINGPONG_SIZES, PINGPONG_TIMES_S)
    for n, t in zip(PINGPONG_SIZES, PINGPONG_TIMES_S):
        assert fitted.alpha_s + n / fitted.bandwidth_bytes_per_s == pytest.approx(t, rel=0.1), n
    assert 128e-6 <= fitted.alpha_s <= 142e-6  # α between the two small points, not above both


def test_the_fit_never_clamps_a_real_latency_to_zero():
    # a quiet machine: α = 5 µs, β = 10 GB/s, the largest point 3 % slow
    sizes = [1 << 10, 1 << 14, 1 << 20, 1 << 25]
    times = [5e-6 + n / 10e9 for n in sizes]
    times[-1] *= 1.03
    fitted = model.fit_alpha_beta(sizes, times)
    assert fitted.alpha_s == pytest.approx(5e-6, rel=0.05)


def test_a_line_that_does_not_grow_is_refused():
    with pytest.raises(ValueError, match="do not grow"):
        model.fit_alpha_beta([1 << 10, 1 << 20], [1e-3, 1e-3])
    with pytest.raises(ValueError, match="do not grow"):
        model.fit_alpha_beta([1 << 10, 1 << 20], [2e-3, 1e-3])


@pytest.mark.parametrize("call", [
    lambda: model.collective_time_s("allreduce", "ring", 1, 2, LINK),
    lambda: model.collective_time_s("all_reduce", "rings", 1, 2, LINK),
    lambda: model.collective_time_s("all_reduce", "ring", 1, 0, LINK),
    lambda: model.collective_time_s("all_reduce", "ring", -1, 2, LINK),
    lambda: model.collective_time_s("all_gather", "tree", 1, 2, LINK),
    lambda: model.collective_time_s("all_reduce", "recursive", 1, 6, LINK),
    lambda: model.collective_time_s("all_reduce", "ring", 1, 2, "nvlink"),
    lambda: model.busbw_factor("gather", 2),
    lambda: model.algbw_bytes_per_s(1, 0.0),
    lambda: model.fit_alpha_beta([1, 1], [1, 2]),
    lambda: model.fit_alpha_beta([1, 2], [0.0, 1.0]),
    lambda: model.Link("x", -1.0, 1.0, "bad"),
])
def test_bad_input_is_one_line_value_error(call):
    with pytest.raises(ValueError) as info:
        call()
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("p", [2, 4, 8, 64])
def test_knee_is_where_alpha_terms_equal_beta_terms(p):
    link = model.LINKS["nvlink4"]
    ab = link.alpha_s * link.bandwidth_bytes_per_s
    assert model.knee_bytes("all_reduce", "ring", p, link) == pytest.approx(p * ab)  # 2(p−1)α = 2(p−1)/p·S/β
    assert model.knee_bytes("reduce_scatter", "ring", p, link) == pytest.approx(p * ab)
    assert model.knee_bytes("all_reduce", "tree", p, link) == pytest.approx(ab)  # each step carries S
    L = p.bit_length() - 1
    assert model.knee_bytes("all_reduce", "recursive", p, link) == pytest.approx(L * p / (p - 1) * ab)
    with pytest.raises(ValueError):
        model.knee_bytes("all_reduce", "ring", 1, link)
