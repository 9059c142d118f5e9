"""Lab 10 (buckets that overlap) through real nbgrader: the solution scores full marks, the untouched lab 0, and
the known-wrong submissions lose exactly the points of what they get wrong:

* buckets in forward order (exercise 1);
* a bucket that closes only *above* its limit (``>`` for ``>=``; exercise 1's hidden cases);
* exposed time with no single stream (each all-reduce starts when its bucket is ready; exercise 2);
* assign_buckets borrowed from the lesson (``dataparallel.assign_buckets``): exercise 1, 0;
* a Reducer that all-reduces everything in ``finish()`` (right gradients, no overlap): exercise 3b;
* a Reducer that forgets to divide by the world size: 3a and 3b;
* a Reducer with one bucket per parameter (right gradients, overlap, but 8 calls for 3 buckets): 3b's hidden;
* a Reducer that reaches for torch.distributed itself, and assign_buckets that calls PyTorch's own bucketing
  (``dist._compute_bucket_assignment_by_size``, what the lesson's library calls): 1, 3a and 3b;
* the course patched (labtools.COURSE_PATCH), and the untouched lab behind IPython hooks: 0.

Graded on what the two gloo processes count and the gradients they end with, never on time."""

import nbformat
import pytest
from labtools import (
    course_copy,
    errors,
    grade_lab,
    solution_notebook,
    with_cells,
    with_course_patched,
    with_ipython_hooks,
)

LAB = "lab10_data_parallel"

pytestmark = pytest.mark.slow


def _source(cell: str) -> str:
    return next(c.source for c in solution_notebook(LAB).cells
                if c.metadata.get("nbgrader", {}).get("grade_id") == cell)


def _changed(cell: str, old: str, new: str) -> str:
    source = _source(cell)
    assert old in source, old
    return source.replace(old, new)


def test_lab10_round_trip(tmp_path):
    released = course_copy(tmp_path / "release", LAB) / "labs" / LAB / f"{LAB}.ipynb"
    untouched = nbformat.read(released, as_version=4)
    assert "BEGIN SOLUTION" not in released.read_text() and "BEGIN HIDDEN" not in released.read_text()
    assert "self.missing[b] -= 1" not in released.read_text()  # the answer is not in the released lab
    solution = solution_notebook(LAB)
    forward = _changed("ex1_solution", "for index in reversed(range(len(param_bytes))):",
                       "for index in range(len(param_bytes)):")
    above = _changed("ex1_solution", "if size >= limit:", "if size > limit:")
    borrowed = ("def assign_buckets(param_bytes, cap_bytes, first_bucket_bytes=None):\n"
                "    return dataparallel.assign_buckets(param_bytes, cap_bytes, first_bucket_bytes)\n")
    no_stream = ("def exposed_s(ready_s, comm_s, backward_end_s):\n"
                 "    return max(0.0, max(r + c for r, c in zip(ready_s, comm_s)) - backward_end_s)\n")
    in_finish = _changed("ex3_solution", "            if self.missing[b] == 0:",
                         "            if False:").replace(
        "    def finish(self):\n",
        "    def finish(self):\n        for b, members in enumerate(self.buckets):\n"
        "            flat = torch.cat([self.params[i].grad.reshape(-1) for i in members])\n"
        "            self.pending.append((b, flat, self.comm.all_reduce(flat, async_op=True)))\n")
    no_divide = _changed("ex3_solution", "flat /= self.comm.world", "pass")
    per_parameter = _changed("ex3_solution", "cap_bytes,\n", "0,\n").replace(
        "first_bucket_bytes)\n        self.bucket_of", "None)\n        self.bucket_of")
    own_dist = _changed("ex3_solution", "self.comm.all_reduce(flat, async_op=True)",
                        "torch.distributed.all_reduce(flat, async_op=True)")
    torch_buckets = ("def assign_buckets(param_bytes, cap_bytes, first_bucket_bytes=None):\n"
                     "    import torch.distributed as d\n"
                     "    order = list(reversed(range(len(param_bytes))))\n"
                     "    ts = [torch.empty(param_bytes[i], dtype=torch.uint8, device='meta') for i in order]\n"
                     "    limits = [cap_bytes] if first_bucket_bytes is None else [first_bucket_bytes, cap_bytes]\n"
                     "    return [list(b) for b in d._compute_bucket_assignment_by_size(ts, limits, [False] * "
                     "len(ts), order)[0]] if ts else []\n")
    # independent mistakes share a submission (each notebook runs the two processes three times)
    scores = grade_lab(LAB, {
        "solution": solution,
        "untouched": untouched,
        "forward_no_stream_in_finish": with_cells(solution, {"ex1_solution": forward, "ex2_solution": no_stream,
                                                             "ex3_solution": in_finish}),
        "closes_above_per_parameter": with_cells(solution, {"ex1_solution": above, "ex3_solution": per_parameter}),
        "borrowed_no_divide": with_cells(solution, {"ex1_solution": borrowed, "ex3_solution": no_divide}),
        "torch_buckets_own_dist": with_cells(solution, {"ex1_solution": torch_buckets, "ex3_solution": own_dist}),
        # forward-order buckets behind a patch of the course's checks: 0 (GraderIntegrity)
        "patched_course": with_course_patched(with_cells(solution, {"ex1_solution": forward})),
        **with_ipython_hooks(untouched),  # no answers, behind IPython hooks (labtools.IPYTHON_HOOKS): 0
    }, tmp_path / "grade")
    everything = {"ex1_test": 4, "ex2_test": 4, "ex3a_test": 4, "ex3b_test": 2}
    assert scores["solution"].cells == everything
    assert scores["solution"].total == scores["solution"].max_score == 14
    assert scores["untouched"].cells == dict.fromkeys(everything, 0)
    assert scores["forward_no_stream_in_finish"].cells == {"ex1_test": 0, "ex2_test": 0, "ex3a_test": 4,
                                                           "ex3b_test": 0}
    assert any("started during backward" in e for e in errors(scores["forward_no_stream_in_finish"].notebook))
    assert scores["closes_above_per_parameter"].cells == {**everything, "ex1_test": 0, "ex3b_test": 0}
    assert scores["borrowed_no_divide"].cells == {**everything, "ex1_test": 0, "ex3a_test": 0, "ex3b_test": 0}
    assert any("must not call the course" in e for e in errors(scores["borrowed_no_divide"].notebook))
    assert scores["torch_buckets_own_dist"].cells == {**everything, "ex1_test": 0, "ex3a_test": 0, "ex3b_test": 0}
    assert any("use only torch" in e for e in errors(scores["torch_buckets_own_dist"].notebook))
    assert any("PyTorch's own bucketing" in e for e in errors(scores["torch_buckets_own_dist"].notebook))
