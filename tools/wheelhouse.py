"""`make wheelhouse`: on a machine with internet access, the wheels that `make setup CUDA=system` adds on an
offline node, for that node's Python and platform.

    python tools/wheelhouse.py --python-version 3.12 --platform manylinux_2_28_x86_64 --dest wheelhouse

Exactly the pins of locks/system.txt (what the GPU path imports beyond a site's own stack), binary wheels only,
no dependencies; then SHA256SUMS over the folder's wheels (setup checks them) and the total size. Without
--python-version and --platform: wheels for the Python that runs this, on this machine.
"""

from __future__ import annotations

import argparse
import importlib.util
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _load_sitestack():
    """gpucourse/tooling/sitestack.py by its path: standard library only, so this machine needs no course
    environment (importing the gpucourse package would probe for a GPU)."""
    spec = importlib.util.spec_from_file_location("sitestack", ROOT / "gpucourse" / "tooling" / "sitestack.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


sitestack = _load_sitestack()

LEGACY_MANYLINUX = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}  # PEP 599/571/513 names of glibc 2.x


def platform_tags(platform: str) -> list[str]:
    """pip matches --platform literally, but a wheel built for an older glibc (manylinux2014_x86_64 is glibc 2.17)
    runs on a newer one: a manylinux_2_N platform asks for every manylinux tag of glibc 2.N down to 2.5."""
    match = re.fullmatch(r"manylinux_2_(\d+)_(\w+)", platform)
    if not match:
        return [platform]
    newest, arch = int(match[1]), match[2]
    tags = [f"manylinux_2_{minor}_{arch}" for minor in range(newest, 4, -1)]
    return tags + [f"{name}_{arch}" for minor, name in LEGACY_MANYLINUX.items() if minor <= newest]


def download_command(pins: dict[str, str], dest: Path, python_version: str | None, platform: str | None) -> list[str]:
    command = [sys.executable, "-m", "pip", "download", "-q", "--only-binary=:all:", "--no-deps", "-d", str(dest)]
    if python_version:
        command += ["--python-version", python_version, "--implementation", "cp",
                    "--abi", "cp" + python_version.replace(".", "")]
    for tag in platform_tags(platform) if platform else []:
        command += ["--platform", tag]
    return command + [f"{name}=={version}" for name, version in sorted(pins.items())]


def make(dest: Path, python_version: str | None, platform: str | None) -> list[Path]:
    """Download the lock's wheels into ``dest`` (beside any made for another Python); write SHA256SUMS."""
    pins = sitestack.lock_pins(ROOT / sitestack.LOCK)
    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as fresh:  # this run's wheels alone, to count and size them
        subprocess.run(download_command(pins, Path(fresh), python_version, platform), check=True)
        got = sorted(Path(fresh).glob("*.whl"))
        wheels = [Path(shutil.move(str(wheel), dest / wheel.name)) for wheel in got]
    found = {sitestack.wheel_name_version(w.name) for w in wheels}
    missing = [f"{n}=={v}" for n, v in sorted(pins.items()) if (n, v) not in found]
    if missing:
        raise SystemExit(f"wheelhouse: pip gave no wheel of {', '.join(missing)}")
    sitestack.write_checksums(dest)
    return wheels


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--python-version", help="the node's Python, e.g. 3.12 (default: this Python's)")
    parser.add_argument("--platform", help="the node's platform tag, e.g. manylinux_2_28_x86_64 (default: this one)")
    parser.add_argument("--dest", type=Path, default=ROOT / "wheelhouse", help="the folder (default: wheelhouse/)")
    args = parser.parse_args(argv)
    try:
        wheels = make(args.dest, args.python_version, args.platform)
    except subprocess.CalledProcessError as exc:
        print(f"wheelhouse: pip download failed (exit {exc.returncode}, above)", file=sys.stderr)
        return 1
    size_bytes = sum(w.stat().st_size for w in wheels)
    for wheel in wheels:
        print(f"  {wheel.stat().st_size / 1e6:6.2f} MB  {wheel.name}")
    target = f"Python {args.python_version or '.'.join(map(str, sys.version_info[:2]))} on " \
             f"{args.platform or 'this platform'}"
    print(f"{args.dest}: {len(wheels)} wheels for {target}, {size_bytes / 1e6:.1f} MB in all; {sitestack.CHECKSUMS} "
          "written. Copy it with the course to the node, then `make setup CUDA=system WHEELHOUSE=<it>` there.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
