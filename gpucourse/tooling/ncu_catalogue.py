"""The catalogue of agreement: course kernels that Nsight Compute profiled on a real GPU, and the microscope's
count of each, metric by metric.

``CATALOGUE`` holds 25 launches of lessons 02, 03, 04 and 04a (coalesced, strided, offset and AoS copies,
row and column copies, transposes with and without padding, the matmuls, the reduction ladder, per-lane vs
ballot atomics, uniform and divergent branches), each at the size ncu profiled it (``recorded``) and at a
size the simulator traces in well under a second (``traced``: fewer blocks of the same work, so counts are
compared per block; the matmuls keep their full depth). ``agreement()`` reads a recording
(``data/reference/<gpu>/ncu/catalogue-metrics.csv``), traces every launch and holds the microscope to
each metric's exactness claim; ``DIFFERENCES`` declares, with its reason, each place where the compiler
makes the hardware count differ from the source, and the check is then the declared relation.

Recording on a GPU (the quick GPU report does this where ncu is present)::

    ncu --clock-control none --csv --page raw --print-units base --metrics <collected_metric_names()> \\
        python -m gpucourse.tooling.ncu_catalogue > catalogue-metrics.csv

The program launches every kernel once, in ``CATALOGUE`` order, and prints the launches as JSON
(catalogue-launches.json); ``--small`` runs it at the traced sizes, ``--agreement`` prints the agreement table.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import numpy as np

from gpucourse.measure import ncu
from gpucourse.microscope.ncu_agreement import PREDICATED, SCALED, Relation, compare
from gpucourse.microscope.nsight import Profile

RECORD_TIMEOUT_S = 90.0  # the quick GPU report's budget for the catalogue under ncu
RECORDING_DIR = Path(__file__).resolve().parents[2] / "data" / "reference" / "nvidia-h100-80gb-hbm3" / "ncu"
F32 = np.float32


def _coalescing():
    from gpucourse.lessons.coalescing import kernels

    return kernels


def _tiling():
    from gpucourse.lessons.tiling import kernels

    return kernels


def _reductions():
    from gpucourse.lessons.reductions import kernels

    return kernels


def _divergence():
    from gpucourse.lessons.divergence import kernels

    return kernels


@dataclass(frozen=True)
class Launch:
    grid: int | tuple[int, ...]
    block: int | tuple[int, ...]
    size: int  # the problem size the arguments are built for


@dataclass(frozen=True)
class Entry:
    """One catalogue launch: its label in the recording, the kernel, the two sizes, how to build its arguments."""

    label: str
    kernel: Callable  # () -> the @cuda.jit kernel
    recorded: Launch
    traced: Launch
    args: Callable  # (size) -> the kernel's arguments, host arrays and numbers
    note: str

    def blocks(self, launch: Launch) -> int:
        return int(np.prod(launch.grid))


def _strided(stride: int, offset: int) -> Entry:
    def args(n):
        src = np.arange(n * stride + offset, dtype=F32)
        return src, np.zeros_like(src), n, stride, offset

    return Entry(f"strided_copy stride={stride} offset={offset}", lambda: _coalescing().strided_copy,
                 Launch(4096, 256, 1 << 20), Launch(2, 256, 512), args, "n elements, lane l reads l·stride + offset")


def _matrix(label: str, kernel: Callable, grid_of: Callable, block: tuple[int, int], note: str) -> Entry:
    def args(n):
        return np.arange(n * n, dtype=F32).reshape(n, n), np.zeros((n, n), dtype=F32)

    return Entry(label, kernel, Launch(grid_of(1024), block, 1024), Launch(grid_of(64), block, 64), args, note)


def _matmul(label: str, kernel: Callable) -> Entry:
    def args(m):
        return np.ones((m, m), dtype=F32), np.ones((m, m), dtype=F32), np.zeros((m, m), dtype=F32)

    # One block of the full 256-deep product: the counts per block depend on the depth.
    return Entry(label, kernel, Launch((16, 16), (16, 16), 256), Launch((1, 1), (16, 16), 256), args,
                 "256×256×256; traced: one 16×16 block of it")


def _reduction(label: str, factory: str, grid_divisor: int = 256) -> Entry:
    def args(k):
        return np.ones(k, dtype=F32), np.zeros(k // 256, dtype=F32)

    return Entry(label, lambda: getattr(_reductions(), factory)(256),
                 Launch((1 << 16) // grid_divisor, 256, 1 << 16), Launch(2, 256, 2 * grid_divisor), args,
                 "block 256, one block per 256 (warp shuffle: 512) elements")


def _count(label: str, name: str) -> Entry:
    def args(k):
        return (np.arange(k) % 4).astype(F32), F32(1.5), np.zeros(1, dtype=np.int32)

    return Entry(label, lambda: getattr(_reductions(), name), Launch(256, 256, 1 << 16), Launch(2, 256, 512), args,
                 "values 0,1,2,3 repeating: half the lanes of every warp pass")


def _two_paths(label: str, flags_of: Callable) -> Entry:
    def args(k):
        return flags_of(np.arange(k)).astype(np.uint8), np.ones(k, dtype=F32), np.zeros(k, dtype=F32), 16, 16

    return Entry(f"two_paths {label}", lambda: _divergence().two_paths, Launch(256, 256, 1 << 16),
                 Launch(2, 256, 512), args, "16 multiply-adds on each path")


def _drift(label: str) -> Entry:
    def args(m):
        if label == "drift_aos":
            return np.ones((m, 8), dtype=F32), 0.01
        return (*(np.ones(m, dtype=F32) for _ in range(6)), 0.01)

    return Entry(label, lambda: getattr(_coalescing(), label), Launch(256, 256, 1 << 16), Launch(2, 256, 512), args,
                 "particles of 8 float32 fields (AoS) or 6 arrays (SoA)")


CATALOGUE: tuple[Entry, ...] = (
    *(_strided(stride, offset) for stride, offset in ((1, 0), (2, 0), (4, 0), (8, 0), (32, 0), (1, 1))),
    _drift("drift_aos"),
    _drift("drift_soa"),
    _matrix("copy_rows", lambda: _coalescing().copy_rows, lambda n: (n // 32, n // 8), (32, 8), "x → column"),
    _matrix("copy_columns", lambda: _coalescing().copy_columns, lambda n: (n // 32, n // 8), (32, 8), "x → row"),
    _matrix("tile_copy", lambda: _tiling().copy_kernel(), lambda n: (n // 32, n // 32), (32, 8), "tile 32, 8 rows"),
    _matrix("naive_transpose", lambda: _tiling().naive_transpose_kernel(), lambda n: (n // 32, n // 32), (32, 8),
            "writes columns"),
    _matrix("shared_transpose pad=0", lambda: _tiling().shared_transpose_kernel(pad=0),
            lambda n: (n // 32, n // 32), (32, 8), "reads the tile by columns: 32-way"),
    _matrix("shared_transpose pad=1", lambda: _tiling().shared_transpose_kernel(pad=1),
            lambda n: (n // 32, n // 32), (32, 8), "a padded row: conflict-free"),
    _matmul("naive_matmul", lambda: _tiling().naive_matmul_kernel()),
    _matmul("tiled_matmul tile=16", lambda: _tiling().tiled_matmul_kernel(16)),
    _reduction("reduce_interleaved B=256", "interleaved_kernel"),
    _reduction("reduce_strided_index B=256", "strided_index_kernel"),
    _reduction("reduce_sequential B=256", "sequential_kernel"),
    _reduction("reduce_warp_shuffle B=256", "warp_shuffle_kernel", grid_divisor=512),
    _count("count_above_per_lane", "count_above_per_lane"),
    _count("count_above_ballot", "count_above_ballot"),
    _two_paths("uniform (all A)", lambda i: np.ones_like(i)),
    _two_paths("alternating lanes", lambda i: i % 2),
    _two_paths("by warp", lambda i: (i // 32) % 2),
)
BY_LABEL = {entry.label: entry for entry in CATALOGUE}

# Where ptxas makes the hardware's count differ from the source's, declared with the reason and the relation
# that must hold (tests/test_ncu_catalogue.py reads the reasons off the kernels' SASS, ptxas for sm_90).
_VECTORISED = ("ptxas merges a_tile[ty, kk..kk+3] (4 neighbouring floats of one thread) into one LDS.128: per "
               "warp and tile, 4 LDS.128 + 16 LDS = 20 instructions where the source has 32 loads")
_WAVEFRONTS = ("OBSERVED, not derived: ptxas's 4 LDS.128 (above) took 2 wavefronts each on an H100 and an H200, so "
               "8 + 16 = 24 wavefronts per warp and tile where the source's 32 loads take 32. The course's 16-byte "
               "rule (quarter-warp phases, gpucourse/microscope/analysis.py) would give 4 per LDS.128 (ratio 1): "
               "here lanes 0-15 read one 16-byte word and lanes 16-31 another, and the hardware evidently merges "
               "quarter-warp phases that ask for the same address. The microscope traces the source's scalar "
               "loads, never the LDS.128, so it cannot model the merge; the relation records what two GPUs did. "
               "The hardware counter adds a few cycles (<= 1e-3)")
_NOISE = ("no address conflicts; the hardware counter adds a few data-bank cycles: 60 in 786,492 wavefronts on an "
          "H100 (7.6e-5), 162 on an H200 (2.1e-4, its second run; none in its first): ≤ 1e-3")
NOISE_ALLOWANCE = 1e-3  # of ncu's shared-load wavefronts: the extra data-bank cycles two GPUs' counters showed
DIFFERENCES: dict[tuple[str, str], Relation] = {
    ("tiled_matmul tile=16", "smsp__sass_inst_executed_op_shared_ld.sum"):
        Relation(SCALED, _VECTORISED, Fraction(20, 32)),
    ("tiled_matmul tile=16", "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum"):
        Relation(SCALED, _WAVEFRONTS, Fraction(24, 32), allowance=NOISE_ALLOWANCE),
    ("tiled_matmul tile=16", "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum"):
        Relation(SCALED, _NOISE, Fraction(1), allowance=NOISE_ALLOWANCE),
    ("tiled_matmul tile=16", "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum / "
                             "smsp__sass_inst_executed_op_shared_ld.sum"):
        Relation(SCALED, "24 wavefronts per 20 instructions: derived from the two above, not independent evidence",
                 Fraction(6, 5),
                 allowance=NOISE_ALLOWANCE),
    ("count_above_ballot", "smsp__sass_average_branch_targets_threads_uniform.pct"):
        Relation(PREDICATED, "ptxas turns `if cuda.laneid == 0:` into an early EXIT of the other 31 lanes (no "
                 "branch): its only branch, the bounds check, is uniform; the source's lane-0 if diverges every warp"),
}
# The atomics: ncu's instruction count equals the microscope's (one per warp), with or without ptxas's warp
# aggregation; what aggregation changes, the updates per warp, is not in the recording.
ATOMIC_UPDATES = "(no ncu counter) global atomic updates by lanes"
ATOMIC_INSTRUCTIONS = "smsp__sass_inst_executed_op_global_atom.sum + smsp__sass_inst_executed_op_global_red.sum"


# Recorded beside the compared metrics, never compared with the microscope (it models L1-level counts only):
# what each says, and why it is collected (review gpu-recordings.md §5).
RECORDED_ONLY: dict[str, str] = {
    "sm__warps_active.avg.pct_of_peak_sustained_active":
        "achieved occupancy: resident warps ÷ warp slots, averaged over active cycles (lesson 05: a copy of "
        "one element per thread reaches far less than its theoretical occupancy)",
    "lts__t_sectors_srcunit_tex_op_read.sum":
        "L2 sectors read on behalf of L1 (lesson 03: the sectors the L1 asks for, below the sector model)",
    "dram__sectors_read.sum":
        "DRAM sectors read (lesson 03: whether a strided copy reads 1/8 or more of its sectors from DRAM)",
}
# Launch settings fixed by the launch itself (the calculator's arithmetic, given ncu's register count): they
# agree by construction, so the headline counts them apart, with the rows where both sides count 0.
LAUNCH_SETTINGS_PREFIX = "launch__"
LAUNCH_SETTINGS = ("sm__maximum_warps_per_active_cycle_pct",)


def collected_metric_names() -> list[str]:
    """What ``record`` asks ncu for: the compared metrics (``ncu_metric_names``), then the recorded-only ones."""
    from gpucourse.microscope.ncu_metrics import ncu_metric_names

    names = ncu_metric_names()
    return names + [m for m in RECORDED_ONLY if m not in names]


def headline(table) -> dict[str, int]:
    """The agreement counted honestly: of the compared rows that agree, how many are launch settings, how many
    are 0 = 0, and how many are non-trivial (the number worth quoting)."""
    import pandas as pd

    compared = table[table["agrees"].notna()]
    agree = compared["agrees"].astype(str) == "True"
    metric = compared["metric"].astype(str)
    launch = metric.str.startswith(LAUNCH_SETTINGS_PREFIX) | metric.isin(LAUNCH_SETTINGS)
    zero = (pd.to_numeric(compared["microscope"], errors="coerce") == 0) & (
        pd.to_numeric(compared["ncu"], errors="coerce") == 0) & ~launch
    return {"compared": len(compared), "agree": int(agree.sum()), "launch_settings": int((agree & launch).sum()),
            "zero": int((agree & zero).sum()), "non_trivial": int((agree & ~launch & ~zero).sum()),
            "disagree": int((~agree).sum())}


def summary(table) -> str:
    """One line for a report: the non-trivial agreeing rows first, then what the raw total holds."""
    h = headline(table)
    return (f"{h['non_trivial']} non-trivial (kernel, metric) rows agree with the microscope (of {h['compared']} "
            f"compared: {h['agree']} agree, of which {h['launch_settings']} are launch settings and {h['zero']} "
            f"are 0 = 0; {h['disagree']} disagree)")


def recorded_only(folder: Path = RECORDING_DIR):
    """label × RECORDED_ONLY metric: ncu's value, or None where the recording predates the metric."""
    import pandas as pd

    recorded = recorded_kernels(folder)
    rows = [{"kernel": label, **{m: _number(k.metrics.get(m)) for m in RECORDED_ONLY}}
            for label, k in recorded.items()]
    return pd.DataFrame(rows)


