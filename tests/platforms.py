"""`make test-platforms`: the course in environments other than .venv, each in its own venv.

* ``nocuda``  Python 3.11, the simulator stack (`install.py --cuda sim`): none of cuda-bindings,
  cuda-core, the CUDA toolkit wheels or CuPy; every lesson runs (tests/test_notebooks.py) and every
  lab's solution, untouched lab and course-patching version is graded through nbgrader
  (``grade_every_lab``) in the CUDA simulator that ships with numba.
  This is what macOS and Windows get: no Triton either (the course's probe says so).
* ``cu12``    Python 3.12, locks/cu12.txt: the whole lock resolves (a dry run: PyTorch's CUDA 12
  build is several GB), and numba-cuda[cu12] with CUDA 12's ptxas compiles kernels to SASS for
  sm_75 to sm_90 (no GPU needed); unit tests run there. Triton as the lock pins it (3.6.0, without
  torch): compile-check compiles the Triton kernels too, and the Triton tests run (the interpreter's
  need torch and skip).
* ``colab``   Python 3.13 built like Colab's (numba-cuda[cu12], cupy-cuda12x): the notebooks' install
  cell, run for real against this repository, changes none of the GPU packages and adds no CUDA 13
  package; the lessons import in simulator mode. PyTorch is not installed (several GB): a dry run
  shows that the course installs next to torch 2.10.0 (a CUDA 12 build) without touching it.
* ``py313``   Python 3.13, locks/cu13.txt without torch and the CUDA libraries only torch needs
  (torch 2.13.0 for 3.13 is a CUDA build of several GB: a dry run checks that it exists for 3.13):
  cuBLAS and cuRAND load (CuPy's [ctk] wheels), unit tests run.

Run from the repository root: ``python3 tests/platforms.py [name ...]``. Venvs live in
build/platforms/ and are reused; pip's cache makes a second run quick. Prints one line per check
and ends with "N passed, N failed".
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VENVS = ROOT / "build" / "platforms"
PYENV = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
ARCHS = ("sm_75", "sm_80", "sm_86", "sm_89", "sm_90")  # what CUDA 12's ptxas must cover for the course
GPU_PACKAGE_PREFIXES = ("torch", "cupy", "numba-cuda", "cuda-", "nvidia-", "triton")
NO_CUDA = ("cuda-bindings", "cuda-core", "cuda-toolkit", "cupy")
sys.path.insert(0, str(ROOT))  # gpucourse.tooling.build: the install cell, as the notebooks carry it
# torch 2.13.0 for Python 3.13 is a CUDA build of several GB: py313 installs the lock without it
# and without the CUDA libraries only torch needs (a dry run checks that torch resolves there).
TORCH_ONLY = ("torch==", "triton==", "nvidia-cudnn", "nvidia-nccl", "nvidia-nvshmem", "nvidia-cusparselt",
              "nvidia-cufile", "nvidia-cuda-cupti", "nvidia-nvtx")
UNIT_TESTS = ["tests/test_project.py", "tests/test_install.py", "tests/test_microscope_memory.py"]


def interpreter(version: str) -> str:
    """A Python of this minor version: pyenv's, or one on PATH."""
    for candidate in sorted(PYENV.glob(f"{version}.*"), reverse=True):
        if (candidate / "bin" / "python").exists():
            return str(candidate / "bin" / "python")
    found = shutil.which(f"python{version}")
    if not found:
        raise RuntimeError(f"no Python {version} here (pyenv install {version} or apt-get install python{version})")
    return found


def run(cmd: list[str], **kwargs) -> subprocess.CompletedProcess:
    done = subprocess.run([str(c) for c in cmd], cwd=kwargs.pop("cwd", ROOT), capture_output=True, text=True,
                          **kwargs)
    if done.returncode != 0:
        raise RuntimeError(f"`{' '.join(map(str, cmd))}` exited {done.returncode}:\n{done.stdout[-3000:]}\n"
                           f"{done.stderr[-3000:]}")
    return done


def fresh_venv(name: str, version: str) -> Path:
    venv = VENVS / name
    python = venv / "bin" / "python"
    if python.exists() and run([python, "-c", "import sys; print(sys.version_info[:2])"]).stdout.strip() != str(
            tuple(map(int, version.split(".")))):
        shutil.rmtree(venv)
    if not python.exists():
        run([interpreter(version), "-m", "venv", venv])
    return python


