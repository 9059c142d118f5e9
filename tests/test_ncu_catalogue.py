"""The catalogue of agreement: the microscope against every row Nsight Compute recorded on an H100.

Equal where a metric is declared exact; where ptxas makes the hardware's count differ from the source's
(vectorised shared loads, predicated branches, aggregated atomics), the declared relation, with its
reason, must hold, and must be needed. The microscope's counts are also checked against counts worked out
by hand, so that the catalogue means something even where no recording exists."""

import csv
import importlib.util
import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from gpucourse.measure import ptxinfo
from gpucourse.microscope import ncu_metrics
from gpucourse.microscope.ncu_agreement import default_relation, holds
from gpucourse.microscope.ncu_metrics import BY_NAME
from gpucourse.tooling import ncu_catalogue as catalogue

pytestmark = pytest.mark.skipif(not (catalogue.RECORDING_DIR / "catalogue-metrics.csv").exists(),
                                reason=f"no ncu recording in {catalogue.RECORDING_DIR}: record one on a GPU first")

LD_PER_REQUEST = "l1tex__average_t_sectors_per_request_pipe_lsu_mem_global_op_ld.ratio"
ST_PER_REQUEST = "l1tex__average_t_sectors_per_request_pipe_lsu_mem_global_op_st.ratio"
LD_REQUESTS = "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum"
LDS = "smsp__sass_inst_executed_op_shared_ld.sum"
LDS_CONFLICTS = "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum"
STS_CONFLICTS = "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum"
THREADS = "smsp__thread_inst_executed_per_inst_executed.ratio"
UNIFORM = "smsp__sass_average_branch_targets_threads_uniform.pct"
ATOMICS = catalogue.ATOMIC_INSTRUCTIONS
UPDATES = catalogue.ATOMIC_UPDATES

# Worked out by hand (counts per block of 8 warps, ratios as they are), independent of any recording.
BY_HAND = {
    **{(f"strided_copy stride={s} offset=0", LD_PER_REQUEST): min(4 * s, 32) for s in (1, 2, 4, 8, 32)},
    ("strided_copy stride=1 offset=1", LD_PER_REQUEST): 5,  # 128 bytes straddle 5 sectors
    ("drift_aos", LD_REQUESTS): 8 * 6,  # 3 lines × 2 loads per warp
    ("drift_aos", LD_PER_REQUEST): 32,  # 32-byte particles: one sector per lane
    ("drift_soa", LD_PER_REQUEST): 4,
    ("copy_columns", ST_PER_REQUEST): 32,
    ("naive_transpose", LD_PER_REQUEST): 4,
    ("naive_transpose", ST_PER_REQUEST): 32,
    ("shared_transpose pad=0", LDS_CONFLICTS): 8 * 4 * 31,  # 4 column reads per warp, 32-way each
    ("shared_transpose pad=1", LDS_CONFLICTS): 0,
    ("naive_matmul", LD_REQUESTS): 8 * 2 * 256,  # A and B for each of 256 k
    ("naive_matmul", LD_PER_REQUEST): 2,  # 2 rows of A (broadcast), or 2 × 64 bytes of B
    ("tiled_matmul tile=16", LDS): 8 * 16 * 32,  # 16 tiles × 16 k × 2 loads per warp
    # 2·s·tid strides the banks: ways − 1 for s = 1 … 128 is 1·4 warps, 3·2, 7, 7, 7, 3, 1, 0 = 35 per access
    ("reduce_strided_index B=256", LDS_CONFLICTS): 2 * 35,
    ("reduce_strided_index B=256", STS_CONFLICTS): 35,
    ("reduce_sequential B=256", LDS_CONFLICTS): 0,
    ("count_above_per_lane", ATOMICS): 8,  # one instruction per warp
    ("count_above_per_lane", UPDATES): 8 * 16,  # one update per passing lane: half of them
    ("count_above_ballot", UPDATES): 8,  # lane 0 adds the warp's popcount
    ("two_paths by warp", THREADS): 32,
    ("two_paths uniform (all A)", UNIFORM): 100,
}


@pytest.fixture(scope="module")
def table():
    return catalogue.agreement()


def test_the_catalogue_is_the_program_ncu_profiled():
    launches = catalogue.recorded_launches()
    assert len(catalogue.CATALOGUE) == len(launches) >= 12
    for entry, launch in zip(catalogue.CATALOGUE, launches, strict=True):
        grid = list(entry.recorded.grid) if isinstance(entry.recorded.grid, tuple) else entry.recorded.grid
        block = list(entry.recorded.block) if isinstance(entry.recorded.block, tuple) else entry.recorded.block
        assert (entry.label, grid, block) == (launch["label"], launch["grid"], launch["block"])
    kernels = catalogue.recorded_kernels()
    assert all(kernels[e.label].blocks == e.blocks(e.recorded) for e in catalogue.CATALOGUE)


