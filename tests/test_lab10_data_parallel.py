"""Lab 10 (buckets that overlap) through real nbgrader: the solution scores full marks, the untouched lab 0, and
the known-wrong submissions lose exactly the points of what they get wrong:

* buckets in forward order, or a bucket that closes only *above* its limit (exercise 1; forward buckets also
  cost exercise 3, whose Reducer uses them: each all-reduce must carry one bucket of the rule);
* exposed time with no single stream (each all-reduce starts when its bucket is ready; exercise 2);
* a Reducer that all-reduces everything in ``finish()`` (right gradients, no overlap): 3b;
* hostile, evidence not tied to the work: a Reducer that launches every bucket from the last hook (every call
  "during backward", none overlapping): 3b (the first bucket's all-reduce must start while later buckets'
  gradients are missing, seen by the grader's own hooks);
* the lesson's copying reducer retyped (torch.cat in, copy back out): 3c (the gradients must end in the buffer
  the all-reduce was given);
* hostile, another reduction path while the course's Comm counts decoys (zeros of the right size): the real
  all-reduce through ``torch.distributed`` reached by a constructed name, or the process group's own
  ``allreduce``: 3a, 3b, 3c (the payload checksums and the tripwire in the rank processes);
* hostile, PyTorch's bucketing reached by a constructed name (exercise 1, and inside the processes) with a
  Reducer that wraps the model in DDP: exercises 1 and 3;
* hostile, the lesson's bucketing as a default argument (the spelling check does not see it): exercise 1 by
  the tripwire (and exercise 3, whose code cannot travel with such a default);
* the course patched (labtools.COURSE_PATCH), and the untouched lab behind IPython hooks: 0.

Graded on what the two gloo processes saw and the gradients they end with, never on time."""

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


GETATTR = "type(torch).__getattribute__(torch, "  # a name built at run time, past every spelling check
LAUNCH = "                self.pending.append((b, self.comm.all_reduce(self.buffers[b], async_op=True)))\n"


