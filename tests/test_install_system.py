"""`make setup CUDA=system` and `make wheelhouse`: the course on a site's own CUDA stack, offline (sitestack.py).
The whole path, run end to end in a stand-in for a site stack, is tests/test_install_offline.py."""

import importlib.util
import json
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from gpucourse.tooling import install, sitestack
from gpucourse.tooling.build import ROOT

_spec = importlib.util.spec_from_file_location("wheelhouse", ROOT / "tools" / "wheelhouse.py")
wheelhouse = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(wheelhouse)

# What an offline H100 node showed (data/reference/nvidia-h100-80gb-hbm3/first-contact/probe.jsonl)
NODE = {"numpy": "2.5.2", "pandas": "3.0.6", "numba": "0.68.0", "numba-cuda": "0.30.4", "llvmlite": "0.50.0",
        "cupy-cuda13x": "14.2.0", "torch": "2.11.0", "cuda-bindings": "13.3.1", "pip": "24.0", "setuptools": "80.9.0"}
NODE_REQUIRES = {"numba": ["llvmlite<0.51,>=0.50.0dev0", "numpy<2.6,>=1.22"],
                 "cupy-cuda13x": ["numpy<2.6,>=2.0", "cuda-pathfinder==1.*,>=1.3.4"],
                 "numba-cuda": ["numba>=0.60.0", "packaging"]}


def node(**changed) -> dict:
    return {"python": "3.12", "versions": {**NODE, **changed}, "requires": NODE_REQUIRES}


def test_the_system_lock_takes_its_pins_from_the_cuda_13_lock():
    system, cu13 = sitestack.lock_pins(ROOT / sitestack.LOCK), sitestack.lock_pins(ROOT / "locks" / "cu13.txt")
    assert system and {name: cu13.get(name) for name in system} == system
    # the node's own stack is never in it: the system stack keeps the site's versions
    assert not set(system) & {"numpy", "pandas", "numba", "numba-cuda", "llvmlite", "torch", "cupy-cuda13x"}



# --- what the wheelhouse must carry: every run-time dependency a bare site stack lacks --------------------------------

NODE_PYTHONS = ("3.11", "3.12", "3.13")  # the course's Pythons (pyproject's requires-python)


def runtime_requirements(name: str, requires=metadata.requires) -> set[str]:
    """The distributions ``name`` declares it needs at run time (no extras) on Linux, under any of NODE_PYTHONS."""
    from packaging.requirements import Requirement

    found = set()
    for text in requires(name) or []:
        requirement = Requirement(text)
        environments = [{"extra": "", "python_version": v, "python_full_version": f"{v}.0", "sys_platform": "linux",
                         "platform_system": "Linux", "os_name": "posix", "implementation_name": "cpython",
                         "platform_python_implementation": "CPython"} for v in NODE_PYTHONS]
        if requirement.marker is None or any(requirement.marker.evaluate(e) for e in environments):
            found.add(sitestack.canonical(requirement.name))
    return found


def closure(names, requires=metadata.requires, stop=frozenset()) -> set[str]:
    """``names`` and everything they need, transitively; a name in ``stop`` is neither taken nor followed."""
    seen, todo = set(), [sitestack.canonical(n) for n in names]
    while todo:
        name = todo.pop()
        if name in seen or name in stop:
            continue
        seen.add(name)
        todo += runtime_requirements(name, requires)
    return seen


def uncarried(lock, bare_site, not_carried, requires=metadata.requires) -> set[str]:
    """What the lock's packages need at run time that neither the lock, a bare site stack nor NOT_CARRIED has."""
    site = closure(bare_site, requires)
    return closure(lock, requires, stop=frozenset(site) | set(not_carried)) - {sitestack.canonical(n) for n in lock}


def _installed_or_skip(names):
    missing = []
    for name in names:
        try:
            metadata.distribution(name)
        except metadata.PackageNotFoundError:
            missing.append(name)
    if missing:
        pytest.skip(f"reads the CUDA 13 environment's metadata (make setup); not installed here: {missing}")


