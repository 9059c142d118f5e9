"""The ncu runner: its CSV parser on the H100's real recording, its one-line answers where ncu, a GPU or the
permission is missing, and its child process (run here in the simulator, under a stand-in for ncu)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from numba import cuda

import gpucourse  # noqa: F401  (the mode first)
from gpucourse.errors import CourseError
from gpucourse.lessons.coalescing import kernels as coalescing
from gpucourse.measure import ncu
from gpucourse.microscope import ncu_metrics

RECORDING = Path(__file__).resolve().parents[1] / "data" / "reference" / "nvidia-h100-80gb-hbm3" / "ncu"
METRICS_CSV = (RECORDING / "catalogue-metrics.csv").read_text()
SECTIONS_CSV = (RECORDING / "catalogue-sections.csv").read_text()
# ncu's message when the driver keeps the counters for administrators, as its documentation gives it
# (https://developer.nvidia.com/ERR_NVGPUCTRPERM): a fixture, not a recording.
PERMISSION_MESSAGE = ("==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU "
                      "Performance Counters on the target device 0. For instructions on enabling permissions and to "
                      "get more information see https://developer.nvidia.com/ERR_NVGPUCTRPERM")
SCALE = 4.0


@cuda.jit
def scale_notebook(x, out):  # stands for a kernel written in a notebook: run from its source
    i = cuda.grid(1)
    if i < x.size:
        out[i] = x[i] * SCALE


def test_the_recorded_raw_csv_parses_past_ncus_lines_and_thousands_separators():
    assert not METRICS_CSV.startswith('"ID"')  # ==PROF== lines and the program's JSON come first
    kernels = ncu.parse_csv(METRICS_CSV)
    assert [k.id for k in kernels] == list(range(25))
    first = kernels[0]
    assert "strided_copy" in first.name and first.grid == "(4096, 1, 1)" and first.blocks == 4096
    assert first.metrics["l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum"] == 131072  # "131,072"
    assert first.units["l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum"] == "sector"
    pad0 = kernels[12].metrics
    assert pad0["l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum"] == 1015808
    assert kernels[23].metrics["smsp__thread_inst_executed_per_inst_executed.ratio"] == 18.16
    assert kernels[23].metrics["smsp__sass_average_branch_targets_threads_uniform.pct"] == 93.75
    # The per-lane atomic: one REDG per warp (65,536 threads, 2,048 warps), as for the ballot.
    assert kernels[20].metrics["smsp__sass_inst_executed_op_global_red.sum"] == 2048
    # Every counter the report asks ncu for was recorded, except the two the recording did not ask for.
    missing = [n for n in ncu_metrics.ncu_metric_names() if n not in first.metrics]
    assert missing == ["smsp__sass_inst_executed_op_shared_atom.sum", "smsp__sass_branch_targets_threads_divergent.sum"]


def test_the_recorded_details_page_parses_and_agrees_with_the_raw_page():
    details = ncu.parse_csv(SECTIONS_CSV)
    raw = ncu.parse_csv(METRICS_CSV)
    assert len(details) == len(raw) == 25
    for d, r in zip(details, raw, strict=True):
        assert d.metrics["Occupancy: Theoretical Occupancy"] == r.metrics["sm__maximum_warps_per_active_cycle_pct"]
        assert d.metrics["Occupancy: Block Limit Registers"] == r.metrics["launch__occupancy_limit_registers"]
        assert d.metrics["Source Counters: Branch Efficiency"] == \
            r.metrics["smsp__sass_average_branch_targets_threads_uniform.pct"]
    assert details[0].units["Launch Statistics: Registers Per Thread"] == "register/thread"


@pytest.mark.parametrize(("cell", "value"), [
    ("131,072", 131072), ("1,015,808", 1015808), ("32", 32), ("18.16", 18.16), ("-3", -3), ("1e-05", 1e-05),
    ("", None), ("n/a", None), ("(256, 1, 1)", "(256, 1, 1)"), ("9.0", 9.0), ("PolicySpread", "PolicySpread"),
    ("1,2", "1,2"),
])
def test_a_cell_is_a_number_where_it_is_one(cell, value):
    assert ncu.number(cell) == value


def test_output_without_a_table_says_why():
    with pytest.raises(ncu.NcuError, match="no CSV table"):
        ncu.parse_csv("==PROF== Connected to process 1\n==PROF== Disconnected\n")
    with pytest.raises(ncu.NcuError, match="Failed to find metric"):
        ncu.parse_csv("==ERROR== Failed to find metric regex:^nope$\n")


def test_the_permission_error_gets_one_line_with_the_fix():
    line = ncu.explain_failure("==PROF== Connected\n" + PERMISSION_MESSAGE + "\n")
    assert "\n" not in line
    assert "NVreg_RestrictProfilingToAdminUsers=0" in line and "sudo" in line
    assert "https://developer.nvidia.com/ERR_NVGPUCTRPERM" in line
    assert ncu.explain_failure("==ERROR== something else broke\n") == "ncu failed: something else broke"
    assert ncu.explain_failure("==PROF== fine\n") is None


def test_without_ncu_or_without_a_gpu_it_says_so_in_one_line(monkeypatch, tmp_path):
    monkeypatch.setenv(ncu.NCU_ENV, str(tmp_path / "no-such-ncu"))
    missing = ncu.availability()
    assert "not on the PATH" in missing and "\n" not in missing
    fake = tmp_path / "ncu"
    fake.write_text("#!/bin/sh\n")
    monkeypatch.setenv(ncu.NCU_ENV, str(fake))
    no_gpu = ncu.availability()  # these tests run in the simulator
    assert no_gpu.startswith("no GPU here") and "\n" not in no_gpu
    with pytest.raises(ncu.NcuError, match="no GPU here"):
        ncu.profile_with_ncu(coalescing.strided_copy, 1, 32, np.zeros(32, np.float32), np.zeros(32, np.float32), 32,
                             1, 0)


def test_side_by_side_without_a_gpu_is_the_microscope_and_the_reason(monkeypatch):
    monkeypatch.delenv(ncu.NCU_ENV, raising=False)
    src = np.arange(64, dtype=np.float32)
    both = ncu.side_by_side(coalescing.strided_copy, 1, 32, src, np.zeros_like(src), 32, 2, 0)
    assert both.ncu is None and both.status == ncu.availability()
    text = repr(both)
    assert text.splitlines()[0] == both.status and "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum" in text
    table = both.table().set_index("metric")
    assert table.loc["l1tex__average_t_sectors_per_request_pipe_lsu_mem_global_op_ld.ratio", "microscope"] == 8
    assert both._repr_html_().startswith("<p>")


def test_the_command_collects_exactly_the_reports_metrics_for_one_launch():
    command = ncu.ncu_command("/opt/ncu", Path("/tmp/job"), "strided_copy", ncu_metrics.ncu_metric_names())
    assert command[:7] == ["/opt/ncu", "--csv", "--page", "raw", "--print-units", "base", "--clock-control"]
    assert command[command.index("--launch-count") + 1] == "1"
    assert command[command.index("--kernel-name") + 1] == "regex:strided_copy"
    assert command[command.index("--metrics") + 1].split(",") == ncu_metrics.ncu_metric_names()
    assert command[-4:-2] == [sys.executable, "-c"] and command[-1] == "/tmp/job"


def test_kernel_references_module_factory_and_source(monkeypatch):
    assert ncu.kernel_reference(coalescing.strided_copy) == {
        "module": "gpucourse.lessons.coalescing.kernels", "name": "strided_copy"}
    from gpucourse.lessons.tiling import kernels as tiling

    with pytest.raises(CourseError, match=r"factory_call=\"shared_transpose_kernel\(...\)\""):
        ncu.kernel_reference(tiling.shared_transpose_kernel(pad=1))
    assert ncu.kernel_reference(tiling.shared_transpose_kernel(pad=1), "shared_transpose_kernel(pad=1)")[
        "factory_call"] == "shared_transpose_kernel(pad=1)"
    monkeypatch.setattr(scale_notebook.fn, "__module__", "__main__")
    ref = ncu.kernel_reference(scale_notebook)
    assert ref["source"].startswith("@cuda.jit\ndef scale_notebook") and ref["constants"] == {"SCALE": 4.0}


def run_child(folder: Path, tmp_path: Path) -> list[np.ndarray]:
    results = tmp_path / "results.npz"
    env = {**os.environ, "GPUCOURSE_MODE": "sim", "GPUCOURSE_NCU_CHILD_RESULTS": str(results),
           "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    done = subprocess.run([sys.executable, "-c", ncu.CHILD, str(folder)], capture_output=True, text=True, env=env,
                          timeout=120)
    assert "@@GPUCOURSE-NCU-CHILD-DONE@@" in done.stderr, done.stderr[-2000:]
    saved = np.load(results)
    return [saved[name] for name in saved.files]


def test_the_child_rebuilds_a_notebook_kernel_from_its_source_and_launches_it(monkeypatch, tmp_path):
    monkeypatch.setattr(scale_notebook.fn, "__module__", "__main__")
    x = np.arange(48, dtype=np.float32)
    ncu.save_job(tmp_path, scale_notebook, 2, 32, (x, np.zeros_like(x)))
    _, out = run_child(tmp_path, tmp_path)
    assert np.array_equal(out, 4 * x)


def test_the_child_builds_a_factory_kernel_and_numpy_scalars(tmp_path):
    from gpucourse.lessons.tiling import kernels as tiling

    a = np.arange(64 * 64, dtype=np.float32).reshape(64, 64)
    ncu.save_job(tmp_path, tiling.shared_transpose_kernel(pad=1), (2, 2), (32, 8), (a, np.zeros_like(a)),
                 factory_call="shared_transpose_kernel(pad=1)")
    _, out = run_child(tmp_path, tmp_path)
    assert np.array_equal(out, a.T)


FAKE_NCU = """#!{python}
# A stand-in for ncu: records its command line, runs the profiled program (in the simulator), prints a CSV.
import json, os, subprocess, sys
argv = sys.argv[1:]
open(os.environ["FAKE_NCU_ARGV"], "w").write(json.dumps(argv))
if os.environ["FAKE_NCU_MODE"] == "permission":
    print({permission!r})
    sys.exit(1)
