"""Lab 11's vocabulary, the metrics that show each cause, the mysteries' launches and inputs, and
what a profile of each mystery shows (the grader recomputes the learner's evidence from it).

    from gpucourse.lessons import rootcauses
    kernel, grid, block, args = rootcauses.launch("brighten")   # fresh inputs each call
    rootcauses.evidence_values("brighten")                     # {metric: value} of its profile
    rootcauses.evidence_matches("brighten", metric, value)     # the value is what the profile shows
"""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import torch
from torch import nn

from gpucourse.errors import CourseError
from gpucourse.lessons.feeding import profile_counts, profile_ops
from gpucourse.lessons.feeding.syncs import SPY_PREFIX, SYNC_OPS
from gpucourse.lessons.rootcauses import kernels
from gpucourse.microscope import profile

# The fixed vocabulary: one word per cause the course teaches.
CAUSES = ("uncoalesced", "bank_conflicts", "divergence", "low_occupancy", "host_sync", "launch_bound",
          "unfused_chain", "no_tensor_cores")

_LD_ST = ("ld", "st")
# The metrics that show each cause (the course's book of root causes, in Nsight Compute's and the profiler's words).
CAUSE_METRICS = {
    "uncoalesced": tuple(f"l1tex__average_t_sectors_per_request_pipe_lsu_mem_global_op_{s}.ratio" for s in _LD_ST),
    "bank_conflicts": tuple(f"l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_{s}.sum" for s in _LD_ST) + tuple(
        f"l1tex__data_pipe_lsu_wavefronts_mem_shared_op_{s}.sum / smsp__sass_inst_executed_op_shared_{s}.sum"
        for s in _LD_ST),
    "divergence": ("smsp__thread_inst_executed_per_inst_executed.ratio",
                   "smsp__sass_branch_targets_threads_divergent.sum",
                   "smsp__sass_average_branch_targets_threads_uniform.pct"),
    "low_occupancy": ("sm__maximum_warps_per_active_cycle_pct", "launch__occupancy_limit_shared_mem",
                      "launch__occupancy_limit_registers"),
    "host_sync": ("aten::_local_scalar_dense", f"{SPY_PREFIX}…  (a row of the spy)"),
    "launch_bound": ("aten::<the repeated operator>  (its count per call)",),
    "unfused_chain": ("aten::<each elementwise operator>  (its count per call)",),
    "no_tensor_cores": ("aten::mm / aten::addmm dtypes",),
}

# What each cause looks like in a profile (lessons 02–05 and 08), in general: the same words for any code.
# Two causes that a reading of the code can confuse are told apart here, by what the counts show.
CAUSE_SIGNS = {
    "uncoalesced": "a warp's 32 loads of 4-byte words touch more than 4 sectors of 32 bytes",
    "bank_conflicts": "a shared-memory instruction needs more than 1 wavefront: lanes hit the same bank",
    "divergence": "fewer than 32 threads take part in an instruction: a warp's lanes took different branches",
    "low_occupancy": "fewer warps fit on an SM than it can hold, and the launch's limiter says why",
    "host_sync": "the host reads a tensor's value (aten::_local_scalar_dense, or a row of the spy)",
    "launch_bound": "one small operator runs once per tensor: its count grows with the number of tensors, "
                    "each launch does little work (the fix runs one operator over the whole list)",
    "unfused_chain": "several different elementwise operators run one after another over the same tensor, "
                     "each reading and writing all of it (the fix is one fused kernel)",
    "no_tensor_cores": "matrix products run in float32 where a lower precision would use the tensor cores",
}

KERNEL_MYSTERIES = ("brighten", "tally", "price_orders", "flip_blocks")
STEP_MYSTERIES = ("clipped_step", "decay_all")
MYSTERIES = KERNEL_MYSTERIES + STEP_MYSTERIES

SEED = 11  # the lab's inputs: the same every call, what learners profile
_TALLY_PER_THREAD = 4


