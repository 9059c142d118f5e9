"""`make setup` picks the stack from the NVIDIA driver; every notebook opens on Colab (no GPU needed)."""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gpucourse.tooling import build, install
from gpucourse.tooling.build import ROOT


@pytest.mark.parametrize(("driver", "platform", "stack", "says"), [
    (None, "linux", "13", "no NVIDIA driver found: installing the default CUDA 13 stack"),
    (11080, "linux", "13", "CUDA 11.8 is older than either stack"),
    (12040, "linux", "12", "NVIDIA driver for CUDA 12.4: installing the CUDA 12 stack"),
    (12080, "linux", "12", "CUDA 12.8: installing the CUDA 12 stack"),
    (13000, "linux", "13", "CUDA 13.0: installing the CUDA 13 stack"),
    (13020, "linux", "13", "CUDA 13.2"),
    (None, "darwin", "sim", "macOS"),
    (None, "win32", "sim", "WSL2"),
])
def test_the_stack_follows_the_driver(driver, platform, stack, says):
    chosen, why = install.choose_stack(driver, platform=platform, machine="arm64" if platform == "darwin" else "x86_64")
    assert chosen == stack and says in why


def test_an_intel_mac_is_told_in_one_line_to_use_colab():
    # numba 0.68 and torch 2.13 (the locks) publish no macOS x86_64 wheels
    with pytest.raises(SystemExit, match="Intel Mac.*Colab"):
        install.choose_stack(None, platform="darwin", machine="x86_64")


def test_the_stack_asked_for_wins_and_a_wrong_one_is_one_clear_line():
    assert install.choose_stack(None, "12", platform="linux")[0] == "12"
    assert install.choose_stack(13000, "12", platform="linux")[0] == "12"
    assert install.choose_stack(12040, "sim", platform="linux")[0] == "sim"
    with pytest.raises(SystemExit, match="WSL2"):
        install.choose_stack(None, "13", platform="win32", machine="AMD64")
    with pytest.raises(SystemExit, match="not a stack"):
        install.choose_stack(None, "11", platform="linux")


def test_each_stack_installs_its_own_lock_and_the_simulator_stack_no_gpu_extra():
    python = ROOT / ".venv" / "bin" / "python"
    cu12 = install.install_commands("12", python)
    assert cu12[0][-2:] == ["-r", str(ROOT / "locks" / "cu12.txt")] and "--no-deps" in cu12[1]
    assert install.install_commands("13", python)[0][-1] == str(ROOT / "locks" / "cu13.txt")
    (sim,) = install.install_commands("sim", python)
    assert sim[-1] == f"{ROOT}[lab,sim,test,site,hub]" and str(ROOT / "locks" / "cu13.txt") in sim
    assert "cu12" not in sim[-1] and "cu13" not in sim[-1]


@pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler for the stand-in driver library")
@pytest.mark.parametrize("version", [11080, 12040, 13000])
def test_the_driver_version_is_read_from_the_driver_library(tmp_path, version):
    source = tmp_path / "libcuda.c"
    source.write_text(f"int cuDriverGetVersion(int *v) {{ *v = {version}; return 0; }}\n")
    lib = tmp_path / "libcuda.so.1"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(lib), str(source)], check=True)
    assert install.driver_cuda_version([str(lib)]) == version
    assert install.driver_cuda_version([str(tmp_path / "missing.so")]) is None


def test_make_setup_runs_the_installer_with_the_stack_asked_for():
    dry = subprocess.run(["make", "-n", "setup", "CUDA=12"], cwd=ROOT, capture_output=True, text=True,
                         env={"PATH": "/usr/bin:/bin"}).stdout
    assert "gpucourse/tooling/install.py --cuda 12" in dry
    shown = subprocess.run([sys.executable, "gpucourse/tooling/install.py", "--show", "--cuda", "12"], cwd=ROOT,
                           capture_output=True, text=True)
    assert shown.returncode == 0 and shown.stdout.startswith("12\t")


def test_every_lesson_and_lab_opens_on_colab_from_its_first_cell_and_the_readme():
    readme = (ROOT / "README.md").read_text()
    sources = build.lesson_sources() + [ROOT / "solutions" / lab / f"{lab}.py" for lab in build.lab_names()]
    for source in sources:
        nb = build.to_notebook(source)
        badge, cell = nb.cells[0], nb.cells[1]
        folder = "labs" if source.parent.parent.name == "solutions" else "notebooks"
        path = f"{folder}/{source.stem}/{source.stem}.ipynb" if folder == "labs" else f"notebooks/{source.stem}.ipynb"
        assert build.colab_url(path) in badge.source and build.colab_url(path) in readme, path
        assert build.COURSE_REPO in cell.source and cell.cell_type == "code"
        # only the course's ranges: no GPU extra, so Colab's torch, CuPy and numba-cuda stay
        assert not re.search(r"\[(cu1\d|sim)\]|cupy|torch|numba-cuda", cell.source)
        if folder == "labs":
            assert cell.metadata["nbgrader"]["locked"] and "Download" in badge.source
    assert readme.count(build.COURSE_REPO.removeprefix("https://github.com/")) >= len(sources)


