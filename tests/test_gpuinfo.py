"""Provenance under true names and GPU sharing, from stand-ins for NVML, nvidia-smi and the libraries."""

from __future__ import annotations

import ctypes

import pytest

from gpucourse.measure import gpuinfo, harness, runtime
from gpucourse.viz import charts


class FakeNVML:
    """The NVML calls gpuinfo makes, answering like a driver 580.65.06 with these processes."""

    def __init__(self, release=b"580.65.06", pids=(), fail=False):
        self.release, self.pids, self.fail = release, list(pids), fail

    def nvmlSystemGetDriverVersion(self, buffer, size):
        if self.fail:
            return 999
        buffer.value = self.release
        return 0

    def nvmlDeviceGetHandleByIndex_v2(self, index, handle):
        self.asked = ("index", index)
        return 999 if self.fail else 0

    def nvmlDeviceGetHandleByPciBusId_v2(self, bus_id, handle):
        self.asked = ("bus id", bus_id)
        return 999 if self.fail else 0

    def _answer(self, out, number):
        out._obj.value = number
        return 0

    def nvmlDeviceGetClockInfo(self, handle, kind, out):
        return self._answer(out, {1: 1755, 2: 2619}[kind])

    def nvmlDeviceGetMaxClockInfo(self, handle, kind, out):
        return self._answer(out, 1980)

    def nvmlDeviceGetEnforcedPowerLimit(self, handle, out):
        return self._answer(out, 700_000)

    def nvmlDeviceGetPersistenceMode(self, handle, out):
        return self._answer(out, 1)

    def nvmlDeviceGetEccMode(self, handle, current, pending):
        current._obj.value = 1
        return 0

    def nvmlDeviceGetMigMode(self, handle, current, pending):
        return 3  # NVML_ERROR_NOT_SUPPORTED: a GPU without MIG

    def nvmlDeviceGetComputeRunningProcesses_v3(self, handle, count, infos):
        if infos is None:
            count._obj.value = len(self.pids)
            return 0 if not self.pids else gpuinfo.NVML_ERROR_INSUFFICIENT_SIZE
        for i, pid in enumerate(self.pids):
            infos[i].pid = pid
        count._obj.value = len(self.pids)
        return 0


def test_the_driver_release_is_the_release_not_the_api_level():
    assert gpuinfo.driver_release(nvml=FakeNVML()) == "580.65.06"
    # without NVML: nvidia-smi's answer; without either: unknown, never a guess
    smi = lambda args: "575.57.08\n"  # noqa: E731
    assert gpuinfo.driver_release(nvml=FakeNVML(fail=True), smi=smi) == "575.57.08"
    assert gpuinfo.driver_release(nvml=FakeNVML(fail=True), smi=lambda args: "") is None


def test_api_levels_and_runtime_versions_are_decoded_each_under_its_name():
    assert gpuinfo.driver_api(lambda: (13, 0)) == "13.0"
    assert gpuinfo.cuda_runtime(lambda: 12090) == "12.9"  # cudaRuntimeGetVersion: 1000·major + 10·minor
    assert gpuinfo.cuda_runtime(lambda: 13000) == "13.0"
    assert gpuinfo.nvrtc(lambda: (13, 1)) == "13.1"

    def no_driver():
        raise OSError("libcuda.so.1: cannot open shared object file")

    assert gpuinfo.driver_api(no_driver) is None and gpuinfo.cuda_runtime(no_driver) is None


def test_provenance_records_each_version_under_its_true_name(monkeypatch):
    monkeypatch.setattr(harness, "software_stack", lambda: {
        "driver_release": "580.65.06", "driver_api": "13.0", "cuda_runtime": "12.9", "nvrtc": "13.1"})
    record = harness.provenance("make record")
    assert record["driver_release"] == "580.65.06" and record["driver_api"] == "13.0"
    assert record["cuda_runtime"] == "12.9" and record["nvrtc"] == "13.1"
    assert "driver" not in record and "cuda" not in record  # the old, ambiguous names
    assert {"numba-cuda", "cupy-cuda13x", "torch"} <= set(record["libraries"])
    assert set(harness.REQUIRED_PROVENANCE) <= set(record) and record["command"] == "make record"


