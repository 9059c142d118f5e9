"""The ``system`` stack: the course on a site's own PyTorch, CuPy, numba-cuda and CUDA, with no package index.

``make setup CUDA=system PYTHON=/site/python3 WHEELHOUSE=dir`` (install.py calls ``install`` and the reports):

1. ``.venv`` is made by the site's Python with ``venv --without-pip``, and a .pth file adds that Python's own
   site-packages with ``site.addsitedir`` (so their own .pth files work too). Not ``--system-site-packages``:
   when the site's Python is itself a venv (``/opt/torch/.venv`` on an H100 node), that flag shows the *base*
   interpreter's packages, not the venv's. No ensurepip either: pip comes from the site's packages.
2. The course's own pure-Python needs (``locks/system.txt``, pins as in ``locks/cu13.txt``) come from the
   wheelhouse alone (pip ``--no-index --find-links --no-deps``); a package the site already has is kept.
3. The course itself, editable, without build isolation: the site's setuptools builds it, nothing is fetched.
4. The inherited versions against pyproject's ranges and the libraries' own NumPy/llvmlite requirements are
   *reported*, never replaced; one kernel is compiled and run in a child process (is libNVVM found?).

Standard library only: install.py runs it before anything is installed. Run as a script (``python
sitestack.py facts|kernel``) it is the child that looks at the new environment from inside.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from glob import glob
from pathlib import Path

LOCK = Path("locks") / "system.txt"
CHECKSUMS = "SHA256SUMS"
PTH = "_gpucourse_site_stack.pth"
# numba-cuda minor -> the first NumPy it cannot compile kernels with (its metadata does not say): 0.30 lowers
# numpy.row_stack, which NumPy 2.5 removed (an H100 node with numpy 2.5.2 compiled no kernel)
NUMBA_CUDA_NUMPY_BELOW = {"0.30": "2.5"}
# compiled against each other: a version outside what a site library requires breaks at import or at JIT time
BOUND = ("numpy", "llvmlite", "numba")
FROM_SITE = ("numpy", "pandas", "numba")  # the course's own dependencies that the site must provide
# A bare site stack: what any GPU site's Python has (with their own dependencies, nothing more; the CuPy of the
# site's CUDA major). The wheelhouse carries what the course adds and every run-time dependency of that which
# these lack (tests/test_install_system.py derives it from the metadata; tests/test_install_offline.py's
# stand-in for a site is exactly this).
BARE_SITE = ("numpy", "numba", "numba-cuda", "cupy-cuda13x", "torch", "pandas", "pytest")
# Requirements the lock's packages declare that the course never imports on a node: not carried, on purpose.
NOT_CARRIED = {
    "jedi": "IPython's completion at a terminal prompt",
    "prompt-toolkit": "IPython's terminal prompt",
    "stack-data": "IPython's verbose tracebacks",
    "pexpect": "IPython's shell escapes (!cmd) at a terminal",
    "matplotlib-inline": "IPython's matplotlib backend (the course draws with plotly)",
    "ipython-pygments-lexers": "IPython's syntax highlighting of a traceback",
    "psutil": "IPython's terminal (kitty graphics detection at a terminal start; the GPU path never imports it)",
    "widgetsnbextension": "ipywidgets' JavaScript for the classic notebook (no notebook server on a node)",
    "jupyterlab-widgets": "ipywidgets' JavaScript for JupyterLab (no JupyterLab on a node)",
}
# what a missing GPU library costs on a GPU (the lessons that import it)
WHY_GPU = {"numba-cuda": "no kernel runs on the GPU without it", "torch": "lessons 04a, 07 and 08 use it on a GPU",
           "cupy": "on a GPU the lessons' array code (xp) and several sweeps use it"}
KERNEL_TIMEOUT_S = 300  # imports, one NVVM compile and a launch: seconds, unless something hangs
REMAKE = "`make wheelhouse PYVER={pyver} PLATFORM=<this node's, e.g. manylinux_2_28_x86_64>` on a connected machine"


def fail(message: str) -> SystemExit:
    return SystemExit(f"gpucourse setup: {message}")


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def lock_pins(path: Path) -> dict[str, str]:
    """{name: version} of a lock's ``name==version`` lines."""
    pins = {}
    for line in path.read_text().splitlines():
        match = re.fullmatch(r"([A-Za-z0-9_.\-]+)==(\S+)", line.split("#")[0].strip())
        if match:
            pins[canonical(match[1])] = match[2]
    return pins