def installed(python: Path) -> dict[str, str]:
    rows = json.loads(run([python, "-m", "pip", "list", "--format=json"]).stdout)
    return {r["name"].lower().replace("_", "-"): r["version"] for r in rows}


def lock_lines(stack: str, skip: tuple[str, ...] = ()) -> list[str]:
    lines = (ROOT / "locks" / f"{stack}.txt").read_text().splitlines()
    return [ln for ln in lines if ln.strip() and not ln.startswith("#") and not ln.startswith(skip)]


def dry_run(python: Path, requirements: list[str], *extra: str) -> list[dict]:
    """What pip would install (a resolution from package metadata; no wheel is downloaded)."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        run([python, "-m", "pip", "install", "-q", "--dry-run", "--ignore-installed", "--report", report, *extra,
             *requirements])
        return [item["metadata"] for item in json.loads(report.read_text())["install"]]


def lock_resolves(python: Path, stack: str) -> int:
    """The whole lock, dependencies included, resolves to itself: nothing missing, no other version."""
    lock = {ln.split("==")[0]: ln.split("==")[1] for ln in lock_lines(stack)}
    plan = dry_run(python, ["-r", str(ROOT / "locks" / f"{stack}.txt")])
    got = {re.sub(r"[-_.]+", "-", m["name"]).lower(): m["version"].split("+")[0] for m in plan}
    wrong = {n: v for n, v in got.items() if lock.get(n) != v}
    assert not wrong, f"locks/{stack}.txt is incomplete or inconsistent here: {wrong}"
    return len(got)


# make test's two workers (Makefile PYTEST_2): tests/conftest.py hands out the slow tests first
TWO_WORKERS = ("-n", "2", "--dist", "loadgroup", "--no-loadscope-reorder")


def unit_tests(python: Path, tests: list[str], marker: str = "not slow and not gpu", workers=()) -> str:
    env = dict(os.environ, PYTHONPATH=str(ROOT), GPUCOURSE_MODE="sim")
    done = run([python, "-m", "pytest", "-q", "-p", "no:cacheprovider", *workers, "-m", marker, *tests], env=env)
    return done.stdout.strip().splitlines()[-1]


# Triton (issue 49): the course's one probe, asked in a lane's own venv. nocuda is macOS/Windows, where Triton has no
# wheel: the tensor-core and attention lessons must show recordings there; cu12 compiles and runs them with Triton 3.6.
TRITON_PROBE = "from gpucourse.measure.tritonmode import triton_available; print(triton_available())"
TRITON_TESTS = ["tests/test_tritonmode.py", "tests/test_tensorcores.py", "tests/test_triton_inputs.py",
                "tests/test_attention_triton.py",
                "tests/test_compile_check.py::test_triton_kernels_compile_for_turing_to_blackwell_and_say_which_tensor_cores"]


def triton_here(python: Path) -> bool:
    env = dict(os.environ, PYTHONPATH=str(ROOT), GPUCOURSE_MODE="sim")
    return run([python, "-c", TRITON_PROBE], env=env).stdout.strip().splitlines()[-1] == "True"


def assert_no_triton(python: Path) -> None:
    """The no-CUDA profile is the no-Triton profile: neither installed nor found by the course."""
    assert "triton" not in installed(python) and not triton_here(python), "the simulator stack must hold no Triton"


def triton_lane(python: Path, stack: str) -> str:
    """Triton as the lock pins it, found by the course, and the Triton tests (those needing torch skip without it)."""
    pin = dict(ln.split("==") for ln in lock_lines(stack) if ln.startswith("triton=="))["triton"]
    have = installed(python).get("triton")
    assert have == pin and triton_here(python), f"locks/{stack}.txt pins triton {pin}, found {have}"
    return f"triton {have}: " + unit_tests(python, TRITON_TESTS)


def check_nocuda() -> str:
    python = fresh_venv("nocuda", "3.11")
    run([python, "-m", "pip", "install", "-q", "-U", "pip"])  # a newer resolver: minutes faster
    run([python, ROOT / "gpucourse" / "tooling" / "install.py", "--cuda", "sim", "--venv", python.parent.parent])
    have = installed(python)
    found = [n for n in have if n.startswith(NO_CUDA) or n.startswith("nvidia-")]
    assert not found, f"the simulator stack must hold no CUDA package, found {found}"
    assert_no_triton(python)
    # every lesson executed (on two workers: issue 50), and every lab's solution, untouched lab and
    # course-patching version graded through nbgrader, once, two students at a time (issue 50: this lane
    # ran every lab's test file, whose known-wrong and hostile versions make test already grades)
    summary = unit_tests(python, ["tests/test_notebooks.py"], marker="slow", workers=TWO_WORKERS)
    env = dict(os.environ, PYTHONPATH=str(ROOT), GPUCOURSE_MODE="sim")
    graded = run([python, ROOT / "tests" / "platforms.py", GRADE_EVERY_LAB], env=env).stdout.strip().splitlines()[-1]
    return f"no CUDA package; numba's own simulator; notebooks: {summary}; labs: {graded}"


GRADE_EVERY_LAB = "--grade-every-lab"  # run by check_nocuda with the nocuda venv's Python


def grade_every_lab(jobs: int = 2, labs: list[str] | None = None) -> str:
    """Every lab (or ``labs``) graded in this interpreter's environment through ``python -m gpucourse grade``
    (gpucourse.tooling.grading.known): the solution full marks, the untouched lab and the course-patching
    version 0; the solution and the untouched lab run as released (tests/labtools.py: no error or stderr
    in the solution, the untouched lab stops at exercise 1, both open with the banner). One line."""
    import nbformat

    sys.path.insert(0, str(ROOT / "tests"))
    from labtools import Score, check_runs_as_released

    from gpucourse.measure.tritonmode import triton_available
    from gpucourse.tooling.build import lab_names
    from gpucourse.tooling.grading import known
    from gpucourse.tooling.grading.hidden import CANNOT_CHECK

    labs = labs or lab_names(ROOT)
    refused = [] if triton_available() else [lab for lab in labs if lab in NEEDS_TRITON]
    with tempfile.TemporaryDirectory(prefix="platform-labs-") as tmp:
        table = known.grade_known(labs, Path(tmp), timeout_s=3600.0, jobs=jobs)

        def graded(student: str, lab: str) -> nbformat.NotebookNode:
            return nbformat.read(Path(tmp, "course", "autograded", student, lab, f"{lab}.ipynb"), as_version=4)

        for row in table:
            if row["lab"] in refused and row["student"] == "solution" and row["score"] is not None:
                lost = points_refused_for_triton(graded("solution", row["lab"]))
                row["as_expected"] = row["score"] == row["max_score"] - lost
        ok, line = known.summary(table)
        assert ok, line
        for lab in labs:
            solution = graded("solution", lab)
            if lab in refused:  # its Triton cells' one-line refusals are checked above; the rest runs as released
                solution.cells = [c for c in solution.cells if not any(
                    o.get("evalue") == CANNOT_CHECK for o in c.get("outputs", []))]
            check_runs_as_released({"solution": Score(notebook=solution),
                                    "untouched": Score(notebook=graded("untouched", lab))})
    also = f"; without Triton, {', '.join(refused)}: its Triton cells refused in one line, the rest full"
    return f"{len(labs)} labs, {len(table)} submissions graded as expected{also if refused else ''}"


# labs whose grader compiles the learner's choice with Triton (Linux only): where Triton is missing, the solution
# scores every point but those cells', each refused in one line: this grader cannot check it (macOS, Windows)
NEEDS_TRITON = ("lab12_tensor_cores",)


def points_refused_for_triton(notebook) -> float:
    """The points of the graded cells that failed, each of which must have failed saying the grader cannot check it
    without Triton (hidden.CANNOT_CHECK, a refusal feedback shows); at least one must have."""
    from gpucourse.tooling.grading.hidden import CANNOT_CHECK, REFUSED

    failed = [c for c in notebook.cells if c.cell_type == "code" and c.metadata.get("nbgrader", {}).get("grade")
              and any(o.output_type == "error" for o in c.get("outputs", []))]
    assert failed, "without Triton, the Triton cells of this lab should be refused"
    for cell in failed:
        error = next(o for o in cell.outputs if o.output_type == "error")
        assert (error.ename, error.evalue) == (REFUSED, CANNOT_CHECK), (error.ename, error.evalue[:200])
    return float(sum(c.metadata["nbgrader"]["points"] for c in failed))


def compile_kernels(python: Path) -> str:
    """Kernels to SASS for ARCHS: the course's own check where it exists, else a few kernels here."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("NUMBA_ENABLE_CUDASIM", None)
    has_check = subprocess.run([python, "-m", "gpucourse", "compile-check", "--help"], cwd=ROOT, env=env,
                               capture_output=True).returncode == 0
    if has_check:
        out = run([python, "-m", "gpucourse", "compile-check", "--arch", ",".join(ARCHS)], env=env).stdout
        return f"gpucourse compile-check: {out.strip().splitlines()[-1] if out.strip() else 'ok'}"
    script = f"""
import os, subprocess, sys, tempfile
os.environ.pop("NUMBA_ENABLE_CUDASIM", None)
from numba import cuda, float32
from cuda import pathfinder
ptxas = pathfinder.find_nvidia_binary_utility("ptxas")

def copy(a, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = a[i]

def tile_sum(a, out):
    tile = cuda.shared.array(256, float32)
    tile[cuda.threadIdx.x] = a[cuda.grid(1)]
    cuda.syncthreads()
    if cuda.threadIdx.x == 0:
        cuda.atomic.add(out, 0, tile[0] + tile[255])

sigs = {{copy: "void(float32[:], float32[:])", tile_sum: "void(float32[:], float32[:])"}}
for arch in {list(ARCHS)!r}:
    cc = (int(arch[3]), int(arch[4]))
    for fn, sig in sigs.items():
        ptx, _ = cuda.compile_ptx(fn, sig, cc=cc)
        with tempfile.TemporaryDirectory() as tmp:
            src = os.path.join(tmp, "k.ptx")
            open(src, "w").write(ptx)
            subprocess.run([ptxas, "-arch=" + arch, src, "-o", os.path.join(tmp, "k.cubin")], check=True)
version = subprocess.run([ptxas, "--version"], capture_output=True, text=True).stdout.strip().splitlines()[-1]
print(len(sigs) * {len(ARCHS)}, "kernels to SASS,", version)
"""
    return run([python, "-c", script], env=env).stdout.strip()