def test_nvml_finds_the_cuda_device_by_its_pci_bus_id_not_index_0():
    nvml = FakeNVML(pids=[1])
    assert gpuinfo.compute_processes(nvml, pci_bus_id="00000000:1B:00.0") == [1]
    assert nvml.asked == ("bus id", b"00000000:1B:00.0")
    gpuinfo.compute_processes(nvml, pci_bus_id=None)  # unknown id (no GPU here): NVML's first GPU
    assert nvml.asked == ("index", 0)


def test_board_facts_make_recordings_comparable():
    facts = gpuinfo.board(FakeNVML(), pci_bus_id="00000000:1B:00.0")
    assert facts == {"pci_bus_id": "00000000:1B:00.0", "sm_clock_mhz": 1755, "sm_clock_max_mhz": 1980,
                     "memory_clock_mhz": 2619, "power_limit_w": 700.0, "ecc": "on", "mig": None,
                     "persistence": "on"}
    unknown = gpuinfo.board(FakeNVML(fail=True), pci_bus_id=None)
    assert unknown["sm_clock_mhz"] is None and unknown["power_limit_w"] is None


def test_provenance_names_the_course_commit():
    version = harness.course_version()
    assert set(version) == {"commit", "dirty"}
    assert version["commit"] is None or len(version["commit"]) == 12
    assert harness.provenance("x")["course"] == version


def test_nvml_process_list_through_ctypes_structures():
    assert gpuinfo.compute_processes(FakeNVML(pids=[]), pci_bus_id=None) == []
    assert gpuinfo.compute_processes(FakeNVML(pids=[4242, 77]), pci_bus_id=None) == [4242, 77]
    assert gpuinfo.compute_processes(FakeNVML(fail=True), pci_bus_id=None) is None
    assert ctypes.sizeof(gpuinfo._ProcessInfo) == 24  # nvmlProcessInfo_t v2/v3


@pytest.mark.parametrize(("pids", "state", "others"), [
    ([4242], "alone", 0),  # only us (under the host's PID inside a container)
    ([4242, 77], "shared", 1),
    ([4242, 77, 78], "shared", 2),
    (None, "unknown", None),
])
def test_sharing_counts_the_others(pids, state, others):
    sharing = gpuinfo.gpu_sharing(pids)
    assert (sharing.state, sharing.others) == (state, others)


def test_a_measured_caption_says_the_gpu_was_shared(monkeypatch):
    monkeypatch.setattr(runtime, "MODE", "gpu")
    monkeypatch.setattr(gpuinfo, "compute_processes", lambda: [1, 2, 3])
    fig = charts.figure("t", "x (n)", "time (ms)", charts.source_caption("measured", "NVIDIA H200"))
    assert "shared GPU: 2 other process(es)" in charts.caption_of(fig)
    assert "may be slower" in charts.caption_of(fig)
    lesson_style = charts.figure("t", "x (n)", "time (ms)", "measured now on NVIDIA H200, 1,000 items")
    assert "shared GPU" in charts.caption_of(lesson_style)
    monkeypatch.setattr(gpuinfo, "compute_processes", lambda: [1])
    alone = charts.figure("t", "x (n)", "time (ms)", charts.source_caption("measured", "NVIDIA H200"))
    assert "shared" not in charts.caption_of(alone)
    monkeypatch.setattr(gpuinfo, "compute_processes", lambda: None)
    unknown = charts.figure("t", "x (n)", "time (ms)", charts.source_caption("measured", "NVIDIA H200"))
    assert "unknown" in charts.caption_of(unknown)


def test_recorded_and_counted_captions_never_ask_about_sharing(monkeypatch):
    monkeypatch.setattr(runtime, "MODE", "gpu")
    monkeypatch.setattr(gpuinfo, "compute_processes", lambda: [1, 2, 3])
    fig = charts.figure("t", "x (n)", "time (ms)", charts.source_caption("recorded", "H200, 2026-10-28"))
    assert "shared" not in charts.caption_of(fig)


def test_deploy_documents_the_three_ways_to_give_out_gpus():
    from gpucourse.tooling.build import ROOT

    text = (ROOT / "deploy" / "README.md").read_text()
    section = text.split("## GPUs and learners: three choices", 1)[1].split("\n## ", 1)[0]
    for choice in ("A GPU per learner", "A MIG slice per learner", "Shared, with the warning"):
        assert f"**{choice}**" in section
    assert "shared GPU: N other" in section and "gpu_sharing" in section
