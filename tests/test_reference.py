import json
from pathlib import Path

import pandas as pd
import pytest

from gpucourse.errors import CourseError, NoGPU
from gpucourse.measure import gpuinfo, harness, recording, reference, runtime


@pytest.fixture
def fake_gpu(monkeypatch):
    info = runtime.DeviceInfo(name="NVIDIA Test GPU", compute_capability=(9, 0), sm_count=2,
                              memory_bytes=80 * 2**30, l2_bytes=50 * 2**20,
                              driver_version="13.0", cuda_version="13.0")
    monkeypatch.setattr(runtime, "MODE", "gpu")
    monkeypatch.setattr(runtime, "device", lambda: info)
    monkeypatch.setattr(harness, "software_stack", lambda: {
        "driver_release": "580.65.06", "driver_api": "13.0", "cuda_runtime": "13.0", "nvrtc": "13.0"})
    monkeypatch.setattr(gpuinfo, "compute_processes", lambda: [4242])
    monkeypatch.setattr(reference, "SWEEPS", {})
    monkeypatch.setattr(reference, "SWEEP_MODULES", ())
    return info


def test_record_writes_csv_and_provenance_then_load_reads_them(tmp_path, fake_gpu):
    @reference.register_sweep("demo.sweep", lesson="99_demo", description="demo", columns=("x", "ms"))
    def _demo():
        return pd.DataFrame({"x": [1, 2], "ms": [0.5, 0.25]})

    written = recording.record(root=tmp_path, command="make record")
    assert written == [tmp_path / "nvidia-test-gpu" / "demo.sweep.csv"]
    meta = json.loads((tmp_path / "nvidia-test-gpu" / "provenance.json").read_text())
    assert meta["device"]["device"] == "NVIDIA Test GPU" and meta["device"]["command"] == "make record"
    assert meta["sweeps"]["demo.sweep"]["rows"] == 2
    rec = reference.load("demo.sweep", root=tmp_path)
    assert list(rec.data.ms) == [0.5, 0.25]
    assert rec.caption().startswith("measured by this course on an NVIDIA Test GPU (not your GPU), full contract, "
                                    "0.5 s of GPU time a point, ")


def test_a_sweep_missing_its_columns_is_refused(tmp_path, fake_gpu):
    reference.register_sweep("bad", lesson="x", description="x", columns=("x", "y"))(lambda: pd.DataFrame({"x": [1]}))
    with pytest.raises(CourseError, match="no column"):
        recording.record(root=tmp_path)


def test_no_recording_means_none_and_never_a_made_up_number(tmp_path):
    assert reference.load("nothing.here", root=tmp_path) is None
    assert reference.recordings("nothing.here", root=tmp_path) == []


def test_csv_without_provenance_is_not_used(tmp_path):
    folder = tmp_path / "nvidia-x"
    folder.mkdir()
    (folder / "s.csv").write_text("x,y\n1,2\n")
    with pytest.raises(CourseError, match="no provenance.json"):
        reference.load("s", root=tmp_path)
    (folder / "provenance.json").write_text(json.dumps({"device": {}, "sweeps": {}}))
    with pytest.raises(CourseError, match="not listed"):
        reference.load("s", root=tmp_path)


def test_recording_needs_a_gpu(tmp_path):
    with pytest.raises(NoGPU, match="nothing was written"):
        recording.record(root=tmp_path)
    assert not any(tmp_path.iterdir())


def _demo_recording(root):
    @reference.register_sweep("demo.sweep", lesson="99_demo", description="demo", columns=("x", "ms"))
    def _demo():
        return pd.DataFrame({"x": [1, 2], "ms": [0.5, 0.25]})

    recording.record(root=root, command="make record")
    return root / "nvidia-test-gpu"