def _number(value) -> float | None:
    return float(value) if isinstance(value, (int, float)) else None


def trace_entry(entry: Entry, registers_per_thread=None, shared_config_bytes=None) -> Profile:
    """The microscope's profile of one catalogue launch at its traced size."""
    from gpucourse import microscope

    launch = entry.traced
    return microscope.profile(entry.kernel(), launch.grid, launch.block, *entry.args(launch.size),
                              registers_per_thread=registers_per_thread, shared_config_bytes=shared_config_bytes)


def recorded_launches(folder: Path = RECORDING_DIR) -> list[dict]:
    return json.loads((folder / "catalogue-launches.json").read_text())


def recorded_kernels(folder: Path = RECORDING_DIR) -> dict[str, ncu.NcuKernel]:
    """label -> ncu's row for it, matched by launch index."""
    kernels = ncu.parse_csv((folder / "catalogue-metrics.csv").read_text())
    by_id = {k.id: k for k in kernels}
    return {launch["label"]: by_id[launch["launch"]] for launch in recorded_launches(folder)}


def agreement(folder: Path = RECORDING_DIR, labels=None, differences=None):
    """One row per (kernel, metric): the microscope's value, ncu's, the relation that must hold, and whether it
    does (None: not comparable or not recorded)."""
    import pandas as pd

    differences = DIFFERENCES if differences is None else differences
    recorded = recorded_kernels(folder)
    rows = []
    for entry in CATALOGUE:
        if labels is not None and entry.label not in labels:
            continue
        raw = recorded[entry.label].metrics
        mine = trace_entry(entry, registers_per_thread=_int(raw.get("launch__registers_per_thread")),
                           shared_config_bytes=_int(raw.get("launch__shared_mem_config_size")))
        overrides = {metric: relation for (label, metric), relation in differences.items() if label == entry.label}
        mine_rows = compare(mine, raw, ncu_blocks=entry.blocks(entry.recorded), overrides=overrides,
                            kernel=entry.label)
        atomics = mine.value(ATOMIC_INSTRUCTIONS)
        for row in mine_rows:
            if row["metric"] == ATOMIC_UPDATES and atomics:
                row["reason"] = (f"{mine.value(ATOMIC_UPDATES) / atomics:g} updates per atomic instruction in the "
                                 "source (one per lane); ptxas's warp aggregation leaves the GPU 1, which ncu's "
                                 "instruction count cannot show")
        rows += mine_rows
    return pd.DataFrame(rows)


