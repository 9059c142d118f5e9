"""`make setup` / `python -m gpucourse setup`: make .venv with the lock that fits this machine.

Three stacks, one lock file each in locks/ (exact pins of everything, test tools included):

* ``13``: NVIDIA driver of CUDA 13 or newer (R580+): numba-cuda[cu13], cupy-cuda13x, torch (CUDA 13).
* ``12``: NVIDIA driver of CUDA 12.x (R525 to R575): numba-cuda[cu12], cupy-cuda12x, torch 2.10.
* ``sim``: no NVIDIA GPU (macOS, Windows, or asked for): no CUDA package at all; kernels run in
  the CUDA simulator that ships with numba; pins taken from the CUDA 13 lock.

The driver's CUDA version comes from ``cuDriverGetVersion`` in the driver library, called with
ctypes (CUDA Driver API reference, "Version Management"): it needs no GPU package and no cuInit.

Standard library only: this runs with the system's Python before any package is installed, as
``python3 gpucourse/tooling/install.py`` (the Makefile) or ``python -m gpucourse setup`` (Windows).
"""

from __future__ import annotations

import argparse
import ctypes
import hashlib
import os
import platform as _platform
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_STACK = "13"
STACKS = ("13", "12", "sim")
SUPPORTED_PYTHONS = ((3, 11), (3, 12), (3, 13))
# Simulator mode: everything a learner and `make test` need, no GPU library; CPU torch for lesson 07.
SIM_EXTRAS = "lab,sim,test,site,hub"


def lock_file(stack: str, root: Path = ROOT) -> Path:
    """The lock a stack installs (the simulator stack takes its pins from the CUDA 13 lock)."""
    return root / "locks" / ("cu12.txt" if stack == "12" else "cu13.txt")


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


def install_commands(stack: str, python: Path, root: Path = ROOT) -> list[list[str]]:
    """The pip commands that install ``stack`` into the environment of ``python``.

    pip compiles every installed module to bytecode one file at a time (about a third of the
    install's CPU time for the CUDA 13 lock: 66 s of 185 s measured); ``--no-compile`` leaves that to
    ``compile_command``, which does it on every core."""
    pip = [str(python), "-m", "pip", "install", "-q", "--no-compile"]
    lock = str(lock_file(stack, root))
    if stack == "sim":
        return [[*pip, "-c", lock, "-e", f"{root}[{SIM_EXTRAS}]"]]
    return [[*pip, "-r", lock], [*pip, "--no-deps", "-e", str(root)]]


def compile_command(python: Path) -> list[str]:
    """Bytecode for everything installed into the environment of ``python``, on every core (what pip
    would have done file by file). Its exit status is ignored: a package may ship a file that is
    not meant to compile, as pip ignores it too."""
    code = ("import compileall, sys, sysconfig; paths = {sysconfig.get_paths()[k] for k in ('purelib', 'platlib')}; "
            "[compileall.compile_dir(p, quiet=2, workers=0) for p in sorted(paths)]")
    return [str(python), "-c", code]


def stamp_text(stack: str, root: Path = ROOT) -> str:
    digest = hashlib.sha256()
    for path in (root / "pyproject.toml", lock_file(stack, root)):
        digest.update(path.read_bytes())
    return f"stack={stack} sha256={digest.hexdigest()}\n"


def setup(asked: str | None = None, venv: Path | None = None, root: Path = ROOT) -> Path:
    """Create ``venv`` (default .venv) if missing and install the chosen lock unless already done."""
    if sys.version_info[:2] not in SUPPORTED_PYTHONS:
        found = ".".join(map(str, sys.version_info[:2]))
        raise SystemExit(f"gpucourse needs Python 3.11, 3.12 or 3.13, found {found}: run it with one of those "
                         "(e.g. `make setup PYTHON=python3.12`)")
    venv = venv or root / ".venv"
    stamp = venv / ".setup-stamp"
    stack, why = choose_stack(None if asked else driver_cuda_version(), asked)
    if not asked and stamp.exists() and stamp.read_text().startswith("stack="):
        stack = stamp.read_text().split()[0].removeprefix("stack=")  # keep the stack chosen before
        why = f"stack {stack} (chosen before; `make setup CUDA=12|13|sim` to change)"
    if stamp.exists() and stamp.read_text() == stamp_text(stack, root):
        return venv
    print(f"gpucourse setup: {why}", flush=True)
    python = venv_python(venv)
    old_stack = stamp.read_text().split()[0] if stamp.exists() and stamp.read_text().startswith("stack=") else None
    if old_stack not in (None, f"stack={stack}"):
        # Another stack is installed there (cupy-cuda12x beside cupy-cuda13x would clash): start afresh.
        if venv.is_symlink():
            raise SystemExit(f"{venv} is a link to another environment: remove the link, then run setup again")
        print(f"Replacing {venv}: it holds another stack", flush=True)
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    print(f"Installing {lock_file(stack, root).relative_to(root)} into {venv} (minutes the first time)…", flush=True)
    for cmd in install_commands(stack, python, root):
        subprocess.run(cmd, check=True)
    subprocess.run(compile_command(python), check=False)
    stamp.write_text(stamp_text(stack, root))
    return venv


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gpucourse setup", description=__doc__.split("\n")[0])
    parser.add_argument("--cuda", choices=STACKS, help="the stack to install (default: from the NVIDIA driver)")
    parser.add_argument("--venv", type=Path, help="where to make the environment (default: .venv)")
    parser.add_argument("--show", action="store_true", help="only print the stack this machine gets, and why")
    args = parser.parse_args(argv)
    if args.show:
        stack, why = choose_stack(None if args.cuda else driver_cuda_version(), args.cuda)
        print(f"{stack}\t{why}")
        return 0
    try:
        setup(args.cuda, args.venv)
    except subprocess.CalledProcessError as exc:
        print(f"gpucourse setup: `{' '.join(exc.cmd)}` failed (exit {exc.returncode})", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