def test_a_complete_recording_is_accepted(tmp_path, fake_gpu):
    folder = _demo_recording(tmp_path)
    assert reference.missing_provenance(folder) == []
    meta = json.loads((folder / "provenance.json").read_text())
    assert meta["device"]["driver_release"] == "580.65.06" and meta["device"]["gpu_sharing"] == "alone"


def _edit(folder, change):
    path = folder / "provenance.json"
    meta = json.loads(path.read_text())
    change(meta)
    path.write_text(json.dumps(meta))


@pytest.mark.parametrize(("change", "complaint"), [
    (lambda m: m["device"].pop("driver_release"), "device.driver_release is missing"),
    (lambda m: m["device"].update(cuda_runtime=None), "device.cuda_runtime is missing"),
    (lambda m: m["device"].update(libraries={}), "device.libraries"),
    (lambda m: m["device"].update(mode="sim"), "mode is not 'gpu'"),
    (lambda m: m["sweeps"].pop("demo.sweep"), "demo.sweep.csv has no entry"),
    (lambda m: m["sweeps"]["demo.sweep"].update(rows=3), "has 2 rows, its provenance says 3"),
    (lambda m: m["sweeps"]["demo.sweep"].pop("date"), "sweeps.demo.sweep.date is missing"),
    (lambda m: m["device"].update(rehearsal=True), "rehearsal"),
])
def test_a_recording_without_complete_provenance_is_refused(tmp_path, fake_gpu, change, complaint):
    folder = _demo_recording(tmp_path)
    _edit(folder, change)
    assert any(complaint in problem for problem in reference.missing_provenance(folder))


def test_a_folder_without_provenance_is_refused(tmp_path):
    (tmp_path / "nvidia-x").mkdir()
    (tmp_path / "nvidia-x" / "s.csv").write_text("x\n1\n")
    assert reference.missing_provenance(tmp_path / "nvidia-x") == ["no provenance.json"]


def _recording_folders(root: Path) -> list[Path]:
    """Every committed folder of timings: each GPU's own folder and any below it (quick/, ncu/, …)."""
    return sorted({p.parent for p in root.glob("*/**/*") if p.is_file()} | {p for p in root.iterdir() if p.is_dir()})


COMMITTED = _recording_folders(reference.REFERENCE_ROOT)


@pytest.mark.parametrize("folder", COMMITTED or [None],
                         ids=[str(p.relative_to(reference.REFERENCE_ROOT)) for p in COMMITTED] or ["none yet"])
def test_committed_recordings_carry_complete_provenance(folder):
    """The check a contributed data/reference/<gpu>/ must pass (README: contribute a recording): a folder
    of sweeps passes missing_provenance; any other folder (the probe, ncu) names every file it holds."""
    if folder is None:
        pytest.skip("no GPU recording is committed yet (data/reference/ holds only .gitkeep)")
    meta_path = folder / reference.PROVENANCE_FILE
    assert meta_path.exists(), f"{folder} has no {reference.PROVENANCE_FILE}"
    meta = json.loads(meta_path.read_text())
    if "sweeps" in meta:
        assert reference.missing_provenance(folder) == []
        return
    below = {p.name for p in folder.iterdir() if p.is_dir()}
    assert below == set(meta.get("folders", {})), f"folders without a line in provenance.json: {below}"
    held = {p.name for p in folder.iterdir() if p.is_file()} - {reference.PROVENANCE_FILE}
    if not held:  # a GPU's folder that only holds folders: its provenance names the device and them
        assert below and meta.get("device", {}).get("mode") == "gpu"
        return
    assert held and held <= set(meta.get("files", {})), f"files without provenance: {held - set(meta.get('files', {}))}"
    assert meta.get("device", {}).get("mode") == "gpu" and meta["device"].get("driver_release")


def test_lesson_modules_register_their_sweeps():
    sweeps = reference.load_all_sweeps()
    assert {"warps.staircase", "measuring.ceilings", "measuring.async_pitfall"} <= set(sweeps)
    for sweep in sweeps.values():
        assert sweep.columns and sweep.description and sweep.lesson
