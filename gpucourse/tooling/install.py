"""`make setup` / `python -m gpucourse setup`: make .venv with the lock that fits this machine.

Four stacks, one lock file each in locks/ (exact pins of everything, test tools included):

* ``13``: NVIDIA driver of CUDA 13 or newer (R580+): numba-cuda[cu13], cupy-cuda13x, torch (CUDA 13).
* ``12``: NVIDIA driver of CUDA 12.x (R525 to R575): numba-cuda[cu12], cupy-cuda12x, torch 2.10.
* ``sim``: no NVIDIA GPU (macOS, Windows, or asked for): no CUDA package at all; kernels run in
  the CUDA simulator that ships with numba; pins taken from the CUDA 13 lock.
* ``system``: a site's own PyTorch, CuPy, numba-cuda and CUDA (an HPC node without internet), kept as they are;
  the course's few pure-Python needs come from a local wheelhouse with no index (sitestack.py).

The driver's CUDA version comes from ``cuDriverGetVersion`` in the driver library, called with
ctypes (CUDA Driver API reference, "Version Management"): it needs no GPU package and no cuInit.

Standard library only: this runs with the system's Python before any package is installed, as
``python3 gpucourse/tooling/install.py`` (the Makefile) or ``python -m gpucourse setup`` (Windows).

The installer is uv (``pip install uv`` into the new environment, then ``uv pip install``): it
installs the same pins as pip, about ten times faster (measured on 2 cores for the CUDA 13 lock:
pip 2 min 26 s, uv 15 s; pip spends most of its time choosing among index links). uv reads no pip
configuration, so the settings pip has here (index, extra indexes, find-links, constraints,
certificate, proxy) are handed to it, and it is told to pick the best version across all indexes as
pip does. When pip has a setting uv cannot be given, when uv cannot be installed or when it fails,
pip installs instead (slower, same pins); ``GPUCOURSE_INSTALLER=pip`` asks for pip.
"""

from __future__ import annotations

import argparse
import ast
import ctypes
import hashlib
import os
import platform as _platform
import subprocess
import sys
from pathlib import Path

if __package__:  # python -m gpucourse setup, or imported
    from gpucourse.tooling import sitestack
else:  # python3 gpucourse/tooling/install.py (the Makefile): this folder is on sys.path, gpucourse is not
    import sitestack

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_STACK = "13"
STACKS = ("13", "12", "sim", "system")
SUPPORTED_PYTHONS = ((3, 11), (3, 12), (3, 13))
# Simulator mode: everything a learner and `make test` need, no GPU library; CPU torch for lesson 07.
SIM_EXTRAS = "lab,sim,test,site,hub"


def lock_file(stack: str, root: Path = ROOT) -> Path:
    """The lock a stack installs (the simulator stack takes its pins from the CUDA 13 lock)."""
    return root / "locks" / {"12": "cu12.txt", "system": "system.txt"}.get(stack, "cu13.txt")


def driver_cuda_version(names: list[str] | None = None) -> int | None:
    """The CUDA version of the installed NVIDIA driver (e.g. 12040 for 12.4), or None without one."""
    if names is None:
        names = {"win32": ["nvcuda.dll"], "darwin": []}.get(sys.platform, ["libcuda.so.1", "libcuda.so"])
    for name in names:
        try:
            lib = ctypes.CDLL(name)
        except OSError:
            continue
        version = ctypes.c_int(0)
        if lib.cuDriverGetVersion(ctypes.byref(version)) == 0 and version.value > 0:
            return version.value
    return None


def version_text(version: int) -> str:
    return f"{version // 1000}.{version % 1000 // 10}"


INTEL_MAC = ("this is an Intel Mac: numba 0.63 and newer and PyTorch 2.3 and newer publish no packages for it, "
             "so the course cannot install here; open the notebooks on Colab (README, 'Colab and Kaggle')")


