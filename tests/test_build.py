"""Generated files: notebooks from text sources are reproducible; labs/ matches solutions/."""

import shutil

import nbformat
import pytest

from gpucourse.tooling import build


def test_notebooks_are_generated_identically_with_stable_cell_ids(tmp_path):
    source = build.ROOT / "notebooks" / "01_warps.py"
    first = nbformat.writes(build.to_notebook(source))
    assert first == nbformat.writes(build.to_notebook(source))
    nb = build.to_notebook(source)
    assert [c.id for c in nb.cells[:3]] == ["colab-badge", "colab-install", "cell-000"]
    assert nb.metadata["kernelspec"]["name"] == "python3"
    assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code")


def test_lab_cells_take_their_grade_id_as_cell_id():
    nb = build.to_notebook(build.ROOT / "solutions" / "lab01_warps" / "lab01_warps.py")
    ids = [c.id for c in nb.cells]
    assert "ex1_test" in ids and len(set(ids)) == len(ids)


@pytest.mark.slow
def test_committed_labs_match_a_fresh_generation_and_leak_nothing():
    assert build.check_labs() == []


def test_check_labs_catches_a_hand_edit_a_stray_and_a_leak(tmp_path, monkeypatch):
    """The comparison itself, against a stand-in for nbgrader's output (the real generation is
    checked above), so that a check which always passes would fail here."""
    root = tmp_path / "course"
    (root / "solutions" / "lab01_warps").mkdir(parents=True)
    shutil.copy(build.ROOT / "nbgrader_config.py", root)
    shutil.copy(build.ROOT / "solutions" / "lab01_warps" / "lab01_warps.py", root / "solutions" / "lab01_warps")
    shutil.copytree(build.ROOT / "labs" / "lab01_warps", root / "labs" / "lab01_warps")

    def fake_generate(scratch):  # what nbgrader would write: the committed release
        shutil.copytree(build.ROOT / "labs" / "lab01_warps", scratch / "labs" / "lab01_warps")
        return ["lab01_warps"]

    monkeypatch.setattr(build, "generate_labs", fake_generate)
    assert build.check_labs(root) == []
    release = root / "labs" / "lab01_warps" / "lab01_warps.ipynb"
    release.write_text(release.read_text().replace("YOUR CODE HERE", "### BEGIN SOLUTION"))
    (root / "labs" / "lab01_warps" / "notes.txt").write_text("hand-made")
    problems = build.check_labs(root)
    assert any("differs" in p for p in problems)
    assert any("solution or hidden-test markers" in p for p in problems)
    assert any("notes.txt is not generated" in p for p in problems)