def test_the_wheelhouse_carries_every_runtime_dependency_a_bare_site_stack_lacks():
    # derived from the installed packages' own metadata: plotly 7 needs narwhals, which a site that never had
    # plotly lacks (`import plotly` failed on such a node); a dependency a future version adds fails here
    lock = sitestack.lock_pins(ROOT / sitestack.LOCK)
    _installed_or_skip([*lock, *sitestack.BARE_SITE])
    assert uncarried(lock, sitestack.BARE_SITE, sitestack.NOT_CARRIED) == set()
    assert uncarried(set(lock) - {"narwhals"}, sitestack.BARE_SITE, sitestack.NOT_CARRIED) == {"narwhals"}
    # every exception is a real requirement of a carried package (none left behind when that one drops it)
    declared = set().union(*(runtime_requirements(name) for name in lock))
    assert set(sitestack.NOT_CARRIED) <= declared, set(sitestack.NOT_CARRIED) - declared


def test_a_dependency_the_lock_lacks_is_found_through_the_metadata():
    fake = {"plotly": ["narwhals>=1.15", "packaging"], "narwhals": ["pandas>=1; extra == 'pandas'"],
            "packaging": [], "pytest": ["packaging>=24", "colorama>=0.4; sys_platform == 'win32'", "tomli>=2; "
                                        "python_version < '3.11'"],
            "ipython": ["jedi>=0.18", "traitlets>=5", "typing_extensions>=4.6; python_version < '3.12'"],
            "jedi": ["parso"], "traitlets": [], "typing-extensions": []}
    requires = fake.get
    assert uncarried(["plotly"], ["pytest"], {}, requires) == {"narwhals"}
    assert uncarried(["plotly", "narwhals"], ["pytest"], {}, requires) == set()
    # a marker for one of the course's Pythons counts; an exception is not followed into its own needs
    assert uncarried(["ipython", "traitlets"], ["pytest"], {"jedi": "terminal"}, requires) == {"typing-extensions"}
    assert uncarried(["ipython", "traitlets"], ["pytest"], {}, requires) == {"jedi", "parso", "typing-extensions"}


@pytest.mark.parametrize(("version", "spec", "ok"), [
    ("2.11.0", ">=2.11,<3", True), ("2.10.0", ">=2.11,<3", False), ("2.13.0+cpu", ">=2.11,<3", True),
    ("13.0.88", "==13.*", True), ("12.8.1", "==13.*", False), ("0.50.0", ">=0.50.0dev0,<0.51", True),
    ("2.5.2", "<2.5", False), ("2.4.6", "<2.5", True), ("1.4", "~=1.2", True), ("2.0", "~=1.2", False),
    ("0.30.4", ">=0.30,<0.31", True), ("0.31.0", ">=0.30,<0.31", False),
])
def test_a_version_is_checked_against_a_range(version, spec, ok):
    assert sitestack.satisfies(version, spec) is ok


def test_the_h100_nodes_numpy_is_reported_beyond_what_numba_cuda_compiles_with():
    ranges = sitestack.course_ranges(ROOT, 13)
    assert ranges["torch"] == ">=2.11,<3" and ranges["numba-cuda"] == ">=0.30,<0.31"
    (line,) = sitestack.stack_problems(node(), ranges)
    assert line.startswith("numpy 2.5.2: numba-cuda 0.30.4") and "below 2.5" in line
    assert sitestack.stack_problems(node(numpy="2.4.6"), ranges) == []


def test_what_a_site_library_requires_and_the_courses_ranges_are_reported():
    ranges = sitestack.course_ranges(ROOT, 13)
    lines = sitestack.stack_problems(node(numpy="2.6.0", torch="2.10.0", llvmlite="0.49.0"), ranges)
    assert "torch 2.10.0 is outside the course's range >=2.11,<3" in lines
    assert "numpy 2.6.0: numba 0.68.0 requires numpy<2.6,>=1.22" in lines
    assert "numpy 2.6.0: cupy-cuda13x 14.2.0 requires numpy<2.6,>=2.0" in lines
    assert "llvmlite 0.49.0: numba 0.68.0 requires llvmlite<0.51,>=0.50.0dev0" in lines
    without_cupy = node()
    del without_cupy["versions"]["cupy-cuda13x"]
    assert any(line.startswith("cupy-cuda13x is not installed") for line in sitestack.stack_problems(
        without_cupy, ranges)), "a missing GPU library is reported at setup"
    assert not any("not installed" in line for line in sitestack.stack_problems(without_cupy, ranges, missing=False))


