"""`make doctor HEADLESS=1`: the pre-flight check of a validation host (no JupyterLab, nbgrader or jupytext),
and what the doctor says about a site's own stack (versions kept as they are, torch's range)."""

import sys

import pytest

from gpucourse.tooling import doctor, sitestack

MISSING = "no_such_jupyter_package_xyz"  # stands in for jupyterlab on a host that has none


@pytest.fixture
def jupyter_missing(monkeypatch):
    monkeypatch.setattr(doctor, "REQUIRED", doctor.REQUIRED + (MISSING,))
    monkeypatch.setattr(doctor, "JUPYTER", doctor.JUPYTER + (MISSING,))


def _run(**kwargs) -> tuple[int, str]:
    lines = []
    code = doctor.run_doctor(lines.append, **kwargs)
    return code, "\n".join(lines)


def test_headless_checks_everything_but_jupyter_and_still_runs_the_kernel(jupyter_missing):
    code, text = _run(headless=True)
    assert code == 0, text
    assert "headless" in text.splitlines()[0] and "a kernel runs" in text and MISSING not in text
    for module in ("numpy", "pandas", "numba", "plotly", "ipywidgets", "numba-cuda"):
        assert f"] {module}:" in text, module
    assert "jupytext" not in text and "nbgrader" not in text


def test_without_jupyter_the_normal_doctor_fails_and_points_to_headless(jupyter_missing):
    code, text = _run()
    assert code == 1 and f"[FAIL] {MISSING}" in text
    assert text.splitlines()[-1] == doctor.HEADLESS_HINT and "make doctor HEADLESS=1" in text


def test_a_failure_outside_jupyter_gets_no_headless_hint(jupyter_missing, monkeypatch):
    monkeypatch.setattr(doctor, "REQUIRED", doctor.REQUIRED + ("no_such_core_package_xyz",))
    for headless in (False, True):
        code, text = _run(headless=headless)
        assert code == 1 and doctor.HEADLESS_HINT not in text


def test_a_site_version_outside_the_ranges_is_a_warning_that_stops_nothing(monkeypatch):
    found = sitestack.facts()
    found["versions"].update({"numpy": "2.5.2", "numba-cuda": "0.30.4"})  # the H100 node's
    monkeypatch.setattr(sitestack, "facts", lambda paths=None: found)
    code, text = _run(headless=True)
    assert code == 0, text
    assert "[warn] versions: numpy 2.5.2: numba-cuda 0.30.4 compiles kernels only with NumPy below 2.5" in text
    assert "a kernel runs" in text, "a warning must not skip the kernel check (nor, on a GPU, the benchmark)"


def test_torchs_advice_gives_the_courses_range_not_the_locks_pin(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # what a CPU build of torch says on a GPU
    check = next(c for c in doctor.check_gpu_libraries() if c.name == "torch sees the GPU")
    assert not check.ok and "torch>=2.11,<3" in check.fix and "2.13" not in check.fix, check.fix
    monkeypatch.setitem(sys.modules, "torch", None)  # torch cannot be imported at all
    check = next(c for c in doctor.check_gpu_libraries() if c.name == "torch sees the GPU")
    assert "torch>=2.11,<3" in check.fix and "==" not in check.fix, check.fix