def test_pips_settings_reach_uv_and_a_setting_uv_cannot_take_means_pip():
    listing = "\n".join([
        ":env:.find-links='/opt/wheels'",
        "global.find-links='/opt/wheels'",  # the same place twice: once
        "global.extra-index-url='file:///a/simple file:///b/simple'",
        "install.constraint='/etc/pip/c.txt\\n/etc/pip/d.txt'",  # a list written on two lines
        "global.cert='/etc/ssl/ca.crt'",
        "global.disable-pip-version-check='1'",
        "download.index-url='https://elsewhere/simple'",  # not for `pip install`
    ])
    settings = install.pip_settings(listing)
    assert settings["find-links"] == ["/opt/wheels"] and "index-url" not in settings
    assert settings["extra-index-url"] == ["file:///a/simple", "file:///b/simple"]
    assert settings["constraint"] == ["/etc/pip/c.txt", "/etc/pip/d.txt"]
    flags, env = install.uv_options(settings)
    assert flags[:2] == ["--index-strategy", "unsafe-best-match"]
    assert " ".join(flags[2:]) == ("--find-links /opt/wheels --extra-index-url file:///a/simple --extra-index-url "
                                   "file:///b/simple --constraint /etc/pip/c.txt --constraint /etc/pip/d.txt")
    assert env == {"SSL_CERT_FILE": "/etc/ssl/ca.crt"}
    assert install.uv_options(install.pip_settings("global.pre='true'")) is None  # pre-releases: pip decides
    assert install.uv_options(install.pip_settings("global.no-index='true'"))[0][-1] == "--no-index"


def _lock_of_six(tmp_path: Path) -> tuple[Path, Path]:
    root = tmp_path / "course"
    (root / "locks").mkdir(parents=True)
    (root / "locks" / "cu13.txt").write_text("six==1.17.0\n")
    venv = tmp_path / "test" / "venv"  # in a folder named test, as a learner's may be
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    return root, install.venv_python(venv)


def _six_pyc(python: Path) -> list[Path]:
    where = subprocess.run([str(python), "-c", "import importlib.util as u; print(u.find_spec('six').origin)"],
                           capture_output=True, text=True, check=True, env={"PATH": "/usr/bin:/bin"}).stdout.strip()
    return list((Path(where).parent / "__pycache__").glob("six.*.pyc"))


@pytest.mark.slow  # a fresh venv and real installs (of one small package)
@pytest.mark.parametrize("installer", ["pip", "uv"])
def test_the_lock_installs_without_compiling_then_everything_is_compiled_on_every_core(tmp_path, installer):
    root, python = _lock_of_six(tmp_path)
    uv = install.uv_command(python) if installer == "uv" else None
    assert (uv is not None) == (installer == "uv"), "uv should take this machine's pip settings"
    lock_install = install.install_commands("13", python, root, uv[0] if uv else None)[0]
    assert ("--no-compile" in lock_install) == (installer == "pip")
    subprocess.run(lock_install, check=True, env=uv[1] if uv else None)
    assert not _six_pyc(python), f"{installer} compiled it (it should leave that to compile_command)"
    probe = next(p for p in (python.parent.parent / "lib").rglob("site-packages"))
    (probe / "probe" / "tests").mkdir(parents=True)
    (probe / "probe" / "tests" / "test_x.py").write_text("x = 1\n")  # a package's own test suite
    (root / "gpucourse").mkdir()
    (root / "gpucourse" / "lesson.py").write_text("x = 1\n")  # the course itself, installed editable
    quiet = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}  # as on CI and in many Docker images
    subprocess.run(install.compile_command(python, root), check=True, env=quiet)
    assert _six_pyc(python), "compile_command did not compile the installed packages"
    assert list((root / "gpucourse" / "__pycache__").glob("lesson.*.pyc")), "the course's own package was not compiled"
    assert not list((probe / "probe" / "tests").rglob("*.pyc")), "a package's test suite was compiled"


@pytest.mark.slow
def test_when_uv_fails_pip_installs_the_same_lock(tmp_path, monkeypatch, capsys):
    root, python = _lock_of_six(tmp_path)
    (root / "pyproject.toml").write_text("")  # read for the stamp only
    broken_uv = [str(python), "-c", "raise SystemExit(3)"]  # an installer that fails on every command
    monkeypatch.setattr(install, "uv_command", lambda _python: (broken_uv, None))
    every = install.install_commands
    monkeypatch.setattr(install, "install_commands", lambda *args: every(*args)[:1])  # the lock; no project to build
    monkeypatch.setattr(install, "compile_command", lambda _python, _root: ["true"])
    install.setup("13", python.parent.parent, root)
    assert "uv failed (above): installing with pip instead" in capsys.readouterr().out
    assert (python.parent.parent / ".setup-stamp").read_text().startswith("stack=13 ")
    subprocess.run([str(python), "-c", "import six"], check=True)


def test_gpucourse_installer_pip_asks_for_pip(monkeypatch):
    monkeypatch.setenv("GPUCOURSE_INSTALLER", "pip")
    assert install.uv_command(Path("/nonexistent/python")) is None  # decided before anything runs