def choose_stack(driver: int | None, asked: str | None = None, platform: str = sys.platform,
                 machine: str = _platform.machine()) -> tuple[str, str]:
    """(stack, one line saying why) for a driver version (None: no driver) and an optional override."""
    if platform == "darwin" and machine == "x86_64":
        raise SystemExit(INTEL_MAC)
    if asked:
        if asked not in STACKS:
            raise SystemExit(f"CUDA={asked} is not a stack: choose one of {', '.join(STACKS)}")
        if asked != "sim" and platform in ("darwin", "win32"):
            raise SystemExit(f"the CUDA {asked} stack needs Linux (on Windows: WSL2); here use CUDA=sim")
        if asked == "system":
            return asked, (f"system stack: the CUDA stack already installed for {sys.executable}, kept as it is; "
                           "the course's own packages from a wheelhouse, no package index")
        return asked, f"stack CUDA {asked}: asked for" if asked != "sim" else "simulator stack: asked for"
    if platform == "darwin":
        return "sim", "macOS has no NVIDIA CUDA: installing the simulator stack (no CUDA packages)"
    if platform == "win32":
        return "sim", ("native Windows: installing the simulator stack; for an NVIDIA GPU use WSL2 "
                       "and run `make setup` there")
    if driver is None:
        return DEFAULT_STACK, (f"no NVIDIA driver found: installing the default CUDA {DEFAULT_STACK} stack "
                               "(the course runs in simulator mode until a GPU is present)")
    found = f"NVIDIA driver for CUDA {version_text(driver)}"
    if driver >= 13000:
        return "13", f"{found}: installing the CUDA 13 stack"
    if driver >= 12000:
        return "12", f"{found}: installing the CUDA 12 stack"
    return DEFAULT_STACK, (f"{found} is older than either stack supports: installing the default CUDA "
                           f"{DEFAULT_STACK} stack (simulator mode until the driver is updated to R580 or newer)")


def venv_python(venv: Path) -> Path:
    return venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def install_commands(stack: str, python: Path, root: Path = ROOT,
                     installer: list[str] | None = None) -> list[list[str]]:
    """The commands that install ``stack`` into the environment of ``python``: pip's, or those of
    ``installer`` (``uv_command``'s list: uv with pip's settings).

    pip compiles every installed module to bytecode one file at a time (about a third of the
    install's CPU time for the CUDA 13 lock: 66 s of 185 s measured); ``--no-compile`` leaves that to
    ``compile_command``, which does it on every core (uv never compiles unless asked)."""
    pip = installer or [str(python), "-m", "pip", "install", "-q", "--no-compile"]
    lock = str(lock_file(stack, root))
    if stack == "sim":
        return [[*pip, "-c", lock, "-e", f"{root}[{SIM_EXTRAS}]"]]
    return [[*pip, "-r", lock], [*pip, "--no-deps", "-e", str(root)]]


UV = "uv==0.13.9"  # the installer's own pin
# pip's settings that choose what gets installed, and uv's flag for each
UV_FLAGS = {"index-url": "--index-url", "extra-index-url": "--extra-index-url", "find-links": "--find-links",
            "constraint": "--constraint", "trusted-host": "--allow-insecure-host", "no-index": "--no-index"}
# pip's settings that reach uv as environment variables
UV_ENV = {"cert": "SSL_CERT_FILE", "client-cert": "SSL_CLIENT_CERT", "proxy": "HTTPS_PROXY"}
# pip's settings that change nothing that is installed
PIP_ONLY = {"timeout", "default-timeout", "disable-pip-version-check", "no-cache-dir", "progress-bar", "quiet",
            "verbose", "retries", "no-input", "root-user-action", "no-warn-script-location", "no-color",
            "break-system-packages", "require-virtualenv", "cache-dir", "log", "exists-action"}


def pip_settings(listing: str) -> dict[str, list[str]]:
    """pip's settings for `pip install` from `pip config list` (``global.find-links='/opt/wheels'``;
    ``:env:`` lines come from PIP_* variables); a setting's several values are separated by spaces or
    new lines."""
    settings: dict[str, list[str]] = {}
    for line in listing.splitlines():
        key, sep, value = line.partition("=")
        section, _, name = key.rpartition(".")
        if not sep or section not in ("global", "install", ":env:"):
            continue
        try:
            items = str(ast.literal_eval(value)).split()  # pip prints each value as a Python literal
        except (ValueError, SyntaxError):
            items = value.split()
        for item in items:
            if item not in settings.setdefault(name, []):
                settings[name].append(item)
    return settings