def _inputs(name: str, seed: int) -> tuple:
    """((grid, block), args) of a kernel mystery. The lab's seed gives the sizes learners profile; any
    other seed also draws other sizes (a fix is judged there too: it must compute, not replay)."""
    rng = np.random.default_rng(seed)
    lab = seed == SEED
    if name == "brighten":
        height, width = ((kernels.HEIGHT, kernels.WIDTH) if lab
                         else (int(rng.integers(20, 41)), int(rng.integers(41, 61))))
        n = height * width
        return (-(-n // 128), 128), (np.zeros(n, np.float32), rng.random(n, dtype=np.float32), height, width)
    if name == "tally":
        blocks, per_thread = (2, _TALLY_PER_THREAD) if lab else (int(rng.integers(3, 6)), int(rng.integers(3, 7)))
        n = blocks * kernels.TALLY_BLOCK
        classes = rng.integers(0, kernels.BINS, n * per_thread).astype(np.int32)
        return (blocks, kernels.TALLY_BLOCK), (np.zeros(kernels.BINS * n, np.int32), classes, per_thread)
    if name == "price_orders":
        n = 256 if lab else 32 * int(rng.integers(9, 20))  # whole warps (a partial one diverges at the guard)
        return (-(-n // 128), 128), (np.zeros(n, np.float32), rng.integers(1, 5, n).astype(np.float32),
                                      rng.random(n, dtype=np.float32) * 10, rng.integers(0, 4, n).astype(np.int32))
    if name == "flip_blocks":
        blocks = 2 if lab else int(rng.integers(3, 7))
        n = blocks * 128
        return (blocks, 128), (np.zeros(n, np.float32), rng.random(n, dtype=np.float32))
    raise CourseError(f"no kernel mystery {name!r}; the kernel mysteries are {', '.join(KERNEL_MYSTERIES)}")


def launch(name: str, seed: int = SEED) -> tuple:
    """(kernel, grid, block, args) of a kernel mystery, with fresh inputs (the same every call for one
    seed); args[0] is out. Another seed draws other inputs and other sizes."""
    (grid, block), args = _inputs(name, seed)
    return getattr(kernels, name), grid, block, args


class _Net(nn.Module):
    def __init__(self, seed: int = SEED, hidden: int = 64):
        super().__init__()
        torch.manual_seed(seed)
        self.fc1, self.fc2 = nn.Linear(32, hidden), nn.Linear(hidden, 4)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


def step_inputs(name: str, seed: int = SEED) -> tuple:
    """The arguments of a step mystery, fresh (the same every call for one seed; another seed draws
    other values and other sizes)."""
    g = torch.Generator().manual_seed(seed)
    lab = seed == SEED
    if name == "clipped_step":
        batch = 16 if lab else int(torch.randint(8, 33, (), generator=g))
        model = _Net(seed, 64 if lab else int(torch.randint(16, 97, (), generator=g)))
        x, y = torch.randn(batch, 32, generator=g), torch.randn(batch, 4, generator=g) * 10
        return model, torch.optim.SGD(model.parameters(), lr=0.1), x, y
    if name == "decay_all":
        count = 24 if lab else int(torch.randint(30, 61, (), generator=g))
        shapes = [(8, 8)] * count if lab else [tuple(int(v) for v in torch.randint(2, 12, (2,), generator=g))
                                                for _ in range(count)]
        return [torch.randn(*shape, generator=g) for shape in shapes], 0.01 if lab else 0.03
    raise CourseError(f"no step mystery {name!r}; the step mysteries are {', '.join(STEP_MYSTERIES)}")


def step_counts(step, name: str) -> Counter:
    """What torch's profiler (and the host-sync spy) counts in one call of ``step`` on ``name``'s inputs."""
    return profile_counts(step, *step_inputs(name))


def _is_operator(event) -> bool:
    return event.name.startswith("aten::")


def top_level_ops(fn, *args) -> Counter:
    """The operators one call of ``fn`` asks for itself: torch's operators (``aten::…``) with no operator
    above them — what a GPU would launch, without the per-tensor work a CPU's fallback runs under
    ``aten::_foreach_*``. Annotations (``torch.profiler.record_function``, ``profiler::…``) are neither
    counted nor a parent: wrapping a loop in one changes nothing."""
    counts: Counter = Counter()
    for event in profile_ops(fn, *args):
        parent = event.cpu_parent
        while parent is not None and not _is_operator(parent):
            parent = parent.cpu_parent
        if _is_operator(event) and parent is None:
            counts[event.name] += 1
    return counts


def evidence_values(name: str) -> dict:
    """Every metric a profile of the mystery shows, with its value (what the grader checks evidence against)."""
    if name in KERNEL_MYSTERIES:
        kernel, grid, block, args = launch(name)
        return profile(kernel, grid, block, *args).values()
    if name in STEP_MYSTERIES:
        return dict(step_counts(getattr(kernels, name), name))
    raise CourseError(f"no mystery {name!r}; the mysteries are {', '.join(MYSTERIES)}")


def _same(a, b) -> bool:
    if isinstance(a, bool) or isinstance(b, bool) or not all(isinstance(v, (int, float)) for v in (a, b)):
        return a == b
    return math.isclose(float(a), float(b), rel_tol=1e-6, abs_tol=1e-9)


def evidence_matches(name: str, metric, value) -> bool:
    """True when ``metric`` is something the mystery's profile shows and ``value`` is what it shows."""
    values = evidence_values(name)
    return isinstance(metric, str) and metric in values and values[metric] is not None and _same(values[metric], value)


def shows(cause: str, metric) -> bool:
    """True when ``metric`` is one that shows ``cause`` (CAUSE_METRICS; for the profiler's causes, an
    operator row of the right kind)."""
    if cause not in CAUSES:
        raise CourseError(f"no cause {cause!r}; the vocabulary is {', '.join(CAUSES)}")
    if not isinstance(metric, str):
        return False
    if cause == "host_sync":
        return metric in SYNC_OPS or metric.startswith(SPY_PREFIX)
    if cause in ("launch_bound", "unfused_chain"):
        return metric.startswith("aten::") and metric not in SYNC_OPS
    return metric in CAUSE_METRICS[cause]
