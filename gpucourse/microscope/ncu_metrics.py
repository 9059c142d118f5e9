"""Nsight Compute's vocabulary: the metrics the microscope reports under ncu's names, and how exact each is.

Every ``Metric`` names what a learner sees in Nsight Compute (the metric name and the label of its
section), what the microscope counts for it, whether that count is exact, and if not how and why
it differs, with the documentation it rests on. ``profile.py`` computes the microscope's values,
``gpucourse.measure.ncu`` asks ncu for exactly ``ncu_metric_names()``, and the catalogue of
agreement (``gpucourse.tooling.ncu_catalogue``) holds the microscope to each metric's claim.

The metric names are those of Nsight Compute 2025.3 on an H100 (``ncu --query-metrics``); launch__*
and sm__maximum_warps_per_active_cycle_pct are the Launch Statistics and Occupancy sections' own.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

# Where each claim comes from.
PROFILING_GUIDE = "https://docs.nvidia.com/nsight-compute/ProfilingGuide/index.html"
NCU_CLI = "https://docs.nvidia.com/nsight-compute/NsightComputeCli/index.html"
PROGRAMMING_GUIDE = "https://docs.nvidia.com/cuda/cuda-c-programming-guide/index.html"
BEST_PRACTICES = "https://docs.nvidia.com/cuda/cuda-c-best-practices-guide/index.html"
DOCS = {
    "memory tables": f"Nsight Compute Kernel Profiling Guide, 'Memory Tables' (L1/TEX: requests, sectors, "
    f"sectors per request; shared memory: wavefronts, bank conflicts) {PROFILING_GUIDE}",
    "metrics decoder": f"Nsight Compute Kernel Profiling Guide, 'Metrics Decoder' (smsp__/l1tex__ units, "
    f".sum/.ratio/.pct) {PROFILING_GUIDE}",
    "nvprof comparison": f"Nsight Compute CLI, 'nvprof Metric Comparison' (gld_transactions_per_request, "
    f"shared_load_transactions, warp_execution_efficiency, branch_efficiency) {NCU_CLI}#nvprof-metric-comparison",
    "device memory": f"CUDA C++ Programming Guide, 'Device Memory Accesses' (32-byte segments) "
    f"{PROGRAMMING_GUIDE}#device-memory-accesses",
    "coalescing": f"CUDA C++ Best Practices Guide, 'Coalesced Access to Global Memory' "
    f"{BEST_PRACTICES}#coalesced-access-to-global-memory",
    "shared memory": f"CUDA C++ Programming Guide, compute capability 5.x and later, 'Shared Memory' "
    f"(32 banks of 4 bytes, broadcast, 64-/128-bit accesses) {PROGRAMMING_GUIDE}#shared-memory-5-x",
    "shared matmul": f"CUDA C++ Best Practices Guide, 'Shared Memory in Matrix Multiplication' "
    f"{BEST_PRACTICES}#shared-memory-in-matrix-multiplication-c-ab",
    "simt": f"CUDA C++ Programming Guide, 'SIMT Architecture' (active lanes, divergence) "
    f"{PROGRAMMING_GUIDE}#simt-architecture",
    "branching": f"CUDA C++ Best Practices Guide, 'Branching and Divergence', 'Branch Predication' "
    f"{BEST_PRACTICES}#branching-and-divergence",
    "aggregated atomics": "NVIDIA Developer Blog, 'CUDA Pro Tip: Optimized Filtering with Warp-Aggregated "
    "Atomics' (the compiler aggregates since CUDA 9) https://developer.nvidia.com/blog/"
    "cuda-pro-tip-optimized-filtering-warp-aggregated-atomics/; seen here with ptxas 13 for sm_90 on "
    "count_above_per_lane: VOTEU.ANY, UFLO, POPC, then one @P0 REDG per warp",
    "occupancy": f"CUDA C++ Best Practices Guide, 'Occupancy' and 'Calculating Occupancy' "
    f"{BEST_PRACTICES}#occupancy; the course's calculator (cuda_occupancy.h, rule for rule)",
    "launch statistics": f"Nsight Compute Kernel Profiling Guide, 'Launch Statistics' and 'Occupancy' "
    f"sections {PROFILING_GUIDE}",
}

# How far a count can be trusted.
EXACT = "exact"
PER_ACCESS = "exact per source access"
SOURCE_LINES = "source lines, not SASS"
CALCULATOR = "calculator"
NOT_TRACED = "not traced"
EXACTNESS = {
    EXACT: "the microscope counts the event ncu counts, from the same addresses or launch",
    PER_ACCESS: "exact when each access in the source compiles to one instruction per warp; the note says "
    "what the compiler changes",
    SOURCE_LINES: "counted on source lines; ncu counts SASS instructions: compare patterns, not totals",
    CALCULATOR: "from the course's occupancy calculator: exact given the registers per thread",
    NOT_TRACED: "decided by the compiler, not visible in a simulated launch",
}

# How ncu's value of a metric is read from a profile's raw metrics.
VALUE, SUM, RATIO = "value", "sum", "ratio"


@dataclass(frozen=True)
class Metric:
    """One line of the report: ncu's name and label, the microscope's claim, and what ncu collects for it."""

    name: str  # as Nsight Compute names it (a formula for the few the report derives)
    label: str  # what the section's table calls it
    section: str
    unit: str
    exactness: str  # one of EXACTNESS
    note: str  # how the microscope's count relates to the hardware's
    docs: tuple[str, ...]  # keys of DOCS
    collect: tuple[str, ...] = ()  # the ncu metrics to ask for ((): the name itself; none for microscope-only)
    combine: str = VALUE  # VALUE: the one metric; SUM of collect; RATIO collect[0] / collect[1]
    microscope_only: bool = False  # no ncu counter measures it

    @property
    def ncu_names(self) -> tuple[str, ...]:
        if self.microscope_only:
            return ()
        return self.collect or (self.name,)

    def ncu_value(self, raw: dict):
        """ncu's value of this metric from one kernel's raw metrics (name -> number); None if not there."""
        names = self.ncu_names
        if not names or any(raw.get(n) is None for n in names):
            return None
        if self.combine == SUM:
            return sum(raw[n] for n in names)
        if self.combine == RATIO:
            return raw[names[0]] / raw[names[1]] if raw[names[1]] else None
        return raw[names[0]]

    def sources(self) -> list[str]:
        return [DOCS[key] for key in self.docs]


GLOBAL = "Memory Workload Analysis: global memory (L1/TEX)"
SHARED = "Memory Workload Analysis: shared memory"
CONTROL = "Instruction Statistics and Source Counters"
LAUNCH = "Launch Statistics and Occupancy"

_LDG = ("one request per warp for each executed load in the source (the lanes that run the k-th execution of a "
        "line together). ncu counts LDG instructions: fewer where ptxas merges a thread's neighbouring loads "
        "(LDG.64/.128) or reuses or hoists a load, more where it splits a wide one.")
_SECTORS = ("the 32-byte sectors each request's addresses touch (allocations 256-byte aligned), hit or miss: the "
            "T-stage counts both. Exact for the same requests; it says nothing about L1/L2 hit rates or DRAM bytes.")
_LDS = ("one instruction per warp for each executed shared access in the source. Fewer in ncu where ptxas "
        "vectorises a thread's neighbouring elements: the tiled matmul's a_tile[ty, kk..kk+3] is one LDS.128.")
_WAVEFRONTS = ("per request, the distinct 4-byte words its busiest bank must deliver (per 128-byte phase for 8- "
               "and 16-byte elements); lanes reading one word share it (broadcast). Exact for the same instructions.")
_CONFLICTS = ("wavefronts minus the ideal (one per phase), as ncu's SharedMemoryConflicts rule computes it. The "
              "hardware counter adds a few data-bank cycles no address pattern explains (60 in 786,492 "
              "wavefronts of the tiled matmul on an H100; ncu lists arbitration conflicts separately).")


def _stores(metric: Metric, label: str, **changes) -> Metric:
    """The store twin of a load metric: the same counter with op_st / shared_st in its names."""

    def store(name: str) -> str:
        return name.replace("_op_ld", "_op_st").replace("_shared_ld", "_shared_st")

    return replace(metric, name=store(metric.name), label=label, collect=tuple(store(n) for n in metric.collect),
                   **changes)


_LD_REQUESTS = Metric("l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum", "Global load requests", GLOBAL,
                      "request", PER_ACCESS, _LDG, ("memory tables", "device memory"))
_LD_SECTORS = Metric("l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum", "Global load sectors", GLOBAL, "sector",
                     PER_ACCESS, _SECTORS, ("memory tables", "device memory"))
_LD_PER_REQUEST = Metric(
    "l1tex__average_t_sectors_per_request_pipe_lsu_mem_global_op_ld.ratio", "Sectors/Req, global loads", GLOBAL,
    "sector/request", PER_ACCESS,
    "sectors ÷ requests: 4 for 32 lanes reading consecutive float32, up to 32. Exact for the same requests; a "
    "vectorised LDG.128 reads 16 bytes per lane and so has 16 sectors per request where coalesced.",
    ("memory tables", "coalescing", "nvprof comparison"),
    collect=("l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum", "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum"),
    combine=RATIO)
_LDS_INSTRUCTIONS = Metric("smsp__sass_inst_executed_op_shared_ld.sum", "Shared load instructions", SHARED, "inst",
                           PER_ACCESS, _LDS, ("memory tables", "shared memory"))
_LDS_WAVEFRONTS = Metric("l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum", "Shared load wavefronts", SHARED,
                         "wavefront", PER_ACCESS, _WAVEFRONTS, ("memory tables", "shared memory"))
_LDS_CONFLICTS = Metric("l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum", "Shared load bank conflicts",
                        SHARED, "conflict", PER_ACCESS, _CONFLICTS, ("memory tables", "shared memory", "shared matmul"))
_LDS_WAYS = Metric(
    "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum / smsp__sass_inst_executed_op_shared_ld.sum",
    "Shared loads: wavefronts per instruction ('n-way bank conflict')", SHARED, "wavefront/inst", PER_ACCESS,
    "the average conflict degree ncu's SharedMemoryConflicts rule reports (1 = conflict-free, 32 = one lane at a "
    "time). Exact for the same instructions; a vectorised LDS.128 has more wavefronts per instruction.",
    ("memory tables", "shared memory"),
    collect=("l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum", "smsp__sass_inst_executed_op_shared_ld.sum"),
    combine=RATIO)

METRICS: tuple[Metric, ...] = (
    _LD_REQUESTS,
    _LD_SECTORS,
    _LD_PER_REQUEST,
    _stores(_LD_REQUESTS, "Global store requests", note=_LDG.replace("load", "store").replace("LDG", "STG")),
    _stores(_LD_SECTORS, "Global store sectors"),
    _stores(_LD_PER_REQUEST, "Sectors/Req, global stores"),
    Metric("smsp__sass_inst_executed_op_global_atom.sum + smsp__sass_inst_executed_op_global_red.sum",
           "Global atomic instructions (ATOMG + REDG)", GLOBAL, "inst", PER_ACCESS,
           "one instruction per warp for each executed atomic in the source, however many lanes take part: the "
           "same count whether or not ptxas aggregates the warp's lanes (the microscope cannot tell ATOMG, whose "
           "result is used, from REDG).",
           ("memory tables", "aggregated atomics"),
           collect=("smsp__sass_inst_executed_op_global_atom.sum", "smsp__sass_inst_executed_op_global_red.sum"),
           combine=SUM),
    Metric("(no ncu counter) global atomic updates by lanes", "Atomic updates, one per lane", GLOBAL, "update",
           PER_ACCESS,
           "what the source asks for: one update per lane that runs the atomic. ptxas (CUDA 9 and later) turns a "
           "same-address atomic add into a warp vote and one update by a leader lane, so the hardware then makes "
           "1 update per warp where the microscope counts one per lane (count_above_per_lane: 16 per warp).",
           ("aggregated atomics",), microscope_only=True),
    _LDS_INSTRUCTIONS,
    _LDS_WAVEFRONTS,
    _LDS_CONFLICTS,
    _LDS_WAYS,
    _stores(_LDS_INSTRUCTIONS, "Shared store instructions", note=_LDS.replace("LDS.128", "STS.128")),
    _stores(_LDS_WAVEFRONTS, "Shared store wavefronts"),
    _stores(_LDS_CONFLICTS, "Shared store bank conflicts"),
    _stores(_LDS_WAYS, "Shared stores: wavefronts per instruction ('n-way bank conflict')"),
    Metric("smsp__sass_inst_executed_op_shared_atom.sum", "Shared atomic instructions", SHARED, "inst", PER_ACCESS,
           "one instruction per warp for each executed shared-memory atomic in the source.",
           ("memory tables", "shared memory")),
    Metric("smsp__inst_executed.sum", "Warp instructions executed", CONTROL, "inst", SOURCE_LINES,
           "the microscope counts warp issues of source lines: a line compiles to several SASS instructions (index "
           "arithmetic, loop control) or to none, so totals differ; the shape across kernels and lines is the "
           "lesson.",
           ("metrics decoder", "simt")),
    Metric("smsp__thread_inst_executed.sum", "Thread instructions executed", CONTROL, "inst", SOURCE_LINES,
           "active lanes summed over the warp issues of source lines (see Warp instructions executed).",
           ("metrics decoder", "simt")),
    Metric("smsp__thread_inst_executed_per_inst_executed.ratio",
           "Avg. active threads per executed instruction (÷ 32 = warp execution efficiency)", CONTROL, "thread",
           SOURCE_LINES,
           "active lanes per warp issue of a source line. Equal to 32 exactly when no warp splits; when warps "
           "split, SASS adds full-warp instructions (index arithmetic, loop control), turns short if-bodies into "
           "predicated ones and may aggregate atomics, so ncu's ratio differs (two_paths with alternating lanes: "
           "the microscope and ncu both well below 32).",
           ("nvprof comparison", "simt", "branching")),
    Metric("smsp__sass_average_branch_targets_threads_uniform.pct", "Branch efficiency (uniform branch targets)",
           CONTROL, "%", SOURCE_LINES,
           "among the warp issues of lines the lanes leave for two or more different next lines somewhere in the "
           "launch (ifs, loop tests), the share whose lanes all went the same way. ncu counts SASS branches: ptxas "
           "predicates short if-bodies and bounds checks (no branch at all: ncu shows 0 % of 0 branches) and "
           "unrolls loops, so percentages differ; whether any warp diverges is what both tell.",
           ("nvprof comparison", "branching", "simt")),
    Metric("smsp__sass_branch_targets.sum", "Branch targets executed", CONTROL, "branch", SOURCE_LINES,
           "warp issues of the lines the lanes leave for different next lines (see Branch efficiency); ptxas "
           "predicates short ifs (no branch) and unrolls loops, so counts differ. 0 in ncu: no SASS branch at all.",
           ("branching", "simt")),
    Metric("smsp__sass_branch_targets_threads_divergent.sum", "Divergent branches", CONTROL, "branch", SOURCE_LINES,
           "warp issues of a line after which the warp's lanes went to two or more different next lines; ncu counts "
           "SASS branches, where predicated code has none.",
           ("branching", "simt")),
    Metric("launch__thread_count", "Threads", LAUNCH, "thread", EXACT, "the launch's threads (grid × block).",
           ("launch statistics",)),
    Metric("launch__shared_mem_per_block_static", "Static Shared Memory Per Block", LAUNCH, "byte/block", EXACT,
           "the kernel's cuda.shared.array bytes, each array 16-byte aligned as NVVM lays out the course's "
           "kernels.",
           ("launch statistics",)),
    Metric("launch__shared_mem_per_block_dynamic", "Dynamic Shared Memory Per Block", LAUNCH, "byte/block", EXACT,
           "the launch's dynamic shared memory (trace(..., dynamic_shared_bytes=)).", ("launch statistics",)),
    Metric("launch__registers_per_thread", "Registers Per Thread", LAUNCH, "register/thread", NOT_TRACED,
           "ptxas decides it; a simulated launch cannot see it. Pass registers_per_thread= (on a GPU: "
           "kernel.get_regs_per_thread(); without one: gpucourse.measure.ptxinfo.resource_usage(kernel, "
           "signature).registers).",
           ("launch statistics",)),
    Metric("launch__occupancy_limit_registers", "Block Limit Registers", LAUNCH, "block", CALCULATOR,
           "blocks per SM the registers allow (none given: no limit is computed).", ("occupancy", "launch statistics")),
    Metric("launch__occupancy_limit_shared_mem", "Block Limit Shared Mem", LAUNCH, "block", CALCULATOR,
           "blocks per SM the shared memory allows, with the largest carve-out; the driver picks a smaller one at "
           "run time (ncu's launch__shared_mem_config_size) and ncu's limit uses that.",
           ("occupancy", "launch statistics")),
    Metric("launch__occupancy_limit_warps", "Block Limit Warps", LAUNCH, "block", CALCULATOR,
           "blocks per SM the warp slots allow.", ("occupancy", "launch statistics")),
    Metric("launch__occupancy_limit_blocks", "Block Limit SM", LAUNCH, "block", CALCULATOR,
           "the SM's fixed maximum of resident blocks.", ("occupancy", "launch statistics")),
    Metric("sm__maximum_warps_per_active_cycle_pct", "Theoretical Occupancy", LAUNCH, "%", CALCULATOR,
           "active warps ÷ warp slots for the smallest of the four limits (none for the registers when they "
           "are not given).",
           ("occupancy", "launch statistics")),
    Metric("(smallest launch__occupancy_limit_*)", "Occupancy limiter", LAUNCH, "", CALCULATOR,
           "the limit(s) that bind, named together on a tie as NVIDIA's calculator does.",
           ("occupancy",), microscope_only=True),
)

BY_NAME = {metric.name: metric for metric in METRICS}


# A few rows by topic, for lessons (``Profile.table(rows)``, ``measure.ncu.beside_recorded``).
TOPICS = {
    "global": ("l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum", "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum",
               "l1tex__average_t_sectors_per_request_pipe_lsu_mem_global_op_ld.ratio",
               "l1tex__average_t_sectors_per_request_pipe_lsu_mem_global_op_st.ratio"),
    "shared": ("smsp__sass_inst_executed_op_shared_ld.sum", "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum",
               "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",
               "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum / smsp__sass_inst_executed_op_shared_ld.sum",
               "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum / smsp__sass_inst_executed_op_shared_st.sum"),
    "control": ("smsp__thread_inst_executed_per_inst_executed.ratio",
                "smsp__sass_average_branch_targets_threads_uniform.pct",
                "smsp__sass_branch_targets_threads_divergent.sum"),
    "first look": ("l1tex__average_t_sectors_per_request_pipe_lsu_mem_global_op_ld.ratio",
                   "smsp__thread_inst_executed_per_inst_executed.ratio", "sm__maximum_warps_per_active_cycle_pct"),
    "occupancy": ("launch__thread_count", "launch__registers_per_thread", "sm__maximum_warps_per_active_cycle_pct",
                  "(smallest launch__occupancy_limit_*)"),
}


def ncu_metric_names() -> list[str]:
    """Every ncu metric the report needs, in report order, each once: the --metrics list for ncu. The
    launch__* attributes are left out: ncu's raw page prints all of them anyway."""
    names: list[str] = []
    for metric in METRICS:
        names += [n for n in metric.ncu_names if n not in names and not n.startswith("launch__")]
    return names
