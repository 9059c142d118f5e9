"""Grading on a GPU machine (gpu-mode review G8-G10), on the CPU with stand-ins: kernels grade in simulator mode
unless --gpu; on the GPU the workers are capped by compute mode and free memory (NVML), a kernel that could not
create its CUDA context is graded again alone (a grader failure if it still cannot); the sandbox may read the
CUDA installation wherever it lives."""

from __future__ import annotations

import ctypes
import json
import os
from pathlib import Path

import pytest

from gpucourse.__main__ import main
from gpucourse.measure import gpuinfo
from gpucourse.tooling import sandbox
from gpucourse.tooling.grading import batch, workers

LAB = "lab01_warps"
CONTEXT_ERROR = {"output_type": "error", "ename": "CudaAPIError",
                 "evalue": "[46] Call to cuDevicePrimaryCtxRetain results in CUDA_ERROR_DEVICES_UNAVAILABLE",
                 "traceback": []}
LEARNER_ERROR = {"output_type": "error", "ename": "IndexError", "evalue": "index 1024 is out of bounds",
                 "traceback": ["CUDA_ERROR_ILLEGAL_ADDRESS in the learner's kernel"]}


def _graded(root: Path, student: str, *outputs) -> None:
    folder = root / "autograded" / student / LAB
    folder.mkdir(parents=True, exist_ok=True)
    cell = {"cell_type": "code", "source": "", "metadata": {}, "outputs": list(outputs), "execution_count": 1}
    (folder / f"{LAB}.ipynb").write_text(json.dumps({"cells": [cell], "metadata": {}, "nbformat": 4,
                                                     "nbformat_minor": 5}))


class FakePool:
    """WorkerPool's stand-in: records each pool (jobs, env, tasks) and 'grades' by writing notebooks."""

    pools: list[dict] = []
    outputs: dict[str, list] = {}  # student -> outputs of the graded notebook, per run (popped)

    def __init__(self, root, jobs, name="grading", env=None):
        self.root, self.jobs, self.env = Path(root), jobs, env
        FakePool.pools.append({"jobs": jobs, "env": env, "tasks": []})

    def run(self, tasks, quiet=False):
        FakePool.pools[-1]["tasks"] = list(tasks)
        for _, _, student in tasks:
            runs = FakePool.outputs.get(student, [[]])
            _graded(self.root, student, *(runs.pop(0) if len(runs) > 1 else runs[0]))
        return {task: {"success": True} for task in tasks}


@pytest.fixture
def course(tmp_path, monkeypatch):
    (tmp_path / "solutions" / LAB).mkdir(parents=True)
    (tmp_path / "solutions" / LAB / f"{LAB}.py").write_text("")
    for student in ("alice", "bob"):
        (tmp_path / "submitted" / student / LAB).mkdir(parents=True)
    FakePool.pools, FakePool.outputs = [], {}
    monkeypatch.setattr(batch, "WorkerPool", FakePool)
    monkeypatch.setattr(batch, "_ensure_assignments", lambda root, labs: [])
    monkeypatch.setattr(batch, "unreadable_reason", lambda root, lab, student: None)
    monkeypatch.setattr(batch, "read_scores", lambda root: [])
    monkeypatch.setattr(batch, "notebook_notes", lambda root, lab, student: [])
    monkeypatch.setattr(batch.gpuinfo, "compute_mode", lambda: "default")
    monkeypatch.setattr(batch.gpuinfo, "free_memory_bytes", lambda: 80 * 2**30)
    return tmp_path


# --- G8: simulator mode unless --gpu -------------------------------------------------------------------------


def test_grading_kernels_run_in_simulator_mode_unless_gpu_is_asked_for(course, capsys):
    assert batch.grade_all(course, jobs=2) == 0
    assert FakePool.pools[0]["env"] == {"GPUCOURSE_MODE": "sim"}
    assert "in simulator mode (--gpu grades on the GPU)" in capsys.readouterr().out
    assert batch.grade_all(course, jobs=2, gpu=True) == 0
    assert FakePool.pools[-1]["env"] == {}
    assert "on the GPU" in capsys.readouterr().out