def check_cu12() -> str:
    python = fresh_venv("cu12", "3.12")
    run([python, "-m", "pip", "install", "-q", "-U", "pip"])  # PEP 658 metadata: the dry run reads no wheel
    resolved = lock_resolves(python, "cu12")
    run([python, "-m", "pip", "install", "-q", "-c", ROOT / "locks" / "cu12.txt", "-e", f"{ROOT}[lab]",
         "numba-cuda[cu12]", "cuda-toolkit[nvcc]", "triton", "pytest", "pyyaml", "packaging"])
    have = installed(python)
    assert have["cuda-toolkit"].startswith("12.") and "cupy-cuda13x" not in have
    return f"lock resolves to itself ({resolved} packages); {compile_kernels(python)}; unit tests: " + unit_tests(
        python, UNIT_TESTS) + f"; {triton_lane(python, 'cu12')}"


def check_colab() -> str:
    python = fresh_venv("colab", "3.13")
    cu12 = ROOT / "locks" / "cu12.txt"
    run([python, "-m", "pip", "uninstall", "-q", "-y", "gpucourse"]) if "gpucourse" in installed(python) else None
    run([python, "-m", "pip", "install", "-q", "-U", "pip"])
    run([python, "-m", "pip", "install", "-q", "-c", cu12, "numba-cuda[cu12]", "cupy-cuda12x"])
    before = {n: v for n, v in installed(python).items() if n.startswith(GPU_PACKAGE_PREFIXES)}
    # torch is not installed (several GB): resolve the course next to Colab's kind of torch instead
    beside_torch = dry_run(python, [str(ROOT), "torch==2.10.0"])
    planned = {m["name"].lower().replace("_", "-"): m["version"] for m in beside_torch}
    cuda13 = [n for n, v in planned.items() if n.endswith("-cu13") or "cuda13" in n
              or (n.startswith("nvidia-") and not n.endswith("-cu12"))
              or (n.startswith("cuda-") and v.startswith("13"))]
    assert planned["torch"] == "2.10.0" and not cuda13, cuda13
    # the notebooks' first code cell, run for real, with this repository as the course's address
    from gpucourse.tooling.build import INSTALL_CELL

    with tempfile.TemporaryDirectory() as work:
        cell = INSTALL_CELL.format(repo=f"file://{ROOT}")
        lessons = ("from gpucourse.measure import runtime\n"
                   "from gpucourse.lessons import warps, divergence, coalescing, tiling, races, precision\n")
        lessons += "import gpucourse.lessons.occupancy, gpucourse.microscope\nprint(runtime.banner().lines()[0])"
        # G6: what this stack decides on Colab's T4 driver (CUDA 12.4): GPU mode only if its PTX can be linked
        lessons += ("\nt4 = runtime.Driver((12, 4), (runtime.ProbedDevice('Tesla T4', (7, 5)),))"
                    "\nprint('on a CUDA 12.4 driver:', runtime.decide(probe=lambda: (t4, ''))[0])")
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"GPUCOURSE_MODE": "sim"}
        out = run([python, "-c", cell + "\n" + lessons], cwd=work, env=env).stdout
    after = {n: v for n, v in installed(python).items() if n.startswith(GPU_PACKAGE_PREFIXES)}
    assert after == before, f"the install changed GPU packages: {before} -> {after}"
    added = [n for n in installed(python) if n.endswith("-cu13") or "cuda13" in n]
    assert not added, added
    return (f"{len(before)} GPU packages unchanged (numba-cuda {before['numba-cuda']}, cupy-cuda12x "
            f"{before['cupy-cuda12x']}); next to torch 2.10.0: no CUDA 13 package; lessons: {out.strip()[:60]}; "
            f"{out.strip().splitlines()[-1]}")