def test_every_recorded_row_agrees_with_the_microscope(table):
    assert catalogue.disagreements(table) == []
    assert set(table.kernel) == set(catalogue.BY_LABEL)
    # The exact global-memory ratios are compared for every kernel: nothing slips through as "not compared".
    ratios = table[table.metric == LD_PER_REQUEST]
    assert len(ratios) == len(catalogue.CATALOGUE) and ratios.agrees.eq(True).all()
    compared = table[table.agrees.notna()]
    assert len(compared) >= 20 * len(catalogue.CATALOGUE)


OTHER_RECORDINGS = sorted(p for p in catalogue.RECORDING_DIR.parents[1].glob("*/ncu") if p != catalogue.RECORDING_DIR)


@pytest.mark.parametrize("folder", OTHER_RECORDINGS, ids=[p.parent.name for p in OTHER_RECORDINGS])
def test_every_other_gpus_recording_agrees_too(folder):
    # the same program under ncu on another GPU (the H200's quick report): the same relations hold
    table = catalogue.agreement(folder)
    assert catalogue.disagreements(table) == []
    assert int(table.agrees.notna().sum()) >= 20 * len(catalogue.CATALOGUE)


def test_the_microscope_matches_the_counts_worked_out_by_hand(table):
    values = table.set_index(["kernel", "metric"]).microscope
    wrong = {key: values[key] for key, expected in BY_HAND.items() if values[key] != expected}
    assert wrong == {}


def test_each_declared_difference_holds_and_is_needed(table):
    raw = catalogue.recorded_kernels()
    rows = table.set_index(["kernel", "metric"])
    assert catalogue.DIFFERENCES
    for (label, metric_name), relation in catalogue.DIFFERENCES.items():
        row = rows.loc[(label, metric_name)]
        assert row.agrees is True and row.relation == relation.describe(), (label, metric_name)
        metric = BY_NAME[metric_name]
        plain = default_relation(metric, raw[label].metrics)
        assert holds(plain, metric, row.microscope, row.ncu, raw[label].metrics) is False, (
            f"{label}: {metric_name} agrees without its declared difference: drop it from DIFFERENCES")


def test_the_atomics_difference_is_stated_not_hidden(table):
    rows = table.set_index(["kernel", "metric"])
    for label in ("count_above_per_lane", "count_above_ballot"):
        # One REDG per warp on the H100, one atomic per warp in the microscope: equal.
        assert rows.loc[(label, ATOMICS)].agrees is True and rows.loc[(label, ATOMICS)].ncu == 8
        updates = rows.loc[(label, UPDATES)]
        assert updates.agrees is None and pd.isna(updates.ncu)  # no ncu counter: shown, with the reason
        assert "aggregation" in updates.reason
    assert rows.loc[("count_above_per_lane", UPDATES)].reason.startswith("16 updates per atomic instruction")


def test_a_disagreement_fails_naming_the_kernel_and_the_metric(tmp_path):
    for name in ("catalogue-launches.json", "catalogue-metrics.csv"):
        shutil.copy(catalogue.RECORDING_DIR / name, tmp_path / name)
    lines = (tmp_path / "catalogue-metrics.csv").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith('"ID"'))
    rows = list(csv.reader(lines[start:]))
    column = rows[0].index(LDS_CONFLICTS)
    row = next(r for r in rows if r[0] == "13")  # shared_transpose pad=1: no conflicts recorded
    row[column] = "32,768"  # planted: as if padding had not helped
    out = io.StringIO()
    csv.writer(out, quoting=csv.QUOTE_ALL, lineterminator="\n").writerows(rows)
    (tmp_path / "catalogue-metrics.csv").write_text("\n".join(lines[:start]) + "\n" + out.getvalue())
    planted = catalogue.agreement(tmp_path, labels={"shared_transpose pad=1"})
    broken = catalogue.disagreements(planted)
    assert len(broken) == 1
    assert broken[0].startswith(f"shared_transpose pad=1: {LDS_CONFLICTS} microscope 0.0 vs ncu 32.0 (per block)")