def wheel_name_version(filename: str) -> tuple[str, str]:
    name, version = filename.split("-")[:2]  # a wheel's name: name-version[-build]-python-abi-platform.whl
    return canonical(name), version


# --- the wheelhouse ---------------------------------------------------------------------------------------------


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as file:
        for block in iter(lambda: file.read(2**20), b""):
            digest.update(block)
    return digest.hexdigest()


def write_checksums(folder: Path) -> Path:
    """SHA256SUMS for every wheel in ``folder`` (``sha256sum -c`` reads it too)."""
    path = folder / CHECKSUMS
    path.write_text("".join(f"{sha256(w)}  {w.name}\n" for w in sorted(folder.glob("*.whl"))))
    return path


def find_wheels(wanted: dict[str, str], wheelhouse: Path) -> list[Path]:
    """The wheelhouse's files for each pin (one per Python and platform it was made for); one line if any is missing."""
    pyver = f"{sys.version_info[0]}.{sys.version_info[1]}"
    if not wanted:
        return []
    if not wheelhouse.is_dir():
        raise fail(f"no wheelhouse at {wheelhouse}: make one with {REMAKE.format(pyver=pyver)}, copy it here "
                   "and pass WHEELHOUSE=<its folder> (`--wheelhouse` for python -m gpucourse setup)")
    files = {}
    for wheel in wheelhouse.glob("*.whl"):
        files.setdefault(wheel_name_version(wheel.name), []).append(wheel)
    missing = [f"{name}=={version}" for name, version in sorted(wanted.items()) if (name, version) not in files]
    if missing:
        raise fail(f"the wheelhouse {wheelhouse} has no wheel of {', '.join(missing)}: make it again with "
                   f"{REMAKE.format(pyver=pyver)} (locks/system.txt lists what it must hold)")
    return sorted(w for pin in wanted.items() for w in files[pin])


def verify_checksums(wheels: list[Path], wheelhouse: Path) -> str:
    """Check ``wheels`` against the wheelhouse's SHA256SUMS when it has one; one line if a wheel does not match."""
    listing = wheelhouse / CHECKSUMS
    if not listing.exists():
        return f"no {CHECKSUMS} in {wheelhouse}: wheels not verified"
    sums = {}
    for line in listing.read_text().splitlines():
        digest, _, name = line.partition("  ")
        sums[name.strip().lstrip("*")] = digest.strip()
    for wheel in wheels:
        if wheel.name not in sums:
            raise fail(f"{wheel.name} is not listed in {listing}: make the wheelhouse again (`make wheelhouse`)")
        if sha256(wheel) != sums[wheel.name]:
            raise fail(f"{wheel} does not match its line in {listing}: an incomplete copy? copy the wheelhouse again")
    return f"{len(wheels)} wheel(s) match {CHECKSUMS}"


# --- the environment --------------------------------------------------------------------------------------------


def site_dirs(paths: list[str], venv: Path) -> list[str]:
    """The site Python's package folders on ``paths`` (its sys.path), not those of ``venv`` itself."""
    venv = venv.resolve()
    found = []
    for entry in paths:
        path = Path(entry).resolve() if entry else None
        if path and path.name in ("site-packages", "dist-packages") and path.is_dir() \
                and venv not in path.parents and str(path) not in found:
            found.append(str(path))
    return found