def disagreements(table) -> list[str]:
    """One line per (kernel, metric) that breaks its relation."""
    broken = table[table["agrees"] == False]  # noqa: E712  (None means: not compared)
    return [f"{r.kernel}: {r.metric} microscope {r.microscope!r} vs ncu {r.ncu!r} ({r.scale}); must be {r.relation}"
            for r in broken.itertuples()]


def _int(value) -> int | None:
    return int(value) if isinstance(value, (int, float)) else None


def record(folder: Path, ncu_path: str | None = None, small: bool = False,
           timeout_s: float = RECORD_TIMEOUT_S) -> Path:
    """Run the catalogue under ncu with the report's metrics and write what ``agreement()`` reads into ``folder``:
    catalogue-metrics.csv (ncu's stdout, as it is), catalogue-launches.json and provenance.json. The quick GPU
    report calls this where ncu is present."""
    import datetime
    import subprocess

    ncu_path = ncu_path or ncu.find_ncu()
    if ncu_path is None:
        raise ncu.NcuError(ncu.availability() or "ncu is not here")
    options = ["--clock-control", "none", "--csv", "--page", "raw", "--print-units", "base",
               "--metrics", ",".join(collected_metric_names())]
    program = ["-m", "gpucourse.tooling.ncu_catalogue", *(["--small"] if small else [])]
    command = [ncu_path, *options, sys.executable, *program]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, env=ncu.child_env())
    except subprocess.TimeoutExpired:
        raise ncu.NcuError(f"the catalogue took longer than {timeout_s:.0f} s under ncu") from None
    launches = next((line for line in done.stdout.splitlines() if line.startswith('[{"launch"')), None)
    if launches is None:
        raise ncu.NcuError(ncu.explain_failure(done.stdout + done.stderr) or
                           f"the catalogue did not run under ncu (exit {done.returncode})")
    ncu.parse_csv(done.stdout)  # fails here, with ncu's reason, rather than in a later reading
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "catalogue-metrics.csv").write_text(done.stdout)
    (folder / "catalogue-launches.json").write_text(launches + "\n")
    from gpucourse.measure.harness import provenance as stack_provenance

    command_text = " ".join(["ncu", *options, "python", *program])
    provenance = {  # data/reference/<gpu>/ncu/'s shape: the device and stack under their true names
        "device": stack_provenance(command_text), "ncu_version": ncu.ncu_version(ncu_path), "command": command_text,
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "files": {"catalogue-metrics.csv": "ncu's stdout: its ==PROF== lines and the program's JSON line come first",
                  "catalogue-launches.json": "launch index -> label, grid, block (the program's JSON line)"},
    }
    (folder / "provenance.json").write_text(json.dumps(provenance, indent=2) + "\n")
    return folder


def main(argv: list[str]) -> None:
    """Launch every catalogue kernel once, in order (under ncu on a GPU), and print the launches as JSON;
    with --agreement, print the agreement table with the recording instead (CSV)."""
    if "--agreement" in argv:
        print(agreement().to_csv(index=False), end="")
        return
    from numba import cuda  # gpucourse, imported with this module, has decided the mode

    from gpucourse.measure import runtime

    if not runtime.is_gpu():  # the plain simulator has no warp shuffles or votes; the microscope adds them
        from gpucourse.microscope import install_warp_intrinsics

        install_warp_intrinsics()
    small = "--small" in argv
    log = []
    for index, entry in enumerate(CATALOGUE):
        launch = entry.traced if small else entry.recorded
        args = [cuda.to_device(a) if isinstance(a, np.ndarray) else a for a in entry.args(launch.size)]
        entry.kernel()[launch.grid, launch.block](*args)
        cuda.synchronize()
        log.append({"launch": index, "label": entry.label, "grid": launch.grid, "block": launch.block,
                    "note": entry.note})
    print(json.dumps(log))


if __name__ == "__main__":
    main(sys.argv[1:])