def test_the_cuda_major_comes_from_the_sites_cupy_or_cuda_bindings():
    assert sitestack.cuda_major({"cupy-cuda12x": "13.6.0"}) == 12
    assert sitestack.cuda_major({"cuda-bindings": "12.9.1"}) == 12
    assert sitestack.cuda_major({}) == 13


def _wheelhouse(tmp_path: Path, names=("comm-0.2.3-py3-none-any.whl",)) -> Path:
    folder = tmp_path / "wh"
    folder.mkdir()
    for name in names:
        (folder / name).write_bytes(name.encode())
    return folder


def test_no_wheelhouse_or_a_wheel_missing_from_it_is_one_line(tmp_path):
    with pytest.raises(SystemExit, match=r"no wheelhouse at .*make wheelhouse PYVER=.*WHEELHOUSE="):
        sitestack.find_wheels({"comm": "0.2.3"}, tmp_path / "absent")
    folder = _wheelhouse(tmp_path)
    with pytest.raises(SystemExit, match=r"has no wheel of greenlet==3.5.6, plotly==7.1.0: make it again"):
        sitestack.find_wheels({"comm": "0.2.3", "greenlet": "3.5.6", "plotly": "7.1.0"}, folder)
    with pytest.raises(SystemExit, match="has no wheel of comm==0.2.4"):
        sitestack.find_wheels({"comm": "0.2.4"}, folder)
    assert sitestack.find_wheels({"comm": "0.2.3"}, folder) == [folder / "comm-0.2.3-py3-none-any.whl"]
    assert sitestack.find_wheels({}, tmp_path / "absent") == [], "nothing to add: no wheelhouse needed"


def test_the_wheelhouse_checksums_are_verified_when_it_has_them(tmp_path):
    folder = _wheelhouse(tmp_path, ("comm-0.2.3-py3-none-any.whl", "traitlets-5.16.1-py3-none-any.whl"))
    wheels = sorted(folder.glob("*.whl"))
    assert "not verified" in sitestack.verify_checksums(wheels, folder)
    sitestack.write_checksums(folder)
    assert sitestack.verify_checksums(wheels, folder) == "2 wheel(s) match SHA256SUMS"
    assert subprocess.run(["sha256sum", "-c", "--quiet", "SHA256SUMS"], cwd=folder).returncode == 0
    wheels[0].write_bytes(b"half a copy")
    with pytest.raises(SystemExit, match="comm-0.2.3-py3-none-any.whl does not match its line"):
        sitestack.verify_checksums(wheels, folder)
    (folder / "plotly-7.1.0-py3-none-any.whl").write_bytes(b"x")
    with pytest.raises(SystemExit, match="plotly-7.1.0-py3-none-any.whl is not listed"):
        sitestack.verify_checksums([folder / "plotly-7.1.0-py3-none-any.whl"], folder)


def test_a_python_outside_3_11_to_3_13_is_one_line_before_anything_is_made():
    with pytest.raises(SystemExit, match=r"the site's Python \(.*\) is 3.10; the course needs 3.11, 3.12 or 3.13"):
        install.check_python((3, 10), "system")
    with pytest.raises(SystemExit, match="found 3.14"):
        install.check_python((3, 14), "13")
    install.check_python((3, 12), "system")


def _site(tmp_path: Path, **versions: str) -> Path:
    """A site-packages folder holding only the metadata of ``versions``."""
    site = tmp_path / "site" / "lib" / "site-packages"
    for name, version in versions.items():
        info = site / f"{name}-{version}.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    return site