def uv_options(settings: dict[str, list[str]]) -> tuple[list[str], dict[str, str]] | None:
    """(uv's flags, environment variables) that give uv pip's ``settings``; None when one of them
    has no uv equivalent (then pip installs)."""
    flags, env = ["--index-strategy", "unsafe-best-match"], {}  # pip: the best version from any index
    for name, values in settings.items():
        if name in UV_FLAGS:
            if name == "no-index":
                if values and values[0].lower() in ("1", "true", "yes", "on"):
                    flags.append("--no-index")
                continue
            flags += [part for value in values for part in (UV_FLAGS[name], value)]
        elif name in UV_ENV:
            env[UV_ENV[name]] = values[-1]
        elif name not in PIP_ONLY:
            return None
    return flags, env


def uv_command(python: Path) -> tuple[list[str], dict[str, str]] | None:
    """The `uv pip install` command for the environment of ``python`` with pip's settings there, and
    the environment to run it in; None when pip should install instead (the reason is printed)."""
    if os.environ.get("GPUCOURSE_INSTALLER", "uv") == "pip":
        return None
    listing = subprocess.run([str(python), "-m", "pip", "config", "list"], capture_output=True, text=True)
    options = uv_options(pip_settings(listing.stdout)) if listing.returncode == 0 else None
    if options is None:
        print("gpucourse setup: pip has settings uv cannot be given here: installing with pip (slower)", flush=True)
        return None
    if subprocess.run([str(python), "-m", "pip", "install", "-q", UV]).returncode != 0:
        print("gpucourse setup: uv could not be installed: installing with pip (slower)", flush=True)
        return None
    flags, env = options
    return [str(python), "-m", "uv", "pip", "install", "-q", "--python", str(python), *flags], {**os.environ, **env}


def compile_command(python: Path, root: Path = ROOT) -> list[str]:
    """Bytecode for everything installed into the environment of ``python``, on every core (what pip
    would have done file by file), except the packages' own test suites (a fifth of the files: the
    course never imports them); and for the course's own package, installed editable from ``root``
    (nothing installs it: where PYTHONDONTWRITEBYTECODE is set, as in many Docker images and on
    this project's CI machine, every kernel would otherwise compile it again: measured 0.5 s of CPU
    to import all lessons). Its exit status is ignored: a package may ship a file that is not meant
    to compile, as pip ignores it too."""
    # a test folder below site-packages (the environment itself may well lie in a folder named test)
    code = ("import compileall, re, sys, sysconfig; "
            "paths = {sysconfig.get_paths()[k] for k in ('purelib', 'platlib')}; "
            r"[compileall.compile_dir(p, quiet=2, workers=0, rx=re.compile(re.escape(p) + r'.*[\\/]tests?[\\/]')) "
            "for p in sorted(paths)]; compileall.compile_dir(sys.argv[1], quiet=2, workers=0)")
    return [str(python), "-c", code, str(root / "gpucourse")]


def stamp_text(stack: str, root: Path = ROOT) -> str:
    digest = hashlib.sha256()
    for path in (root / "pyproject.toml", lock_file(stack, root)):
        digest.update(path.read_bytes())
    return f"stack={stack} sha256={digest.hexdigest()}\n"


def check_python(version: tuple[int, int], stack: str) -> None:
    """One line, before anything is made, when this Python cannot run the course."""
    if version in SUPPORTED_PYTHONS:
        return
    found = ".".join(map(str, version))
    if stack == "system":
        raise SystemExit(f"gpucourse setup: the site's Python ({sys.executable}) is {found}; the course needs "
                         "3.11, 3.12 or 3.13: pass PYTHON=<the site's Python of one of those>")
    raise SystemExit(f"gpucourse needs Python 3.11, 3.12 or 3.13, found {found}: run it with one of those "
                     "(e.g. `make setup PYTHON=python3.12`)")


