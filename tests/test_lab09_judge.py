"""Lab 09's judge (collectives.judge_ring), without nbgrader: a ring is judged by the replay of the messages its
world delivered on a fresh world, every message must carry a chunk the receiver needs, and the course's own
rings trip the grader's tripwire however they are reached. Fast: plain functions on the microscope."""

from __future__ import annotations

import numpy as np
import pytest

from gpucourse.errors import InvalidConfig
from gpucourse.lessons import collectives
from gpucourse.lessons.collectives import experiments
from gpucourse.tooling.grading import tripwire

# The learners' code is compiled under a notebook-like file name: the tripwire tells it from the grader's by that.
LEARNER = '''
import numpy as np


def ring_reduce_scatter(world, order):
    p = world.ranks
    for s in range(p - 1):
        for i in range(p):
            world.send(order[i], order[(i + 1) % p], world.chunk(order[(i - s - 1) % p]), reduce=True)
        world.step()


def ring_all_gather(world, order):
    p = world.ranks
    for s in range(p - 1):
        for i in range(p):
            world.send(order[i], order[(i + 1) % p], world.chunk(order[(i - s) % p]))
        world.step()


def aside_own_chunk(world, order):
    """Decoys of the right size on the right links; the sums computed aside and written into the world."""
    p = world.ranks
    total = np.sum(world.inputs, axis=0)
    for s in range(p - 1):
        for i in range(p):
            world.send(order[i], order[(i + 1) % p], world.chunk(order[i]), reduce=True)
        world.step()
    for r in range(p):
        world.data[r][:] = total


def shifted_with_values_aside(world, order):
    """A ring one chunk off (each message a growing partial sum, never counted twice), the sums written aside."""
    p = world.ranks
    total = np.sum(world.inputs, axis=0)
    for s in range(p - 1):
        for i in range(p):
            world.send(order[i], order[(i + 1) % p], world.chunk(order[(i - s) % p]), reduce=True)
        world.step()
    for r in range(p):
        world.data[r][:] = total


def rank_order(world, order):
    p = world.ranks
    for s in range(p - 1):
        for r in range(p):
            world.send(r, (r + 1) % p, world.chunk((r - s - 1) % p), reduce=True)
        world.step()


def aside_right_messages_bypassed(world, order):
    """The right messages, delivered by World.step past the recording world, then the values written in."""
    p = world.ranks
    total = np.sum(world.inputs, axis=0)
    for s in range(p - 1):
        for i in range(p):
            world.send(order[i], order[(i + 1) % p], world.chunk(order[(i - s - 1) % p]), reduce=True)
        type(world).__mro__[1].step(world)
    for r in range(p):
        world.data[r][:] = total


class Relabel:
    def __init__(self, world, order):
        self.w, self.o, self.ranks = world, order, world.ranks

    def chunk(self, c):
        return self.w.chunk(self.o[c])

    def send(self, src, dst, part, reduce=False):
        self.w.send(self.o[src], self.o[dst], part, reduce=reduce)

    def step(self):
        self.w.step()


def relabelled_default(world, order, _ring=collectives.kernels.ring_reduce_scatter):
    _ring(Relabel(world, order))


def relabelled_getattr(world, order):
    getattr(collectives.kernels, "ring_all_" + "gather")(Relabel(world, order))
'''


@pytest.fixture(scope="module")
def learner():
    namespace = {"collectives": collectives}
    exec(compile(LEARNER, "/tmp/ipykernel_0/cell.py", "exec"), namespace)
    return namespace


def test_the_rings_pass_for_every_order(learner):
    rng = np.random.default_rng(3)
    for p in range(2, 10):
        order = [int(r) for r in rng.permutation(p)]
        for name, op in (("ring_reduce_scatter", "reduce_scatter"), ("ring_all_gather", "all_gather")):
            assert collectives.judge_ring(learner[name], op, order, 4 * p * 3, seed=p) is None


def test_values_written_aside_behind_decoys_fail(learner):
    why = collectives.judge_ring(learner["aside_own_chunk"], "reduce_scatter", [0, 2, 3, 1], 4 * 4 * 2)
    assert why is not None and "counted twice" in why
    why = collectives.judge_ring(learner["aside_right_messages_bypassed"], "reduce_scatter", [0, 2, 3, 1], 4 * 4 * 2)
    assert why is not None and "steps" in why  # nothing was delivered through the recording world


def test_only_the_replay_values_count(learner):
    why = collectives.judge_ring(learner["shifted_with_values_aside"], "reduce_scatter", [0, 2, 3, 1], 4 * 4 * 2)
    assert why is not None and "do not leave NumPy's values" in why