def test_the_wheelhouse_is_checked_before_the_environment_is_touched(tmp_path, monkeypatch, capsys):
    site = _site(tmp_path, pip="24.0", setuptools="80.9.0", traitlets="5.14.3")
    monkeypatch.setattr(sys, "path", [str(site)])
    venv = tmp_path / "venv"
    folder = _wheelhouse(tmp_path)
    with pytest.raises(SystemExit, match="has no wheel of greenlet==3.5.6, ipython") as missing:
        sitestack.install(venv, folder, ROOT, clear=False)
    assert "traitlets" not in str(missing.value), "what the site has is kept, not asked of the wheelhouse"
    assert "kept the site's traitlets 5.14.3 (locks/system.txt: 5.16.1)" in capsys.readouterr().out
    assert not venv.exists()
    monkeypatch.setattr(sys, "path", [str(_site(tmp_path / "bare", setuptools="80.9.0"))])
    with pytest.raises(SystemExit, match="has no pip"):
        sitestack.install(venv, folder, ROOT, clear=False)
    monkeypatch.setattr(sys, "path", [str(_site(tmp_path / "old", pip="24.0", setuptools="59.6.0"))])
    with pytest.raises(SystemExit, match="setuptools 59.6.0: .*68 or newer"):
        sitestack.install(venv, folder, ROOT, clear=False)
    assert not venv.exists()


def test_the_site_packages_come_from_its_sys_path_not_from_the_new_environment(tmp_path):
    venv = tmp_path / "venv"
    own, theirs, lib = venv / "lib" / "site-packages", tmp_path / "site-packages", tmp_path / "python3.12"
    for folder in (own, theirs, lib):
        folder.mkdir(parents=True)
    dirs = sitestack.site_dirs(["", str(lib), str(theirs), str(own), str(theirs)], venv)
    assert dirs == [str(theirs.resolve())]


def test_pip_installs_the_missing_pins_from_the_wheelhouse_alone_then_the_course_without_build_isolation():
    python, folder = Path("/v/bin/python"), Path("/wh")
    wheels, course = sitestack.pip_commands(python, {"plotly": "7.1.0", "comm": "0.2.3"}, folder, ROOT)
    for command in (wheels, course):
        assert {"--no-index", "--no-deps"} <= set(command) and command[:4] == [str(python), "-m", "pip", "install"]
    assert wheels[-4:] == ["--find-links", "/wh", "comm==0.2.3", "plotly==7.1.0"]
    assert course[-3:] == ["--no-build-isolation", "-e", str(ROOT)]
    assert sitestack.pip_commands(python, {}, folder, ROOT) == [course]


def test_the_environment_sees_the_site_packages_through_a_pth_file(tmp_path):
    site = _site(tmp_path, example_site_only="1.0")
    (site / "example_site_only.py").write_text("WHERE = 'site'\n")
    python = sitestack.make_env(tmp_path / "venv", [str(site)], clear=False)
    seen = subprocess.run([str(python), "-c", "import example_site_only as m; print(m.WHERE)"],
                          capture_output=True, text=True)
    assert seen.stdout.strip() == "site", seen.stderr
    assert not list((tmp_path / "venv").rglob("pip")), "no pip in the environment: the site's pip is used"


@pytest.mark.parametrize(("returncode", "output", "candidates", "ran", "says"), [
    (0, "RAN NVIDIA H100 80GB HBM3\n", [], True, "compiled (libNVVM found) and ran on the NVIDIA H100"),
    (3, "SIM no NVIDIA driver found\n", [], None, "skipped: gpucourse chose the simulator (no NVIDIA driver"),
    (None, "", [], False, "no answer in 300 s"),
    (1, "Traceback...\nNvvmSupportError: libNVVM cannot be found.\n", ["/usr/local/cuda-13.0"], False,
     "try `export CUDA_HOME=/usr/local/cuda-13.0`"),
    (1, "NvvmSupportError: libNVVM cannot be found.\n", [], False, "`module load cuda`"),
    (1, "AttributeError: module 'numpy' has no attribute 'row_stack'\n", [], False,
     "FAILED: AttributeError: module 'numpy' has no attribute 'row_stack'"),
])
def test_the_kernel_check_says_what_happened_and_which_cuda_home_to_try(returncode, output, candidates, ran, says):
    verdict = sitestack.kernel_verdict(returncode, output, candidates)
    assert verdict[0] is ran and says in verdict[1], verdict