# The declared differences rest on what ptxas makes of the kernels: checked on their SASS where the CUDA
# wheels' ptxas and a cuobjdump (Triton's, or the toolkit's) are here, without a GPU.
SASS_CHILD = r"""
import os, sys
os.environ.pop("NUMBA_ENABLE_CUDASIM", None)
from numba import cuda  # the real CUDA target: it compiles to PTX without a GPU
os.environ["GPUCOURSE_MODE"] = "sim"
os.environ["NUMBA_ENABLE_CUDASIM"] = "1"  # numba.cuda is already the real one
from gpucourse.lessons.reductions import kernels as reductions
from gpucourse.lessons.tiling import kernels as tiling
jobs = {"per_lane": (reductions.count_above_per_lane, "void(float32[::1], float32, int32[::1])"),
        "ballot": (reductions.count_above_ballot, "void(float32[::1], float32, int32[::1])"),
        "tiled": (tiling.tiled_matmul_kernel(16), "void(float32[:,::1], float32[:,::1], float32[:,::1])")}
for name, (kernel, signature) in jobs.items():
    ptx, _ = cuda.compile_ptx(kernel.py_func, signature, cc=(9, 0))
    open(os.path.join(sys.argv[1], name + ".ptx"), "w").write(ptx)
"""


def _cuobjdump() -> str | None:
    found = shutil.which("cuobjdump")
    if found:
        return found
    spec = importlib.util.find_spec("triton")  # Triton's wheel carries one
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(spec.submodule_search_locations[0]) / "backends" / "nvidia" / "bin" / "cuobjdump"
    return str(path) if path.exists() else None


def test_the_declared_differences_are_what_ptxas_makes_of_the_kernels(tmp_path):
    ptxas, cuobjdump = ptxinfo.find_ptxas(), _cuobjdump()
    if ptxas is None or cuobjdump is None:
        pytest.skip("needs ptxas (the CUDA wheels) and cuobjdump (Triton's or the toolkit's)")
    env = {**os.environ, "PYTHONPATH": str(catalogue.RECORDING_DIR.parents[3])}
    env.pop("NUMBA_ENABLE_CUDASIM", None)
    subprocess.run([sys.executable, "-c", SASS_CHILD, str(tmp_path)], check=True, env=env, timeout=300)
    sass = {}
    for name in ("per_lane", "ballot", "tiled"):
        cubin = tmp_path / f"{name}.cubin"
        subprocess.run([str(ptxas), "-arch=sm_90", str(tmp_path / f"{name}.ptx"), "-o", str(cubin)], check=True)
        sass[name] = subprocess.run([cuobjdump, "-sass", str(cubin)], capture_output=True, text=True,
                                    check=True).stdout
    # The per-lane atomic: a warp vote, a leader lane, one REDG for the warp.
    assert "VOTEU.ANY" in sass["per_lane"] and "POPC" in sass["per_lane"]
    assert sass["per_lane"].count("REDG") == 1 and " BRA " not in sass["per_lane"].replace("BRA 0x", "")
    # The ballot: lane 0's if is an early EXIT of the other lanes; the only conditional branch is uniform.
    assert sass["ballot"].count("EXIT") >= 2 and sass["ballot"].count("@P0 BRA") == 1
    # The tiled matmul, fully unrolled: per tile 4 LDS.128 (a_tile's row) and 16 LDS (b_tile's column).
    assert sass["tiled"].count("LDS.128") == 4 and sass["tiled"].count("LDS ") == 16


def test_record_writes_what_agreement_reads(tmp_path, monkeypatch):
    # A stand-in for ncu on a GPU: it prints the H100's recorded output and notes its command line.
    fake = tmp_path / "ncu"
    fake.write_text(f"#!/bin/sh\necho \"$@\" >> {tmp_path / 'argv.txt'}\n"
                    f"cat {catalogue.RECORDING_DIR / 'catalogue-metrics.csv'}\n")
    fake.chmod(0o755)
    out = catalogue.record(tmp_path / "recording", ncu_path=str(fake))
    recorded = (catalogue.RECORDING_DIR / "catalogue-metrics.csv").read_text()
    assert (out / "catalogue-metrics.csv").read_text() == recorded
    assert json.loads((out / "catalogue-launches.json").read_text()) == catalogue.recorded_launches()
    provenance = json.loads((out / "provenance.json").read_text())
    assert provenance["command"].endswith("python -m gpucourse.tooling.ncu_catalogue")
    argv = next(line for line in (tmp_path / "argv.txt").read_text().splitlines() if "--metrics" in line).split()
    asked = argv[argv.index("--metrics") + 1].split(",")
    assert asked[:len(ncu_metrics.ncu_metric_names())] == ncu_metrics.ncu_metric_names()
    assert asked[len(ncu_metrics.ncu_metric_names()):] == list(catalogue.RECORDED_ONLY)  # recorded, not compared
    assert catalogue.recorded_kernels(out)["count_above_ballot"].id == 21