def test_lab10_round_trip(tmp_path):
    released = course_copy(tmp_path / "release", LAB) / "labs" / LAB / f"{LAB}.ipynb"
    untouched = nbformat.read(released, as_version=4)
    assert "BEGIN SOLUTION" not in released.read_text() and "BEGIN HIDDEN" not in released.read_text()
    assert "self.missing[b] -= 1" not in released.read_text()  # the answer is not in the released lab
    solution = solution_notebook(LAB)
    forward = _changed("ex1_solution", "for index in reversed(range(len(param_bytes))):",
                       "for index in range(len(param_bytes)):")
    above = _changed("ex1_solution", "if size >= limit:", "if size > limit:")
    no_stream = ("def exposed_s(ready_s, comm_s, backward_end_s):\n"
                 "    return max(0.0, max(r + c for r, c in zip(ready_s, comm_s)) - backward_end_s)\n")
    in_finish = _changed("ex3_solution", "            if self.missing[b] == 0:",
                         "            if False:").replace(
        "    def finish(self):\n",
        "    def finish(self):\n        for b in range(len(self.buckets)):\n"
        "            self.pending.append((b, self.comm.all_reduce(self.buffers[b], async_op=True)))\n")
    last_hook = _changed("ex3_solution", "            if self.missing[b] == 0:\n" + LAUNCH,
                         "            if not any(self.missing):\n"
                         "                for c in range(len(self.buckets)):\n"
                         "                    work = self.comm.all_reduce(self.buffers[c], async_op=True)\n"
                         "                    self.pending.append((c, work))\n")
    copies = ("class Reducer:\n"
              "    def __init__(self, model, comm, cap_bytes, first_bucket_bytes):\n"
              "        self.params, self.comm = list(model.parameters()), comm\n"
              "        self.buckets = assign_buckets([p.numel() * p.element_size() for p in self.params], cap_bytes,\n"
              "                                      first_bucket_bytes)\n"
              "        self.bucket_of = {i: b for b, members in enumerate(self.buckets) for i in members}\n"
              "        self.missing, self.pending = [len(b) for b in self.buckets], []\n"
              "        for i, p in enumerate(self.params):\n"
              "            p.register_post_accumulate_grad_hook(self._hook(i))\n\n"
              "    def _hook(self, index):\n"
              "        def hook(param):\n"
              "            b = self.bucket_of[index]\n"
              "            self.missing[b] -= 1\n"
              "            if self.missing[b] == 0:\n"
              "                flat = torch.cat([self.params[i].grad.reshape(-1) for i in self.buckets[b]])\n"
              "                self.pending.append((b, flat, self.comm.all_reduce(flat, async_op=True)))\n"
              "        return hook\n\n"
              "    def finish(self):\n"
              "        for b, flat, work in self.pending:\n"
              "            work.wait()\n"
              "            flat /= self.comm.world\n"
              "            offset = 0\n"
              "            for i in self.buckets[b]:\n"
              "                g = self.params[i].grad\n"
              "                g.copy_(flat[offset:offset + g.numel()].view_as(g))\n"
              "                offset += g.numel()\n"
              "        self.pending, self.missing = [], [len(b) for b in self.buckets]\n")
    renamed = _changed("ex3_solution", LAUNCH,
                       "                self.comm.all_reduce(torch.zeros_like(self.buffers[b]))  # a decoy, counted\n"
                       f"                d = {GETATTR}'distri' + 'buted')\n"
                       "                self.pending.append((b, d.all_reduce(self.buffers[b], async_op=True)))\n")
    group = _changed("ex3_solution", LAUNCH,
                     "                self.comm.all_reduce(torch.zeros_like(self.buffers[b]))  # a decoy, counted\n"
                     f"                g = {GETATTR}'distri' + 'buted').distributed_c10d._get_default_group()\n"
                     "                self.pending.append((b, g.allreduce([self.buffers[b]])))\n")
    torch_buckets = ("def assign_buckets(param_bytes, cap_bytes, first_bucket_bytes=None):\n"
                     f"    d = {GETATTR}'distri' + 'buted')\n"
                     "    order = list(reversed(range(len(param_bytes))))\n"
                     "    ts = [torch.empty(param_bytes[i], dtype=torch.uint8, device='meta') for i in order]\n"
                     "    limits = [cap_bytes] if first_bucket_bytes is None else [first_bucket_bytes, cap_bytes]\n"
                     "    f = type(d).__getattribute__(d, '_compute_bucket_' + 'assignment_by_size')\n"
                     "    return [list(b) for b in f(ts, limits, [False] * len(ts), order)[0]] if ts else []\n")
    ddp = ("class Reducer:\n"
           "    def __init__(self, model, comm, cap_bytes, first_bucket_bytes):\n"
           "        self.comm, self.model = comm, torch.nn.parallel.DistributedDataParallel(model)\n\n"
           "    def finish(self):\n"
           "        for p in self.model.parameters():\n"
           "            self.comm.all_reduce(torch.zeros_like(p.grad))\n")
    default_arg = ("def assign_buckets(param_bytes, cap_bytes, first_bucket_bytes=None,\n"
                   "                   _rule=dataparallel.assign_buckets):\n"
                   "    return _rule(param_bytes, cap_bytes, first_bucket_bytes)\n")
    # independent mistakes share a submission (each notebook runs the two processes four times)
    scores = grade_lab(LAB, {
        "solution": solution,
        "untouched": untouched,
        "no_stream_in_finish": with_cells(solution, {"ex2_solution": no_stream, "ex3_solution": in_finish}),
        "closes_above_last_hook": with_cells(solution, {"ex1_solution": above, "ex3_solution": last_hook}),
        "copies": with_cells(solution, {"ex3_solution": copies}),
        "forward_renamed_collective": with_cells(solution, {"ex1_solution": forward, "ex3_solution": renamed}),
        "process_group": with_cells(solution, {"ex3_solution": group}),
        "torch_buckets_ddp": with_cells(solution, {"ex1_solution": torch_buckets, "ex3_solution": ddp}),
        "default_arg": with_cells(solution, {"ex1_solution": default_arg}),
        # forward-order buckets behind a patch of the course's checks: 0 (GraderIntegrity)
        "patched_course": with_course_patched(with_cells(solution, {"ex1_solution": forward})),
        **with_ipython_hooks(untouched),  # no answers, behind IPython hooks (labtools.IPYTHON_HOOKS): 0
    }, tmp_path / "grade")
    everything = {"ex1_test": 4, "ex2_test": 4, "ex3a_test": 3, "ex3b_test": 1, "ex3c_test": 2}
    no_ex3 = {"ex3a_test": 0, "ex3b_test": 0, "ex3c_test": 0}
    assert scores["solution"].cells == everything
    assert scores["solution"].total == scores["solution"].max_score == 14
    assert scores["untouched"].cells == dict.fromkeys(everything, 0)
    assert scores["no_stream_in_finish"].cells == {**everything, "ex2_test": 0, "ex3b_test": 0}
    assert scores["closes_above_last_hook"].cells == {**everything, "ex1_test": 0, "ex3b_test": 0}
    assert any("every gradient" in e for e in errors(scores["closes_above_last_hook"].notebook))
    assert scores["copies"].cells == {**everything, "ex3c_test": 0}
    assert scores["forward_renamed_collective"].cells == {**everything, "ex1_test": 0, **no_ex3}
    assert any("torch.distributed directly" in e for e in errors(scores["forward_renamed_collective"].notebook))
    assert scores["process_group"].cells == {**everything, **no_ex3}
    assert any("process group directly" in e for e in errors(scores["process_group"].notebook))
    assert scores["torch_buckets_ddp"].cells == {**everything, "ex1_test": 0, **no_ex3}
    assert any("PyTorch's DDP reduces the gradients itself" in e for e in errors(scores["torch_buckets_ddp"].notebook))
    assert scores["default_arg"].cells == {**everything, "ex1_test": 0, **no_ex3}
    assert scores["patched_course"].total == 0