print("==PROF== Connected to process 1 (python)")
sys.stdout.flush()
done = subprocess.run(argv[argv.index("--metrics") + 2:], env=dict(os.environ, GPUCOURSE_MODE="sim"))
print("==PROF== Disconnected from process 1")
sys.stdout.write(open(os.environ["FAKE_NCU_CSV"]).read())
sys.exit(done.returncode)
"""


@pytest.fixture
def fake_ncu(tmp_path, monkeypatch):
    path = tmp_path / "fake-ncu"
    path.write_text(FAKE_NCU.format(python=sys.executable, permission=PERMISSION_MESSAGE))
    path.chmod(0o755)
    lines = METRICS_CSV.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith('"ID"'))
    (tmp_path / "row.csv").write_text("\n".join(lines[header:header + 3]) + "\n")  # header, units, launch 0
    monkeypatch.setenv("FAKE_NCU_CSV", str(tmp_path / "row.csv"))
    monkeypatch.setenv("FAKE_NCU_ARGV", str(tmp_path / "argv.json"))
    monkeypatch.setenv("FAKE_NCU_MODE", "ok")
    return path


def test_run_job_profiles_the_child_and_parses_ncus_row(fake_ncu, tmp_path):
    job = tmp_path / "job"
    job.mkdir()
    src = np.arange(64, dtype=np.float32)
    ncu.save_job(job, coalescing.strided_copy, 1, 32, (src, np.zeros_like(src), 32, 2, 0))
    row = ncu.run_job(job, "strided_copy", ncu=str(fake_ncu))
    assert row.id == 0 and row.metrics["l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum"] == 32768
    argv = json.loads((tmp_path / "argv.json").read_text())
    assert argv[argv.index("--metrics") + 1].split(",") == ncu_metrics.ncu_metric_names()


def test_run_job_explains_the_permission_error_and_a_failing_kernel(fake_ncu, tmp_path, monkeypatch):
    job = tmp_path / "job"
    job.mkdir()
    src = np.arange(64, dtype=np.float32)
    ncu.save_job(job, coalescing.strided_copy, 1, 32, (src, np.zeros_like(src), 32, 2, 0))
    monkeypatch.setenv("FAKE_NCU_MODE", "permission")
    with pytest.raises(ncu.NcuError) as permission:
        ncu.run_job(job, "strided_copy", ncu=str(fake_ncu))
    assert str(permission.value) == ncu.PERMISSION_HELP
    monkeypatch.setenv("FAKE_NCU_MODE", "ok")
    ncu.save_job(job, coalescing.strided_copy, 1, 32, (src, np.zeros_like(src), 32, 4, 0))  # reads past src's end
    with pytest.raises(ncu.NcuError, match="the profiled process failed: .*index"):
        ncu.run_job(job, "strided_copy", ncu=str(fake_ncu))