def facts(paths: list[str] | None = None) -> dict:
    """Python version, {distribution: version} (the first on the path wins, as for imports) and the
    requirements of each distribution, of the environment this runs in (or of ``paths`` only)."""
    from importlib import metadata

    versions, requires = {}, {}
    for dist in metadata.distributions(**({"path": paths} if paths is not None else {})):
        name = canonical(dist.metadata["Name"] or "")
        if name and name not in versions:
            versions[name] = dist.version
            requires[name] = [r for r in (dist.requires or []) if ";" not in r]  # no markers: no extras
    return {"python": "{}.{}".format(*sys.version_info[:2]), "versions": versions, "requires": requires}


def env_python(venv: Path) -> Path:
    return venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def make_env(venv: Path, dirs: list[str], clear: bool) -> Path:
    """``venv`` made by this Python without pip, seeing ``dirs`` (the site's packages) after its own."""
    if clear and venv.is_symlink():
        raise fail(f"{venv} is a link to another environment: remove the link, then run setup again")
    python = env_python(venv)
    if clear or not python.exists():
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", *(["--clear"] if clear else []), str(venv)],
                       check=True)
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    lines = [f"import site; site.addsitedir({d!r})\n" for d in dirs]  # an import line: their .pth files too
    (Path(purelib) / PTH).write_text("# the site's own packages (gpucourse setup --cuda system)\n" + "".join(lines))
    return python


def pip_commands(python: Path, wanted: dict[str, str], wheelhouse: Path, root: Path) -> list[list[str]]:
    """pip (the site's, seen through the .pth) installing the missing pins from the wheelhouse, then the course."""
    pip = [str(python), "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile"]
    commands = [[*pip, "--find-links", str(wheelhouse), *(f"{n}=={v}" for n, v in sorted(wanted.items()))]]
    return (commands if wanted else []) + [[*pip, "--no-build-isolation", "-e", str(root)]]


def install(venv: Path, wheelhouse: Path, root: Path, clear: bool, out=print) -> Path:
    """Make ``venv`` on the site's stack (this Python's packages) and add the lock's missing pins and the course.
    Everything that can be wrong with the wheelhouse is found before ``venv`` is touched."""
    dirs = site_dirs(sys.path, venv)
    site = facts(dirs)["versions"]
    pins = lock_pins(root / LOCK)
    wanted = {name: version for name, version in pins.items() if name not in site}
    for name in sorted(set(pins) - set(wanted)):
        if site[name] != pins[name]:
            out(f"gpucourse setup: kept the site's {name} {site[name]} (locks/system.txt: {pins[name]})")
    if "pip" not in site:
        raise fail(f"the site's Python ({sys.executable}) has no pip, which installs the course's wheels")
    if not satisfies(site.get("setuptools", "0"), ">=68"):
        raise fail(f"the site's Python has setuptools {site.get('setuptools', 'not installed')}: "
                   "the course is built without a download only by setuptools 68 or newer")
    wheels = find_wheels(wanted, wheelhouse)
    if wheels:
        out(f"gpucourse setup: {verify_checksums(wheels, wheelhouse)}")
    python = make_env(venv, dirs, clear)
    commands = pip_commands(python, wanted, wheelhouse, root)
    for command in commands:
        try:
            subprocess.run(command, check=True)
        except subprocess.CalledProcessError as exc:
            if "--find-links" in command:
                pyver = "{}.{}".format(*sys.version_info[:2])
                raise fail(f"pip could not install {', '.join(sorted(wanted))} from {wheelhouse} (above): are its "
                           f"wheels for Python {pyver} on this platform? Make it with {REMAKE.format(pyver=pyver)}"
                           ) from exc
            raise
    return python


# --- the reports ------------------------------------------------------------------------------------------------


def _release(version: str) -> tuple[int, ...]:
    """The release numbers of a version (``2.13.0+cpu`` -> 2, 13, 0; pre-release and local parts dropped)."""
    match = re.match(r"\d+(?:\.\d+)*", version.strip())
    return tuple(int(part) for part in match[0].split(".")) if match else (0,)