def test_the_worker_and_its_kernels_get_the_mode(tmp_path, monkeypatch):
    seen = {}

    class Popen:
        def __init__(self, argv, **kwargs):
            seen.update(kwargs["env"])

    monkeypatch.setattr(workers.subprocess, "Popen", Popen)
    monkeypatch.delenv("GPUCOURSE_MODE", raising=False)
    workers._start_worker(tmp_path, None, batch.grading_environment(False))
    assert seen["GPUCOURSE_MODE"] == "sim"
    monkeypatch.setenv("GPUCOURSE_MODE", "sim")  # in the worker: the kernel's scrubbed environment keeps it
    assert sandbox.kernel_environment(tmp_path)["GPUCOURSE_MODE"] == "sim"


def test_make_grade_passes_gpu_on(monkeypatch):
    calls = []
    monkeypatch.setattr(batch, "grade_all", lambda **kwargs: calls.append(kwargs) or 0)
    import gpucourse.tooling.grading as grading

    monkeypatch.setattr(grading, "grade_all", batch.grade_all, raising=False)
    assert main(["grade", "--gpu"]) == 0 and main(["grade"]) == 0
    assert [c["gpu"] for c in calls] == [True, False]
    assert "$(if $(GPU),--gpu)" in (Path(__file__).parents[1] / "Makefile").read_text()


# --- G9: workers capped on the GPU; a context that could not be created is regraded alone --------------------


@pytest.mark.parametrize(("requested", "gpu", "mode", "free", "jobs"), [
    (None, False, "exclusive process", 1, os.cpu_count() or 1),  # simulator mode: one per CPU, no GPU asked
    (16, True, "exclusive process", 80 * 2**30, 1),  # one context at a time
    (16, True, "prohibited", 80 * 2**30, 1),
    (16, True, "default", int(2.5 * 2**30), 2),  # one per GiB free
    (16, True, "default", 80 * 2**30, batch.GPU_JOBS_MAX),
    (16, True, "default", 2**20, 1),
    (16, True, None, None, batch.GPU_JOBS_MAX),  # NVML silent: the fixed cap
    (1, True, "default", 80 * 2**30, 1),  # asking for fewer is kept
])
def test_gpu_grading_jobs_are_capped(requested, gpu, mode, free, jobs):
    got, why = batch.grading_jobs(requested, 100, gpu, compute_mode=lambda: mode, free_bytes=lambda: free)
    assert got == min(jobs, 100)
    assert bool(why) == (gpu and (requested or 0) > got)
    if mode == "exclusive process" and gpu:
        assert "exclusive process" in why


def test_never_more_workers_than_submissions():
    assert batch.grading_jobs(8, 3, False)[0] == 3


class FakeNVML:
    def __init__(self, mode=3, free=3 * 2**30, status=0):
        self.mode, self.free, self.status = mode, free, status

    def nvmlDeviceGetHandleByIndex_v2(self, index, handle):
        return 0

    def nvmlDeviceGetComputeMode(self, handle, mode):
        mode._obj.value = self.mode
        return self.status

    def nvmlDeviceGetMemoryInfo(self, handle, memory):
        memory._obj.free = self.free
        return self.status


def test_compute_mode_and_free_memory_come_from_nvml_without_a_context():
    assert gpuinfo.compute_mode(FakeNVML(mode=3)) == "exclusive process"
    assert gpuinfo.compute_mode(FakeNVML(mode=0)) == "default"
    assert gpuinfo.free_memory_bytes(FakeNVML(free=3 * 2**30)) == 3 * 2**30
    assert gpuinfo.compute_mode(FakeNVML(status=3)) is None and gpuinfo.free_memory_bytes(FakeNVML(status=3)) is None
    assert isinstance(ctypes.sizeof(gpuinfo._Memory()), int)


