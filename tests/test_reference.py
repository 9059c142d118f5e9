import json

import pandas as pd
import pytest

from gpucourse import reference, runtime
from gpucourse.errors import CourseError, NoGPU


@pytest.fixture
def fake_gpu(monkeypatch):
    info = runtime.DeviceInfo(name="NVIDIA Test GPU", compute_capability=(9, 0), sm_count=2,
                              driver_version="13.0", cuda_version="13.0")
    monkeypatch.setattr(runtime, "MODE", "gpu")
    monkeypatch.setattr(runtime, "device", lambda: info)
    monkeypatch.setattr(reference, "SWEEPS", {})
    monkeypatch.setattr(reference, "SWEEP_MODULES", ())
    return info


def test_record_writes_csv_and_provenance_then_load_reads_them(tmp_path, fake_gpu):
    @reference.register_sweep("demo.sweep", lesson="99_demo", description="demo", columns=("x", "ms"))
    def _demo():
        return pd.DataFrame({"x": [1, 2], "ms": [0.5, 0.25]})

    written = reference.record(root=tmp_path, command="make record")
    assert written == [tmp_path / "nvidia-test-gpu" / "demo.sweep.csv"]
    meta = json.loads((tmp_path / "nvidia-test-gpu" / "provenance.json").read_text())
    assert meta["device"]["device"] == "NVIDIA Test GPU" and meta["device"]["command"] == "make record"
    assert meta["sweeps"]["demo.sweep"]["rows"] == 2
    rec = reference.load("demo.sweep", root=tmp_path)
    assert list(rec.data.ms) == [0.5, 0.25]
    assert "recorded on NVIDIA Test GPU" in rec.caption()


def test_a_sweep_missing_its_columns_is_refused(tmp_path, fake_gpu):
    reference.register_sweep("bad", lesson="x", description="x", columns=("x", "y"))(lambda: pd.DataFrame({"x": [1]}))
    with pytest.raises(CourseError, match="no column"):
        reference.record(root=tmp_path)


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
        reference.record(root=tmp_path)
    assert not any(tmp_path.iterdir())


def test_committed_reference_folders_all_carry_provenance():
    for folder in reference.REFERENCE_ROOT.iterdir():
        if folder.is_dir():
            meta = json.loads((folder / reference.PROVENANCE_FILE).read_text())
            for csv in folder.glob("*.csv"):
                assert csv.stem in meta["sweeps"], f"{csv} has no provenance entry"


def test_lesson_modules_register_their_sweeps():
    sweeps = reference.load_all_sweeps()
    assert {"warps.staircase", "measuring.ceilings", "measuring.async_pitfall"} <= set(sweeps)
    for sweep in sweeps.values():
        assert sweep.columns and sweep.description and sweep.lesson