def test_cuda_home_candidates_are_folders_that_hold_libnvvm(tmp_path):
    for version, has_nvvm in (("13.0", True), ("12.8", False), ("12.4", True)):
        lib = tmp_path / f"cuda-{version}" / "nvvm" / "lib64"
        lib.mkdir(parents=True)
        if has_nvvm:
            (lib / "libnvvm.so.4").write_bytes(b"")
    found = sitestack.cuda_home_candidates({"PATH": ""}, roots=(str(tmp_path),))
    assert found == [str(tmp_path / "cuda-13.0"), str(tmp_path / "cuda-12.4")]
    assert sitestack.cuda_home_candidates({"PATH": "", "CUDA_HOME": found[0]}, roots=(str(tmp_path),)) == found[1:]


def test_without_a_driver_the_kernel_check_is_skipped_and_says_so():
    ran, line = sitestack.kernel_check(Path(sys.executable), driver=None)
    assert ran is None and "skipped: no NVIDIA driver" in line


def test_the_facts_child_reports_the_environment_it_runs_in():
    found = json.loads(subprocess.run([sys.executable, sitestack.__file__, "facts"], capture_output=True,
                                      text=True, check=True).stdout)
    assert found["versions"]["numpy"] == __import__("numpy").__version__
    assert any(r.startswith("numpy") for r in found["requires"]["numba"])


def test_the_system_stack_is_asked_for_by_name_and_needs_linux():
    stack, why = install.choose_stack(13000, "system", platform="linux")
    assert stack == "system" and "kept as it is" in why and "wheelhouse" in why
    with pytest.raises(SystemExit, match="needs Linux"):
        install.choose_stack(None, "system", platform="darwin", machine="arm64")
    assert install.lock_file("system") == ROOT / "locks" / "system.txt"


def test_a_manylinux_platform_also_asks_for_every_older_glibc_tag():
    tags = wheelhouse.platform_tags("manylinux_2_28_x86_64")
    assert tags[0] == "manylinux_2_28_x86_64" and "manylinux_2_24_x86_64" in tags and "manylinux_2_5_x86_64" in tags
    assert {"manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64"} <= set(tags)
    assert "manylinux_2_29_x86_64" not in tags and "linux_x86_64" not in tags
    assert wheelhouse.platform_tags("macosx_11_0_arm64") == ["macosx_11_0_arm64"]


def test_the_wheelhouse_downloads_exactly_the_lock_as_binary_wheels_for_the_nodes_python():
    command = wheelhouse.download_command({"plotly": "7.1.0", "greenlet": "3.5.6"}, Path("/d"), "3.12",
                                          "manylinux_2_28_x86_64")
    text = " ".join(command)
    assert "pip download" in text and "--only-binary=:all: --no-deps" in text
    assert "--python-version 3.12 --implementation cp --abi cp312" in text
    assert command[-2:] == ["greenlet==3.5.6", "plotly==7.1.0"] and "--platform manylinux2014_x86_64" in text


def _dry(*args: str) -> str:
    return subprocess.run(["make", "-n", *args], cwd=ROOT, capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin"}).stdout


def test_make_passes_the_system_stack_its_python_and_wheelhouse_and_doctor_headless():
    assert "/site/python3 gpucourse/tooling/install.py --cuda system --wheelhouse /wh" in _dry(
        "setup", "CUDA=system", "PYTHON=/site/python3", "WHEELHOUSE=/wh")
    assert ("tools/wheelhouse.py --python-version 3.12 --platform manylinux_2_28_x86_64 --dest wheelhouse"
            in _dry("wheelhouse", "PYVER=3.12", "PLATFORM=manylinux_2_28_x86_64"))
    assert "-m gpucourse doctor --headless" in _dry("doctor", "HEADLESS=1")
    assert "-m gpucourse doctor" in _dry("doctor") and "--headless" not in _dry("doctor")


def test_python_m_gpucourse_passes_the_system_stack_and_headless_on(monkeypatch):
    from gpucourse import __main__ as cli
    from gpucourse.tooling import doctor

    seen = {}
    monkeypatch.setattr(install, "main", lambda argv: seen.setdefault("setup", argv) and 0)
    monkeypatch.setattr(doctor, "run_doctor", lambda headless=False: seen.setdefault("headless", headless) and 0)
    cli.main(["setup", "--cuda", "system", "--wheelhouse", "/wh"])
    cli.main(["doctor", "--headless"])
    assert seen == {"setup": ["--cuda", "system", "--wheelhouse", "/wh"], "headless": True}