def test_a_context_error_is_told_from_a_learners_error(tmp_path):
    _graded(tmp_path, "alice", CONTEXT_ERROR)
    _graded(tmp_path, "bob", LEARNER_ERROR)
    assert "CUDA_ERROR_DEVICES_UNAVAILABLE" in batch.context_error(tmp_path, LAB, "alice")
    assert batch.context_error(tmp_path, LAB, "bob") is None
    assert batch.context_error(tmp_path, LAB, "nobody") is None
    stream = {"output_type": "stream", "name": "stderr", "text": ["cudaErrorDevicesUnavailable: CUDA-capable ",
                                                                  "device(s) is/are busy or unavailable"]}
    _graded(tmp_path, "carol", stream)
    assert batch.context_error(tmp_path, LAB, "carol")


def test_a_submission_whose_context_failed_is_graded_again_alone(course, capsys):
    FakePool.outputs = {"alice": [[CONTEXT_ERROR], []]}  # busy GPU the first time, fine alone
    assert batch.grade_all(course, jobs=4, gpu=True) == 0
    assert [p["jobs"] for p in FakePool.pools] == [2, 1]
    assert FakePool.pools[1]["tasks"] == [("autograde", LAB, "alice")]
    assert "graded again" not in capsys.readouterr().err


def test_a_context_that_fails_even_alone_is_a_grader_failure(course, capsys):
    FakePool.outputs = {"alice": [[CONTEXT_ERROR]]}
    assert batch.grade_all(course, jobs=4, gpu=True) == 1
    err = capsys.readouterr().err
    assert f"GRADER FAILURE: {LAB}/alice: the grading kernel could not create a CUDA context" in err


def test_in_simulator_mode_nothing_is_regraded(course):
    FakePool.outputs = {"alice": [[CONTEXT_ERROR]]}
    assert batch.grade_all(course, jobs=4) == 0 and len(FakePool.pools) == 1


# --- G10: the sandbox reads the CUDA installation wherever it lives ------------------------------------------


def test_cuda_installations_outside_usr_are_readable(tmp_path):
    home, path, lib, nvvm = (tmp_path / name for name in ("cuda-home", "cuda-path", "apps-lib", "nvvm-lib"))
    for folder in (home, path, lib, nvvm):
        folder.mkdir()
    env = {"CUDA_HOME": str(home), "CUDA_PATH": str(path),
           "LD_LIBRARY_PATH": os.pathsep.join([str(lib), "relative/lib", str(tmp_path / "missing")])}
    paths = sandbox.cuda_read_paths(env, located=[str(nvvm)])
    assert paths[:4] == [str(home), str(path), str(lib), str(nvvm)]
    assert "relative/lib" not in paths and str(tmp_path / "missing") not in paths
    assert sandbox.cuda_read_paths({}, located=[]) == [p for p in sandbox.CUDA_DRIVER_ROOTS if os.path.isdir(p)]


def test_the_sandbox_grants_them(tmp_path, monkeypatch):
    toolkit = tmp_path / "apps" / "cuda-12.4"
    toolkit.mkdir(parents=True)
    monkeypatch.setenv("CUDA_HOME", str(toolkit))
    spec = sandbox.sandbox_paths(tmp_path / "nb", tmp_path / "private")
    assert str(toolkit.resolve()) in spec["read"]


def test_numba_cudas_nvvm_is_located_where_the_stack_has_one():
    located = sandbox._located_nvvm()
    try:
        from cuda import pathfinder  # noqa: F401
    except ImportError:
        assert located == []
        return
    assert all(os.path.isabs(p) for p in located)


def test_doctor_runs_a_kernel_in_the_grading_sandbox(monkeypatch):
    from gpucourse.tooling import doctor

    if not sandbox.landlock_abi():
        assert "not checked" in doctor.check_sandbox_kernel().detail
        return
    probe = doctor.check_sandbox_kernel()
    assert probe.ok and probe.detail == "a 1-thread kernel ran in sim mode", probe
    # a sandbox that cannot read the Python installation: the probe says so (a warning, not a failure)
    real = sandbox.sandbox_paths
    monkeypatch.setattr(sandbox, "sandbox_paths",
                        lambda *a, **k: {**real(*a, **k), "read": [str(sandbox.PACKAGE_DIR)]})
    broken = doctor.check_sandbox_kernel()
    assert not broken.ok and not broken.required and "exit" in broken.detail