def satisfies(version: str, spec: str) -> bool:
    """Whether ``version`` meets a PEP 440 specifier such as ``>=2.11,<3`` or ``==13.*`` (release numbers only)."""
    have = _release(version)
    for clause in filter(None, (c.strip() for c in spec.split(","))):
        op, target = re.fullmatch(r"(~=|===|==|!=|<=|>=|<|>)\s*(\S+)", clause).groups()
        if target.endswith(".*"):
            prefix = _release(target[:-2])
            same = (have + (0,) * len(prefix))[:len(prefix)] == prefix
            ok = same if op == "==" else not same
        else:
            want = _release(target)
            width = max(len(have), len(want))
            a, b = have + (0,) * (width - len(have)), want + (0,) * (width - len(want))
            ok = {"==": a == b, "===": a == b, "!=": a != b, "<=": a <= b, ">=": a >= b, "<": a < b, ">": a > b,
                  "~=": a >= b and a[:len(want) - 1] == b[:len(want) - 1]}[op]
        if not ok:
            return False
    return True


def split_requirement(text: str) -> tuple[str, str]:
    """(name, specifier) of ``numba-cuda[cu13]>=0.30,<0.31`` (extras and comments dropped)."""
    match = re.match(r"\s*([A-Za-z0-9_.\-]+)\s*(?:\[[^\]]*\])?\s*([^;#]*)", text)
    return canonical(match[1]), match[2].strip().strip("()")


def cuda_major(versions: dict[str, str]) -> int:
    """The CUDA major version the site's stack is built for (CuPy's name says it; else cuda-bindings)."""
    for major in (13, 12):
        if f"cupy-cuda{major}x" in versions:
            return major
    bindings = _release(versions.get("cuda-bindings", "13"))[0]
    return bindings if bindings in (12, 13) else 13


def course_ranges(root: Path, major: int) -> dict[str, str]:
    """{name: specifier} of pyproject's dependencies and of the GPU extra for CUDA ``major``."""
    import tomllib  # Python 3.11+: imported here, so that an older Python still gets setup's one-line error

    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    texts = project["dependencies"] + project["optional-dependencies"].get(f"cu{major}", [])
    return dict(split_requirement(text) for text in texts)


def stack_problems(found: dict, ranges: dict[str, str], missing: bool = True) -> list[str]:
    """One line per inherited version outside the course's ranges or outside what another site library needs;
    with ``missing``, also what the site lacks that the course or its GPU lessons use."""
    versions, problems = found["versions"], []
    for name, spec in ranges.items():
        if name in versions and spec and not satisfies(versions[name], spec):
            problems.append(f"{name} {versions[name]} is outside the course's range {spec}")
        elif name not in versions and missing and (name in FROM_SITE or name.split("-")[0] in WHY_GPU):
            problems.append(f"{name} is not installed: " + WHY_GPU.get(name.split("-")[0], "every lesson needs it"))
    for dist in sorted(versions):
        for target, spec in map(split_requirement, found["requires"].get(dist, [])):
            if target in BOUND and target in versions and not satisfies(versions[target], spec):
                problems.append(f"{target} {versions[target]}: {dist} {versions[dist]} requires {target}{spec}")
    numba_cuda, numpy = versions.get("numba-cuda"), versions.get("numpy")
    below = NUMBA_CUDA_NUMPY_BELOW.get(".".join(map(str, _release(numba_cuda or "0")[:2])))
    if numba_cuda and numpy and below and not satisfies(numpy, f"<{below}"):
        problems.append(f"numpy {numpy}: numba-cuda {numba_cuda} compiles kernels only with NumPy below {below} "
                        "(it uses numpy.row_stack, which NumPy 2.5 removed)")
    return problems


def report_stack(python: Path, root: Path, out=print) -> list[str]:
    """Print what the new environment inherited and what is outside the ranges; returns the problems."""
    found = json.loads(subprocess.run([str(python), __file__, "facts"], capture_output=True, text=True,
                                      check=True).stdout)
    major = cuda_major(found["versions"])
    problems = stack_problems(found, course_ranges(root, major))
    names = ("numpy", "pandas", "numba", "numba-cuda", "llvmlite", f"cupy-cuda{major}x", "torch")
    seen = ", ".join(f"{n} {found['versions'][n]}" for n in names if n in found["versions"])
    out(f"gpucourse setup: the site's stack (Python {found['python']}): {seen}")
    for line in problems:
        out(f"gpucourse setup: REPORTED (kept as it is): {line}")
    if not problems:
        out("gpucourse setup: every inherited version is within the course's ranges")
    return problems