def setup(asked: str | None = None, venv: Path | None = None, root: Path = ROOT,
          wheelhouse: Path | None = None) -> Path:
    """Create ``venv`` (default .venv) if missing and install the chosen lock unless already done
    (``wheelhouse``: where the system stack's wheels are, default wheelhouse/)."""
    venv = venv or root / ".venv"
    stamp = venv / ".setup-stamp"
    stack, why = choose_stack(None if asked else driver_cuda_version(), asked)
    if not asked and stamp.exists() and stamp.read_text().startswith("stack="):
        stack = stamp.read_text().split()[0].removeprefix("stack=")  # keep the stack chosen before
        why = f"stack {stack} (chosen before; `make setup CUDA=12|13|sim|system` to change)"
    if stamp.exists() and stamp.read_text() == stamp_text(stack, root):
        return venv  # done before: whichever Python runs this (`make doctor` on a node whose python3 is another)
    check_python(sys.version_info[:2], stack)
    print(f"gpucourse setup: {why}", flush=True)
    python = venv_python(venv)
    old_stack = stamp.read_text().split()[0] if stamp.exists() and stamp.read_text().startswith("stack=") else None
    if stack == "system":
        return setup_system(venv, wheelhouse or root / "wheelhouse", root,
                            clear=python.exists() and old_stack != "stack=system")
    if old_stack not in (None, f"stack={stack}"):
        # Another stack is installed there (cupy-cuda12x beside cupy-cuda13x would clash): start afresh.
        if venv.is_symlink():
            raise SystemExit(f"{venv} is a link to another environment: remove the link, then run setup again")
        print(f"Replacing {venv}: it holds another stack", flush=True)
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    print(f"Installing {lock_file(stack, root).relative_to(root)} into {venv} (minutes the first time)…", flush=True)
    uv = uv_command(python)
    try:
        for cmd in install_commands(stack, python, root, uv[0] if uv else None):
            subprocess.run(cmd, check=True, env=uv[1] if uv else None)
    except subprocess.CalledProcessError:
        if uv is None:
            raise
        print("gpucourse setup: uv failed (above): installing with pip instead (slower)", flush=True)
        for cmd in install_commands(stack, python, root):
            subprocess.run(cmd, check=True)
    subprocess.run(compile_command(python, root), check=False)
    stamp.write_text(stamp_text(stack, root))
    return venv


def setup_system(venv: Path, wheelhouse: Path, root: Path, clear: bool) -> Path:
    """The system stack (sitestack.py): the site's packages, the lock's missing wheels, the course; then the
    inherited versions and one kernel are checked and reported (a problem there is reported, not fatal)."""
    if clear:
        print(f"Replacing {venv}: it holds another stack", flush=True)
    python = sitestack.install(venv, wheelhouse.resolve(), root, clear)
    subprocess.run(compile_command(python, root), check=False)
    (venv / ".setup-stamp").write_text(stamp_text("system", root))
    sitestack.report_stack(python, root)
    print(f"gpucourse setup: {sitestack.kernel_check(python, driver_cuda_version())[1]}", flush=True)
    return venv


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gpucourse setup", description=__doc__.split("\n")[0])
    parser.add_argument("--cuda", choices=STACKS, help="the stack to install (default: from the NVIDIA driver)")
    parser.add_argument("--venv", type=Path, help="where to make the environment (default: .venv)")
    parser.add_argument("--wheelhouse", type=Path, help="the system stack's wheels (default: wheelhouse/)")
    parser.add_argument("--show", action="store_true", help="only print the stack this machine gets, and why")
    args = parser.parse_args(argv)
    if args.show:
        stack, why = choose_stack(None if args.cuda else driver_cuda_version(), args.cuda)
        print(f"{stack}\t{why}")
        return 0
    try:
        setup(args.cuda, args.venv, wheelhouse=args.wheelhouse)
    except subprocess.CalledProcessError as exc:
        print(f"gpucourse setup: `{' '.join(exc.cmd)}` failed (exit {exc.returncode})", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