# --- recorded-only metrics and the honest headline (review gpu-recordings.md §5, §6 item 8) ---


def test_recorded_only_metrics_are_collected_and_never_compared(table):
    assert set(catalogue.RECORDED_ONLY) == {"sm__warps_active.avg.pct_of_peak_sustained_active",
                                            "lts__t_sectors_srcunit_tex_op_read.sum", "dram__sectors_read.sum"}
    names = catalogue.collected_metric_names()
    assert len(names) == len(set(names)) and set(catalogue.RECORDED_ONLY) <= set(names)
    # none of them is a compared metric: the microscope models L1-level counts only
    assert not set(catalogue.RECORDED_ONLY) & set(BY_NAME) and not set(catalogue.RECORDED_ONLY) & set(table.metric)
    # ncu's raw page already printed two of them on the H100; the DRAM counter is "not recorded" (None) until a
    # recording asks for it, never a made-up number
    values = catalogue.recorded_only().set_index("kernel")
    assert list(values.index) == [e.label for e in catalogue.CATALOGUE]
    achieved = values["sm__warps_active.avg.pct_of_peak_sustained_active"]
    assert achieved.notna().all() and ((achieved > 0) & (achieved <= 100)).all()
    # lesson 05's point, on the H100: a one-element-per-thread copy (256-thread blocks, 100 % theoretical)
    # achieves far less than its theoretical occupancy
    assert achieved["strided_copy stride=1 offset=0"] < 80
    assert values["dram__sectors_read.sum"].isna().all()


def test_recorded_only_values_are_read_when_a_recording_has_them(tmp_path):
    """A copy of the recording with the DRAM-sector column added to one launch (a planted value)."""
    folder = tmp_path / "ncu"
    shutil.copytree(catalogue.RECORDING_DIR, folder)
    lines = (folder / "catalogue-metrics.csv").read_text().splitlines(keepends=True)
    start = next(i for i, line in enumerate(lines) if line.startswith('"ID",'))
    rows = list(csv.reader(io.StringIO("".join(lines[start:]))))
    metric = "dram__sectors_read.sum"
    rows[0].append(metric)
    rows[1].append("sector")  # the units row
    for row in rows[2:]:
        if row:
            row.append("32768" if row[0] == "0" else "")
    text = io.StringIO()
    csv.writer(text, quoting=csv.QUOTE_ALL, lineterminator="\n").writerows(rows)
    (folder / "catalogue-metrics.csv").write_text("".join(lines[:start]) + text.getvalue())
    values = catalogue.recorded_only(folder).set_index("kernel")[metric]
    first = catalogue.CATALOGUE[0].label
    assert values[first] == 32768 and values.drop(first).isna().all()


def test_headline_counts_the_non_trivial_rows():
    """On the H200's stored agreement: 624 agree; 200 are launch settings, 181 are 0 = 0, 243 are non-trivial."""
    stored = pd.read_csv(catalogue.RECORDING_DIR.parents[1] / "nvidia-h200" / "ncu" / "agreement.csv")
    h = catalogue.headline(stored)
    assert (h["agree"], h["launch_settings"], h["zero"], h["non_trivial"], h["disagree"]) == (624, 200, 181, 243, 0)
    assert catalogue.summary(stored).startswith("243 non-trivial (kernel, metric) rows agree")
    # known-wrong: a disagreeing non-trivial row lowers the headline and is counted as a disagreement
    broken = stored.copy()
    index = broken[(broken.metric == LD_REQUESTS) & (broken.microscope != 0)].index[0]
    broken.loc[index, "agrees"] = False
    h = catalogue.headline(broken)
    assert (h["non_trivial"], h["disagree"]) == (242, 1)


def test_the_wavefront_relation_is_marked_observed_not_derived():
    relation = catalogue.DIFFERENCES[("tiled_matmul tile=16", "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum")]
    assert relation.reason.startswith("OBSERVED") and "same address" in relation.reason
    assert "quarter-warp" in relation.reason
    derived = catalogue.DIFFERENCES[("tiled_matmul tile=16", "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum / "
                                     "smsp__sass_inst_executed_op_shared_ld.sum")]
    assert "not independent" in derived.reason