def test_every_message_follows_the_ring_order(learner):
    why = collectives.judge_ring(learner["rank_order"], "reduce_scatter", [0, 2, 3, 1], 4 * 4 * 2)
    assert why is not None and "in this ring order rank 0 sends to 2" in why


def test_the_replay_not_the_learners_world_holds_the_values():
    world = experiments.RecordingWorld(3, 6, seed=4)
    collectives.kernels.ring_reduce_scatter(world)
    for r in range(3):
        world.data[r][:] = 0  # the learner's world is wrecked afterwards: the replay does not care
    fresh = experiments.replay("reduce_scatter", 3, 6, 4, world.delivered)
    assert collectives.kernels.values_match("reduce_scatter", fresh)
    assert not collectives.kernels.values_match("reduce_scatter", world)


def _fault(op, s, message, p=4):
    world = collectives.World(p, 4 * p)
    have = [[frozenset([r]) if op == "reduce_scatter" or c == r else frozenset() for c in range(p)]
            for r in range(p)]
    return experiments._message_fault(op, world, s, message, have), have


def test_each_message_must_carry_a_chunk_the_step_requires():
    chunk = lambda c: (4 * c, 4 * c + 4)  # noqa: E731 -- chunk c of 16 elements on 4 ranks
    # reduce-scatter: rank 0 sends chunk 1 to rank 1 twice: the second time rank 1 already holds rank 0's part
    first, have = _fault("reduce_scatter", 0, (0, 1, *chunk(1), *chunk(1), True, "data"))
    assert first == "" and have[1][1] == frozenset([0, 1])
    again = experiments._message_fault("reduce_scatter", collectives.World(4, 16), 1,
                                       (0, 1, *chunk(1), *chunk(1), True, "data"), have)
    assert "counted twice" in again
    assert "without reduce" in _fault("reduce_scatter", 0, (0, 1, *chunk(3), *chunk(3), False, "data"))[0]
    assert "one whole chunk" in _fault("reduce_scatter", 0, (0, 1, 0, 8, 0, 8, True, "data"))[0]
    # all-gather: a chunk the sender does not hold yet, or one the receiver has
    assert "does not hold" in _fault("all_gather", 0, (0, 1, *chunk(2), *chunk(2), False, "data"))[0]
    assert "never adds" in _fault("all_gather", 0, (0, 1, *chunk(0), *chunk(0), True, "data"))[0]
    fault, have = _fault("all_gather", 0, (0, 1, *chunk(0), *chunk(0), False, "data"))
    assert fault == "" and have[1][0] == frozenset([0])
    assert "already had it" in experiments._message_fault("all_gather", collectives.World(4, 16), 1,
                                                          (0, 1, *chunk(0), *chunk(0), False, "data"), have)


def test_a_partial_sum_that_does_not_grow_is_refused():
    p, chunk = 4, (8, 12)  # chunk 2
    world = collectives.World(p, 16)
    have = [[frozenset([r]) for _ in range(p)] for r in range(p)]
    have[0][2] = frozenset([0])  # rank 0 never received chunk 2: at step 1 its message would sum one rank
    have[1][2] = frozenset([1])
    fault = experiments._message_fault("reduce_scatter", world, 1, (0, 1, *chunk, *chunk, True, "data"), have)
    assert "partial sum of 2" in fault


def test_the_course_rings_trip_the_wire_however_reached(learner):
    for name, op, order in (("relabelled_default", "reduce_scatter", [0, 2, 3, 1]),
                            ("relabelled_getattr", "all_gather", [0, 2, 3, 1])):
        with tripwire.armed(collectives.RING_FORBIDDEN) as trips:
            why = collectives.judge_ring(learner[name], op, order, 4 * 4 * 2)
        assert why is None  # the relabelled course ring is a right ring: only the tripwire tells
        assert trips.tripped and "write the ring yourself" in trips.calls[0]
    with tripwire.armed(collectives.RING_FORBIDDEN) as trips:
        assert collectives.judge_ring(learner["ring_reduce_scatter"], "reduce_scatter", [0, 2, 3, 1], 32) is None
    assert not trips.tripped


def test_bad_orders_and_sizes_are_one_line(learner):
    with pytest.raises(InvalidConfig, match="permutation"):
        collectives.judge_ring(learner["ring_reduce_scatter"], "reduce_scatter", [0, 0, 1], 48)
    with pytest.raises(InvalidConfig, match="chunks"):
        collectives.judge_ring(learner["ring_reduce_scatter"], "reduce_scatter", [0, 1, 2], 40)