def check_py313() -> str:
    python = fresh_venv("py313", "3.13")
    run([python, "-m", "pip", "install", "-q", "-U", "pip"])  # PEP 658 metadata: the dry run reads no wheel
    resolved = lock_resolves(python, "cu13")  # torch 2.13.0 included: its metadata only
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as req:
        req.write("\n".join(lock_lines("cu13", skip=TORCH_ONLY)) + "\n")
    try:
        run([python, "-m", "pip", "install", "-q", "-r", req.name])
    finally:
        os.unlink(req.name)
    run([python, "-m", "pip", "install", "-q", "--no-deps", "-e", ROOT])
    libs = run([python, "-c", "from cuda import pathfinder\nfor lib in ('cublas', 'curand'):\n"
                "    print(lib, pathfinder.load_nvidia_dynamic_lib(lib).abs_path.rsplit('/', 1)[-1])"]).stdout.split()
    tests = unit_tests(python, UNIT_TESTS)
    libs = " ".join(libs)
    return f"cu13 lock resolves to itself ({resolved} packages), installs without torch; loads {libs}; {tests}"


CHECKS = {"nocuda": check_nocuda, "cu12": check_cu12, "colab": check_colab, "py313": check_py313}


def timed(name: str) -> tuple[bool, str]:
    start = time.monotonic()
    try:
        result = CHECKS[name]()
    except (AssertionError, RuntimeError, KeyError) as exc:
        return False, f"FAILED {name} ({time.monotonic() - start:.0f} s): {type(exc).__name__}: {exc}"
    return True, f"ok     {name} ({time.monotonic() - start:.0f} s): {result}"


def main(names: list[str]) -> int:
    names = names or list(CHECKS)
    # two lanes: the simulator's notebooks (on two pytest workers) beside the others, which mostly wait for pip
    lanes = [[n for n in names if n == "nocuda"], [n for n in names if n != "nocuda"]]
    outcomes = []
    with ThreadPoolExecutor(max_workers=2) as pool:
        for lane in pool.map(lambda lane: [timed(n) for n in lane], lanes):
            outcomes += lane
    for _, line in outcomes:
        print(line, flush=True)
    passed = sum(ok for ok, _ in outcomes)
    print(f"{passed} passed, {len(outcomes) - passed} failed")
    return 0 if passed == len(outcomes) else 1


if __name__ == "__main__":
    if sys.argv[1:] == [GRADE_EVERY_LAB]:
        print(grade_every_lab())
        sys.exit(0)
    sys.exit(main(sys.argv[1:]))