def cuda_home_candidates(environ=os.environ, roots: tuple[str, ...] = ("/usr/local", "/opt")) -> list[str]:
    """Folders that hold libNVVM (nvvm/lib64/libnvvm.so*), other than the CUDA_HOME already set."""
    places = [environ.get("CUDA_PATH")]
    nvcc = shutil.which("nvcc", path=environ.get("PATH"))
    if nvcc:
        places.append(str(Path(nvcc).resolve().parent.parent))
    for root in roots:
        places += sorted(glob(f"{root}/cuda*"), reverse=True)  # cuda-13.0 before cuda-12.8
    current = environ.get("CUDA_HOME")
    return [p for p in dict.fromkeys(places) if p and p != current and glob(f"{p}/nvvm/lib64/libnvvm.so*")]


def kernel_verdict(returncode: int | None, output: str, candidates: list[str]) -> tuple[bool | None, str]:
    """(ran, one line) from the kernel child's exit status (None: it timed out) and output."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    last = lines[-1] if lines else f"exit status {returncode}"
    if returncode == 0 and last.startswith("RAN "):
        return True, f"kernel check: a kernel compiled (libNVVM found) and ran on the {last[4:]}"
    if returncode == 3 and last.startswith("SIM "):
        return None, f"kernel check skipped: gpucourse chose the simulator ({last[4:]})"
    if returncode is None:
        return False, f"kernel check FAILED: no answer in {KERNEL_TIMEOUT_S} s"
    if "nvvm" not in output.lower():
        return False, f"kernel check FAILED: {last}"
    if candidates:
        return False, (f"kernel check FAILED: numba-cuda cannot find libNVVM ({last}); try `export "
                       f"CUDA_HOME={candidates[0]}` (it has nvvm/lib64/libnvvm.so), then `make doctor HEADLESS=1`")
    return False, (f"kernel check FAILED: numba-cuda cannot find libNVVM ({last}), and no folder with "
                   "nvvm/lib64/libnvvm.so was found: load the site's CUDA toolkit (e.g. `module load cuda`) and "
                   "set CUDA_HOME to its folder")


def kernel_check(python: Path, driver: int | None) -> tuple[bool | None, str]:
    """Compile and run one kernel in the new environment, in a child (a crash or a hang cannot take setup down)."""
    if driver is None:
        return None, "kernel check skipped: no NVIDIA driver here (`make doctor HEADLESS=1` on the GPU node runs it)"
    try:
        done = subprocess.run([str(python), __file__, "kernel"], capture_output=True, text=True,
                              timeout=KERNEL_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return kernel_verdict(None, "", [])
    return kernel_verdict(done.returncode, done.stdout + done.stderr, cuda_home_candidates())


def _kernel_child() -> int:
    import gpucourse  # noqa: F401  (decides the mode, with the course's own workarounds, before numba)
    from gpucourse.measure import runtime

    if not runtime.is_gpu():
        print(f"SIM {runtime.SIM_REASON}")
        return 3
    import numpy as np
    from numba import cuda

    @cuda.jit
    def add_one(x):
        i = cuda.grid(1)
        if i < x.size:
            x[i] += 1

    x = cuda.to_device(np.zeros(64, dtype=np.float32))
    add_one[2, 32](x)
    ok = bool((x.copy_to_host() == 1).all())
    print(f"RAN {runtime.device().name}" if ok else "the kernel ran but gave a wrong result")
    return 0 if ok else 1


if __name__ == "__main__":  # the children, inside the new environment
    if sys.argv[1:] == ["facts"]:
        print(json.dumps(facts()))
    elif sys.argv[1:] == ["kernel"]:
        sys.exit(_kernel_child())
    else:
        sys.exit("usage: python sitestack.py facts|kernel")
