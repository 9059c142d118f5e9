"""The notebooks' install cell, run as a script: the course installed next to the packages already here.

    python gpucourse-src/gpucourse/tooling/colabsetup.py gpucourse-src

Everywhere but Colab: ``pip install <source>`` (the course's run-time ranges, no GPU extra, so a preinstalled
torch, CuPy and numba-cuda stay). On Colab: ``pip install --no-deps <source>``, then only the requirements that
are not installed at all: Colab pins its own ipykernel and ipywidgets and draws widgets through its own manager,
and an upgrade of either can leave every chart's controls invisible (gpu-mode review G7; colabtools#3020). A
package Colab has in another version than the course's range is kept, and said so in one line.

Standard library only (it runs before the course is importable); pip's own ``packaging`` reads the ranges.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path


def on_colab(environ=None) -> bool:
    """Colab's runtime: it sets COLAB_RELEASE_TAG, and its kernel can import google.colab."""
    if "COLAB_RELEASE_TAG" in (os.environ if environ is None else environ):
        return True
    try:
        return importlib.util.find_spec("google.colab") is not None
    except (ImportError, ValueError):
        return False


def requirements(source: Path) -> list[str]:
    """The course's run-time requirements (pyproject's ``[project] dependencies``)."""
    with open(Path(source) / "pyproject.toml", "rb") as handle:
        return list(tomllib.load(handle)["project"]["dependencies"])


def _split(requirement: str) -> tuple[str, str]:
    """("anywidget", ">=0.9,<1") from "anywidget>=0.9,<1" (extras and markers dropped)."""
    found = re.match(r"\s*([A-Za-z0-9._-]+)\s*(\[[^\]]*\])?\s*([^;]*)", requirement)
    return found.group(1), found.group(3).strip()


def _name(requirement: str) -> str:
    return _split(requirement)[0]


def missing_and_kept(reqs: list[str], version=None) -> tuple[list[str], list[str]]:
    """(requirements not installed at all, "name version (the course's range …)" lines for those installed
    outside their range). ``version(name)``: the installed version or None (a seam for tests)."""
    def installed(name: str) -> str | None:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return None

    version = version or installed
    try:
        from packaging.specifiers import SpecifierSet
    except ImportError:
        try:
            from pip._vendor.packaging.specifiers import SpecifierSet
        except ImportError:
            SpecifierSet = None  # noqa: N806
    missing, kept = [], []
    for requirement in reqs:
        name, spec = _split(requirement)
        have = version(name)
        if have is None:
            missing.append(requirement)
        elif spec and SpecifierSet is not None and not SpecifierSet(spec).contains(have, prereleases=True):
            kept.append(f"{name} {have} (the course is tested with {spec})")
    return missing, kept


def commands(source: str, colab: bool, missing: list[str], python: str = sys.executable) -> list[list[str]]:
    """The pip commands: everywhere but Colab one, with dependencies; on Colab the course without its
    dependencies, then what is missing."""
    pip = [python, "-m", "pip", "install", "-q"]
    if not colab:
        return [[*pip, source]]
    return [[*pip, "--no-deps", source]] + ([[*pip, *missing]] if missing else [])


def main(argv: list[str]) -> int:
    # a path pip reads as a folder: a bare "gpucourse-src" would be looked up on the index as a package name
    source = str(Path(argv[0] if argv else "gpucourse-src").resolve())
    colab = on_colab()
    missing, kept = missing_and_kept(requirements(Path(source))) if colab else ([], [])
    for command in commands(source, colab, missing):
        subprocess.run(command, check=True)
    if kept:
        print("kept Colab's own: " + "; ".join(kept))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
