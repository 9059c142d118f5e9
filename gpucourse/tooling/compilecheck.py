"""Every kernel the course launches compiles for every architecture, without a GPU.

    python -m gpucourse compile-check --arch 75,80,86,89,90,100,120

numba-cuda writes each kernel's PTX (in one child process with numba's real CUDA target: no GPU
needed; typed and lowered once, then NVVM once per architecture family, the PTX ``compile_ptx``
writes for that family), and the ``ptxas`` of the installed CUDA
toolkit assembles it to SASS for each architecture, reporting registers, shared memory and spills
(``gpucourse.measure.ptxinfo``). A kernel that does not compile for an architecture is a failure.

The kernels and the argument types they are launched with are listed in ``KERNELS`` below (the
types as each lesson module's launch code creates its arrays). The lab solutions' kernels are in
``LAB_KERNELS``: a lab is a notebook (jupytext text in ``solutions/``), never imported by the
course library, so the compiler process reads its code cells, runs only their imports,
definitions and constant assignments in a scratch namespace (no test cell, no launch: no GPU
needed) and compiles the ``@cuda.jit`` kernels found there.

The Triton kernels of the tensor-core and attention lessons (``TRITON_KERNELS``, labels ``triton:...``, so
``--only triton:`` selects them) are compiled by Triton itself in another child process
(``gpucourse.tooling.tritoncheck``), which also says which tensor-core instructions each architecture got and
fails where that is not what the lessons teach. Where Triton is missing (macOS, Windows) they are left out.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from importlib import util
from pathlib import Path

from gpucourse.errors import InvalidConfig
from gpucourse.measure import ptxinfo
from gpucourse.measure.compat import CHILD_PRELUDE
from gpucourse.measure.tritonmode import TRITON_MISSING, triton_available
from gpucourse.tooling import tritoncheck

CUDA13_ARCHS = (75, 80, 86, 89, 90, 100, 120)
CUDA12_ARCHS = (75, 80, 86, 89, 90)


@dataclass(frozen=True)
class CheckedKernel:
    lesson: str
    module: str
    getter: str  # an attribute of ``module`` or a call of one of its factories, e.g. "tiled_matmul_kernel(32)"
    signature: str

    @property
    def label(self) -> str:
        if self.module.endswith(".py"):  # a lab solution's notebook text
            return f"{Path(self.module).stem}.{self.getter}"
        module = self.module.removeprefix("gpucourse.").removeprefix("lessons.").removesuffix(".kernels")
        return f"{module}.{self.getter}"


F1, F2 = "float32[::1]", "float32[:, ::1]"
I1 = "int32[::1]"
KERNELS = (
    CheckedKernel("00", "gpucourse.lessons.measuring.kernels", "_spin_kernel()", f"void({F1}, int64)"),
    CheckedKernel("00", "gpucourse.tooling.doctor", "_add_one()", f"void({F1})"),
    CheckedKernel("00a", "gpucourse.lessons.first_kernels.kernels", "who_am_i", f"void({I1}, {I1}, {I1})"),
    CheckedKernel("00a", "gpucourse.lessons.first_kernels.kernels", "saxpy", f"void(float32, {F1}, {F1}, {F1})"),
    CheckedKernel("00a", "gpucourse.lessons.first_kernels.kernels", "saxpy_unguarded",
                  f"void(float32, {F1}, {F1}, {F1})"),
    CheckedKernel("00a", "gpucourse.lessons.first_kernels.kernels", "saxpy_2d", f"void(float32, {F2}, {F2}, {F2})"),
    CheckedKernel("00a", "gpucourse.lessons.first_kernels.kernels", "saxpy_grid_stride",
                  f"void(float32, {F1}, {F1}, {F1})"),
    CheckedKernel("01", "gpucourse.lessons.warps.kernels", "_fma_kernel()", f"void({F1}, int64)"),
    CheckedKernel("02", "gpucourse.lessons.divergence.kernels", "two_paths",
                  f"void(uint8[::1], {F1}, {F1}, int64, int64)"),
    CheckedKernel("02", "gpucourse.lessons.divergence.kernels", "two_paths_remapped",
                  f"void(int64[::1], uint8[::1], {F1}, {F1}, int64, int64)"),
    CheckedKernel("02", "gpucourse.lessons.divergence.kernels", "predicated", f"void(uint8[::1], {F1}, {F1})"),
    CheckedKernel("03", "gpucourse.lessons.coalescing.kernels", "strided_copy",
                  f"void({F1}, {F1}, int64, int64, int64)"),
    CheckedKernel("03", "gpucourse.lessons.coalescing.kernels", "drift_aos", f"void({F2}, float64)"),
    CheckedKernel("03", "gpucourse.lessons.coalescing.kernels", "drift_soa", f"void({', '.join([F1] * 6)}, float64)"),
    CheckedKernel("03", "gpucourse.lessons.coalescing.kernels", "copy_rows", f"void({F2}, {F2})"),
    CheckedKernel("03", "gpucourse.lessons.coalescing.kernels", "copy_columns", f"void({F2}, {F2})"),
    # lesson 03, work per thread (issue 38): the coarsened copy, and the best copy on 8-byte lanes
    CheckedKernel("03", "gpucourse.lessons.coalescing.kernels", "copy_ilp4", f"void({F1}, {F1}, int64, int64, int64)"),
    CheckedKernel("03", "gpucourse.lessons.coalescing.kernels", "best_copy", "void(float64[::1], float64[::1], int64)"),
    # lesson 03's compiler table: the 16-byte copy through an @intrinsic (wide.py; never launched by the course)
    CheckedKernel("03", "gpucourse.lessons.coalescing.wide", "copy4", "void(float32[::1], float32[::1])"),
    CheckedKernel("04", "gpucourse.lessons.tiling.kernels", "naive_matmul_kernel()", f"void({F2}, {F2}, {F2})"),
    CheckedKernel("04", "gpucourse.lessons.tiling.kernels", "tiled_matmul_kernel(16)", f"void({F2}, {F2}, {F2})"),
    CheckedKernel("04", "gpucourse.lessons.tiling.kernels", "tiled_matmul_kernel(32)", f"void({F2}, {F2}, {F2})"),
    CheckedKernel("04", "gpucourse.lessons.tiling.kernels", "register_blocked_kernel()", f"void({F2}, {F2}, {F2})"),
    CheckedKernel("04", "gpucourse.lessons.tiling.kernels", "vectorised_matmul_kernel(64, 8, 4)",
                  f"void({F2}, {F2}, {F2})"),
    CheckedKernel("04", "gpucourse.lessons.tiling.kernels", "vectorised_matmul_kernel(128, 8, 8)",
                  f"void({F2}, {F2}, {F2})"),
    CheckedKernel("04", "gpucourse.lessons.tiling.kernels", "copy_kernel()", f"void({F2}, {F2})"),
    CheckedKernel("04", "gpucourse.lessons.tiling.kernels", "naive_transpose_kernel()", f"void({F2}, {F2})"),
    CheckedKernel("04", "gpucourse.lessons.tiling.kernels", "shared_transpose_kernel(pad=0)", f"void({F2}, {F2})"),
    CheckedKernel("04", "gpucourse.lessons.tiling.kernels", "shared_transpose_kernel(pad=1)", f"void({F2}, {F2})"),
    CheckedKernel("04a", "gpucourse.lessons.reductions.kernels", "interleaved_kernel(256)", f"void({F1}, {F1})"),
    CheckedKernel("04a", "gpucourse.lessons.reductions.kernels", "strided_index_kernel(256)", f"void({F1}, {F1})"),
    CheckedKernel("04a", "gpucourse.lessons.reductions.kernels", "sequential_kernel(256)", f"void({F1}, {F1})"),
    CheckedKernel("04a", "gpucourse.lessons.reductions.kernels", "first_add_kernel(256)", f"void({F1}, {F1})"),
    CheckedKernel("04a", "gpucourse.lessons.reductions.kernels", "warp_shuffle_kernel(256)", f"void({F1}, {F1})"),
    CheckedKernel("04a", "gpucourse.lessons.reductions.kernels", "warp_shuffle_kernel(256, atomic=True)",
                  f"void({F1}, {F1})"),
    CheckedKernel("04a", "gpucourse.lessons.reductions.kernels", "grid_stride_kernel(256)", f"void({F1}, {F1})"),
    CheckedKernel("04a", "gpucourse.lessons.reductions.kernels", "count_above_per_lane", f"void({F1}, float32, {I1})"),
    CheckedKernel("04a", "gpucourse.lessons.reductions.kernels", "count_above_ballot", f"void({F1}, float32, {I1})"),
    CheckedKernel("04a", "gpucourse.lessons.reductions.kernels", "compact_above_per_lane",
                  f"void({F1}, float32, {I1}, {F1})"),
    CheckedKernel("04a", "gpucourse.lessons.reductions.kernels", "histogram_per_lane", f"void({F1}, {I1})"),
    CheckedKernel("04a", "gpucourse.lessons.reductions.kernels", "hillis_steele_kernel(256)", f"void({F1}, {F1})"),
    CheckedKernel("04a", "gpucourse.lessons.reductions.kernels", "blelloch_kernel(256)", f"void({F1}, {F1})"),
    CheckedKernel("05", "gpucourse.lessons.occupancy.kernels", "copy_kernel", f"void({F1}, {F1})"),
    CheckedKernel("05", "gpucourse.lessons.occupancy.kernels", "copy_ilp4_kernel", f"void({F1}, {F1})"),
    CheckedKernel("05", "gpucourse.lessons.occupancy.kernels", "copy_resident_kernel", f"void({F1}, {F1})"),
    CheckedKernel("05", "gpucourse.lessons.occupancy.kernels", "copy_resident_ilp4_kernel", f"void({F1}, {F1})"),
    CheckedKernel("05", "gpucourse.lessons.occupancy.kernels", "fma_kernel", f"void({F1}, int32)"),
    CheckedKernel("05", "gpucourse.lessons.occupancy.kernels", "fma_ilp4_kernel", f"void({F1}, int32)"),
    CheckedKernel("05", "gpucourse.lessons.occupancy.kernels", "accumulators_kernel", f"void({F1}, {F1}, int32)"),
    CheckedKernel("05", "gpucourse.lessons.occupancy.kernels", "block_sum_kernel", f"void({F1}, {F1})"),
    CheckedKernel("06", "gpucourse.lessons.races.kernels", "histogram_racy", f"void({F1}, {I1})"),
    CheckedKernel("06", "gpucourse.lessons.races.kernels", "histogram_atomic", f"void({F1}, {I1})"),
    CheckedKernel("06", "gpucourse.lessons.races.kernels", "histogram_privatised", f"void({F1}, {I1})"),
    CheckedKernel("06", "gpucourse.lessons.races.kernels", "_zero_int32", f"void({I1})"),
    CheckedKernel("06", "gpucourse.lessons.races.kernels", "racing_counter", f"void({I1})"),
    CheckedKernel("06", "gpucourse.lessons.races.kernels", "mp_kernel", f"void({I1}, {I1}, {I1}, int64, int64)"),
    CheckedKernel("06", "gpucourse.lessons.races.kernels", "handoff_kernel",
                  f"void({I1}, {I1}, {I1}, int64, int64, int64)"),
    CheckedKernel("06", "gpucourse.lessons.races.kernels", "mp_harness",
                  f"void({I1}, {I1}, int64[::1], {I1}, int64, int64, int64, int64, int64)"),
    CheckedKernel("06", "gpucourse.lessons.races.kernels", "_reset_litmus", f"void({I1}, {I1})"),
    CheckedKernel("06", "gpucourse.lessons.races.kernels", "reduce_last_block",
                  "void(float64[::1], float64[::1], uint32[::1], float64[::1], int64)"),
    CheckedKernel("06", "gpucourse.lessons.races.kernels", "gradient_kernel", f"void({F2}, {F1}, {F1}, {F1}, int64)"),
    CheckedKernel("07", "gpucourse.lessons.precision.kernels", "sum_fp16_kernel",
                  "void(float16[:, ::1], int64[::1], float32[:, ::1])"),
    CheckedKernel("07", "gpucourse.lessons.precision.kernels", "sum_fp32_kernel",
                  "void(float16[:, ::1], int64[::1], float32[:, ::1])"),
    CheckedKernel("07", "gpucourse.lessons.precision.kernels", "sum_kahan_fp16_kernel",
                  "void(float16[:, ::1], int64[::1], float32[:, ::1])"),
    CheckedKernel("07", "gpucourse.lessons.precision.kernels", "sum_kahan_fp32_kernel",
                  "void(float16[:, ::1], int64[::1], float32[:, ::1])"),
    CheckedKernel("08", "gpucourse.lessons.feeding.kernels", "scale", f"void({F1}, {F1}, float32)"),
    CheckedKernel("08", "gpucourse.lessons.feeding.kernels", "add", f"void({F1}, {F1}, {F1})"),
    CheckedKernel("08", "gpucourse.lessons.feeding.kernels", "relu", f"void({F1}, {F1})"),
    CheckedKernel("08", "gpucourse.lessons.feeding.kernels", "square", f"void({F1}, {F1})"),
    CheckedKernel("08", "gpucourse.lessons.feeding.kernels", "add_scalar", f"void({F1}, {F1}, float32)"),
    CheckedKernel("08", "gpucourse.lessons.feeding.kernels", "fused_chain", f"void({F1}, {F1}, {F1})"),
    CheckedKernel("08", "gpucourse.lessons.feeding.kernels", "add_one", f"void({F1})"),
    CheckedKernel("08", "gpucourse.lessons.feeding.kernels", "sweep_copy", f"void({F1}, {F1}, int64)"),
)


# Lab 11's mystery code and its solution import torch (two of its mysteries are training steps): where torch is
# missing (test-platforms' CUDA 12 stack) their kernels cannot be imported, so they are checked where it is.
ROOT_CAUSE_KERNELS = (
    CheckedKernel("lab11", "gpucourse.lessons.rootcauses.kernels", "brighten", f"void({F1}, {F1}, int64, int64)"),
    CheckedKernel("lab11", "gpucourse.lessons.rootcauses.kernels", "tally", f"void({I1}, {I1}, int64)"),
    CheckedKernel("lab11", "gpucourse.lessons.rootcauses.kernels", "price_orders", f"void({F1}, {F1}, {F1}, {I1})"),
    CheckedKernel("lab11", "gpucourse.lessons.rootcauses.kernels", "flip_blocks", f"void({F1}, {F1})"),
) if util.find_spec("torch") is not None else ()

# The lab solutions' kernels, with the argument types their labs launch them with (paths from the repository root).
def _lab(number: str, stem: str, name: str, signature: str) -> CheckedKernel:
    return CheckedKernel(f"lab{number}", f"solutions/{stem}/{stem}.py", name, signature)


F2C = "float16[:, ::1]"
LAB_KERNELS = (
    *(_lab("00a", "lab00a_first_kernels", name, f"void({F1}, {F1})")
      for name in ("map_add_ten", "guarded_add_ten", "blocks_add_ten", "window_sum")),
    _lab("00a", "lab00a_first_kernels", "zip_add", f"void({F1}, {F1}, {F1})"),
    _lab("00a", "lab00a_first_kernels", "dot", f"void({F1}, {F1}, {F1})"),
    _lab("00a", "lab00a_first_kernels", "broadcast_add", f"void({F2}, {F2}, {F2})"),
    _lab("00a", "lab00a_first_kernels", "map_2d_add_ten", f"void({F2}, {F2})"),
    _lab("01", "lab01_warps", "add_2d", f"void({F2}, {F2}, {F2})"),
    _lab("02", "lab02_divergence", "parity_divergent", f"void({F1}, {F1})"),
    _lab("02", "lab02_divergence", "parity_agree", f"void({F1}, {F1})"),
    _lab("02", "lab02_divergence", "by_kind", f"void(uint8[::1], {F1}, {F1})"),
    _lab("02", "lab02_divergence", "by_kind_sorted", f"void(int64[::1], uint8[::1], {F1}, {F1})"),
    _lab("03", "lab03_coalescing", "drift_soa", f"void({F2}, float64)"),  # the lab passes dt as a Python float
    _lab("03", "lab03_coalescing", "scale_rows", f"void({F2}, {F1}, {F2})"),
    _lab("04", "lab04_shared_memory", "tiled_matmul_bt", f"void({F2}, {F2}, {F2})"),
    _lab("04", "lab04_shared_memory", "transpose_naive", f"void({F2}, {F2})"),
    _lab("04", "lab04_shared_memory", "transpose_tiled", f"void({F2}, {F2})"),
    *(_lab("04a", "lab04a_reductions", name, f"void({F1}, {F1})")
      for name in ("warp_sum_shared", "warp_share", "block_scan")),
    _lab("06", "lab06_races", "histogram_atomic", f"void({F1}, {I1})"),
    _lab("06", "lab06_races", "histogram_weighted", f"void({F1}, {I1}, {I1})"),
    _lab("06", "lab06_races", "handoff", f"void({I1}, {I1}, {I1}, int64, int64)"),
    _lab("07", "lab07_precision", "dot_fp32_kernel", f"void({F2C}, {F2C}, {F1})"),
    _lab("07", "lab07_precision", "dot_kahan_kernel", f"void({F2C}, {F2C}, {F1})"),
)
LAB11_KERNELS = (
    _lab("11", "lab11_root_causes", "brighten_fixed", f"void({F1}, {F1}, int64, int64)"),
    _lab("11", "lab11_root_causes", "tally_fixed", f"void({I1}, {I1}, int64)"),
    _lab("11", "lab11_root_causes", "price_orders_fixed", f"void({F1}, {F1}, {F1}, {I1})"),
    _lab("11", "lab11_root_causes", "flip_blocks_fixed", f"void({F1}, {F1})"),
) if ROOT_CAUSE_KERNELS else ()
KERNELS, LAB_KERNELS = KERNELS + ROOT_CAUSE_KERNELS, LAB_KERNELS + LAB11_KERNELS
# The Triton kernels (tensor cores, attention): compiled by Triton, not numba; only where Triton is installed.
TRITON_KERNELS = tritoncheck.KERNELS if triton_available() else ()
ALL_KERNELS = KERNELS + LAB_KERNELS + TRITON_KERNELS


def parse_archs(text: str) -> tuple[int, ...]:
    """'75,80,sm_90' → (75, 80, 90)."""
    archs = []
    for part in str(text).split(","):
        part = part.strip().lower().removeprefix("sm_")
        if not part.isdigit() or len(part) < 2:
            raise InvalidConfig(f"--arch takes architectures such as 75,80,90 or sm_120; got {text!r}")
        archs.append(int(part))
    return tuple(archs)


def family(arch: int) -> tuple[int, int]:
    """The compute capability the PTX is written for: one per major family from cc 8.0 on (sm_86 and
    sm_89 assemble sm_80's PTX, sm_103 sm_100's); PTX for an older target assembles for newer ones."""
    major, minor = divmod(arch, 10)
    return (major, 0) if major >= 8 else (major, minor)


# The child: numba's real CUDA target (never the simulator), then the lesson modules. gpucourse is told
# it is in simulator mode (it needs no GPU) only after numba.cuda is loaded for real (as in ptxinfo).
# A kernel whose PTX calls code numba-cuda links in (the fp16 operators, compiled from CUDA C++) cannot
# go through ptxas alone: it is compiled to LTO-IR with that code and linked by nvJitLink, whose log
# carries the same ptxas report. Neither step needs a GPU or a driver.
_CHILD = r"""
import ast, importlib, json, os, sys
request = json.loads(sys.stdin.read())
os.environ.pop("NUMBA_ENABLE_CUDASIM", None)
from numba import cuda
from numba.cuda.compiler import compile_all
os.environ["GPUCOURSE_MODE"] = "sim"
os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
import gpucourse
os.environ.pop("NUMBA_ENABLE_CUDASIM", None)

def first_line(exc):
    return (type(exc).__name__ + ": " + str(exc)).splitlines()[0][:300]

def nvjitlink_report(fn, signature, cc, archs):
    from cuda.bindings import nvjitlink
    codes, _ = compile_all(fn, signature, device=False, abi="numba", cc=cc, output="ltoir")
    out = {}
    for arch in archs:
        handle = nvjitlink.create(3, ["-arch=sm_%d" % arch, "-lto", "-verbose"])
        try:
            for i, code in enumerate(codes):
                data = code if isinstance(code, bytes) else bytes(code.code)
                nvjitlink.add_data(handle, nvjitlink.InputType.LTOIR, data, len(data), "part%d" % i)
            nvjitlink.complete(handle)
            log = bytearray(nvjitlink.get_info_log_size(handle))
            nvjitlink.get_info_log(handle, log)
            out[str(arch)] = {"log": log.decode(errors="replace"), "tool": "nvJitLink -lto -arch=sm_%d" % arch}
        except Exception as exc:
            out[str(arch)] = {"error": "nvJitLink: " + first_line(exc)}
        finally:
            nvjitlink.destroy(handle)
    return out

try:  # numba-cuda's own first step of compile_ptx: type and lower, then NVVM per architecture
    from numba.cuda.compiler import _compile_pyfunc_with_fixup
except ImportError:
    _compile_pyfunc_with_fixup = None

def ptx_per_family(fn, signature, ccs):
    # {cc: PTX}, as cuda.compile_ptx(fn, signature, cc=cc) writes it. Typing and lowering, 90 % of the
    # time, read the architecture only to ask "cc >= 6.0?" and "cc >= 7.5?" (atomics, fast tanh),
    # which every family here answers alike: they run once, at the oldest, and NVVM writes each
    # family's PTX from the same code (tests/test_compile_check.py checks it against compile_ptx).
    if not request["lower_once"] or _compile_pyfunc_with_fixup is None or min(ccs) < (7, 5):
        return {cc: cuda.compile_ptx(fn, signature, cc=cc)[0] for cc in ccs}
    library, _ = _compile_pyfunc_with_fixup(fn, signature, device=False, cc=min(ccs), abi="numba")
    out = {}
    for cc in ccs:
        codes = library.get_asm_strs(cc=cc)
        if len(codes) != 1:
            raise RuntimeError("compiling this kernel writes %d PTX files, not one" % len(codes))
        out[cc] = codes[0]
    return out

SAFE_CALLS = {"np", "numpy", "int", "float", "float32", "float64", "range", "tuple", "len"}

def harmless(node):
    # An assignment whose calls are all NumPy's or builtins' (constants, demo arrays): never a launch.
    for call in ast.walk(node):
        if isinstance(call, ast.Call):
            root = call.func
            while isinstance(root, ast.Attribute):
                root = root.value
            if not (isinstance(root, ast.Name) and root.id in SAFE_CALLS):
                return False
    return True

LABS = {}

def lab_namespace(path):
    # The lab's code cells (jupytext percent format): imports, definitions and constant assignments
    # only, run in a scratch namespace; graded (test) cells and every other statement are skipped.
    if path in LABS:
        return LABS[path]
    namespace = {"__name__": "lab_solution"}
    cells, header, lines = [], "", []
    for line in open(os.path.join(request["root"], path), encoding="utf-8").read().splitlines():
        if line.startswith("# %%"):
            cells.append((header, lines))
            header, lines = line, []
        else:
            lines.append(line)
    cells.append((header, lines))
    for header, lines in cells:
        if "[markdown]" in header or '"grade": true' in header:
            continue
        for node in ast.parse("\n".join(lines)).body:
            keep = isinstance(node, (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.ClassDef)) or (
                isinstance(node, (ast.Assign, ast.AnnAssign)) and harmless(node))
            if not keep:
                continue
            try:
                exec(compile(ast.Module([node], []), path, "exec"), namespace)
            except NameError:  # a demo value built from one the scratch namespace skipped: not needed
                if not isinstance(node, (ast.Assign, ast.AnnAssign)):
                    raise
    LABS[path] = namespace
    return namespace

results = []
for job in request["jobs"]:
    row = {}
    try:
        if job["module"].endswith(".py"):
            kernel = lab_namespace(job["module"])[job["getter"]]
        else:
            module = importlib.import_module(job["module"])
            kernel = eval(job["getter"], vars(module))
        fn = getattr(kernel, "py_func", kernel)
    except Exception as exc:
        results.append({"error": first_line(exc)})
        continue
    try:
        ptxes = ptx_per_family(fn, job["signature"], [tuple(f["cc"]) for f in request["families"]])
    except Exception as exc:
        ptxes = exc
    for family in request["families"]:
        cc, archs = tuple(family["cc"]), family["archs"]
        try:
            if isinstance(ptxes, Exception):
                raise ptxes
            ptx = ptxes[cc]
            if ".extern .func" in ptx:  # calls into code that numba-cuda links in
                row.update(nvjitlink_report(fn, job["signature"], cc, archs))
            else:
                row.update({str(arch): {"ptx": ptx} for arch in archs})
        except Exception as exc:
            row.update({str(arch): {"error": "PTX: " + first_line(exc)} for arch in archs})
    results.append(row)
print("@@RESULT@@" + json.dumps(results))
"""
_CHILD = CHILD_PRELUDE + _CHILD  # numba-cuda 0.30 on NumPy 2.5 (measure/compat.py)


def _compile(kernels, archs, lower_once: bool = True) -> list[dict]:
    """Per kernel: {arch: {"ptx": text} | {"log": nvJitLink's ptxas report, "tool": ...} | {"error": why}}.

    ``lower_once=False``: compile_ptx from the start for every family (what the shortcut must match)."""
    env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_ENABLE_CUDASIM", "GPUCOURSE_MODE")}
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    families: dict[tuple[int, int], list[int]] = {}
    for arch in archs:
        families.setdefault(family(arch), []).append(arch)
    request = {"root": root, "lower_once": lower_once,
               "jobs": [{"module": k.module, "getter": k.getter, "signature": k.signature} for k in kernels],
               "families": [{"cc": list(cc), "archs": a} for cc, a in sorted(families.items())]}
    done = subprocess.run([sys.executable, "-c", _CHILD], input=json.dumps(request), capture_output=True,
                          text=True, env=env, timeout=1800)
    line = next((x for x in done.stdout.splitlines() if x.startswith("@@RESULT@@")), None)
    if line is None:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1][:300]
        raise RuntimeError(f"the PTX compiler process failed: {tail}")
    return json.loads(line.removeprefix("@@RESULT@@"))


@dataclass(frozen=True)
class Result:
    kernel: str
    arch: int
    registers: int | None = None
    shared_bytes: int | None = None
    spill_store_bytes: int | None = None
    spill_load_bytes: int | None = None
    tool: str = ""
    error: str = ""
    stack_bytes: int | None = None  # Triton kernels: local memory per thread (cuobjdump), spills among it
    tensor_cores: str = ""  # Triton kernels: the tensor-core PTX/SASS tl.dot became, e.g. "wgmma.mma_async/HGMMA"

    @property
    def ok(self) -> bool:
        return not self.error


def _compile_triton(kernels, archs) -> list[dict]:
    """Per Triton kernel: {arch: tritoncheck's facts or {"error": why}}, from a child process."""
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "GPUCOURSE_MODE")}
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    request = {"labels": [k.label for k in kernels], "archs": list(archs)}
    done = subprocess.run([sys.executable, "-m", "gpucourse.tooling.tritoncheck"], input=json.dumps(request),
                          capture_output=True, text=True, env=env, timeout=1800)
    line = next((x for x in done.stdout.splitlines() if x.startswith("@@RESULT@@")), None)
    if line is None:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1][:300]
        raise RuntimeError(f"the Triton compiler process failed: {tail}")
    return json.loads(line.removeprefix("@@RESULT@@"))


def check(archs=CUDA13_ARCHS, kernels=ALL_KERNELS) -> list[Result]:
    """Compile every kernel for every architecture; one Result per (kernel, arch)."""
    triton_kernels = [k for k in kernels if isinstance(k, tritoncheck.TritonKernel)]
    numba_kernels = [k for k in kernels if not isinstance(k, tritoncheck.TritonKernel)]
    if numba_kernels and ptxinfo.find_ptxas() is None:
        raise InvalidConfig("ptxas was not found: install the CUDA toolkit wheel (cuda-toolkit[nvcc]) "
                            "or set GPUCOURSE_PTXAS")
    rows = dict(zip(map(id, numba_kernels), _compile(numba_kernels, archs) if numba_kernels else (), strict=True))
    rows.update(zip(map(id, triton_kernels), _compile_triton(triton_kernels, archs) if triton_kernels else (),
                    strict=True))
    results = []
    for kernel in kernels:
        row = rows[id(kernel)]
        for arch in archs:
            cell = row.get(str(arch), {"error": row.get("error", "?")})
            if isinstance(kernel, tritoncheck.TritonKernel):
                results.append(_triton_result(kernel.label, arch, cell))
            else:
                results.append(_assemble(kernel.label, arch, cell))
    return results


def _triton_result(label: str, arch: int, cell: dict) -> Result:
    if not cell.get("registers") and not cell.get("error"):
        cell = dict(cell, error="cuobjdump reported no registers")
    return Result(label, arch, cell.get("registers"), cell.get("shared_bytes"), tool=cell.get("tool", ""),
                  error=cell.get("error", ""), stack_bytes=cell.get("stack_bytes"),
                  tensor_cores=cell.get("tensor_cores", ""))


def _assemble(label: str, arch: int, compiled: dict) -> Result:
    """ptxas on the PTX (or the report nvJitLink already wrote): registers, shared memory, spills."""
    if "error" in compiled:
        return Result(label, arch, error=compiled["error"])
    try:
        if "log" in compiled:
            report = dict(ptxinfo.parse_ptxas(compiled["log"]), tool=compiled["tool"])
        else:
            report = ptxinfo.ptxas(compiled["ptx"], divmod(arch, 10))
    except (OSError, RuntimeError, ValueError, subprocess.SubprocessError) as exc:
        return Result(label, arch, error=f"ptxas: {exc}")
    return Result(label, arch, report["registers"], report["shared_bytes"], report["spill_store_bytes"],
                  report["spill_load_bytes"], tool=report.get("tool", ""))


def table_text(results: list[Result], archs) -> str:
    """Registers per kernel per architecture (spills marked '+s', failures 'FAIL')."""
    width = max(len(r.kernel) for r in results)
    lines = [f"{'kernel':<{width}}  " + "".join(f"{'sm_' + str(a):<8}" for a in archs)]
    by_kernel: dict[str, dict[int, Result]] = {}
    for r in results:
        by_kernel.setdefault(r.kernel, {})[r.arch] = r
    for name, row in by_kernel.items():
        cells = []
        for a in archs:
            r = row[a]
            spill = "+s" if (r.spill_store_bytes or r.spill_load_bytes) else "+l" if r.stack_bytes else ""
            cells.append(f"{'FAIL' if not r.ok else str(r.registers) + spill:<8}")
        lines.append(f"{name:<{width}}  " + "".join(cells))
    return "\n".join(lines)


def tensor_core_text(results: list[Result], archs) -> str:
    """Per Triton kernel and architecture, the tensor-core instructions ``tl.dot`` became ('' without any)."""
    triton_rows = [r for r in results if r.kernel.startswith("triton:")]
    if not triton_rows:
        return ""
    lines = [f"tensor-core instructions Triton emitted for tl.dot (PTX/SASS; compiled by {triton_rows[0].tool}):"]
    by_kernel: dict[str, list[str]] = {}
    for r in triton_rows:
        by_kernel.setdefault(r.kernel, []).append(f"sm_{r.arch} {r.tensor_cores or 'FAIL'}")
    lines += [f"  {name}: {'; '.join(cells)}" for name, cells in by_kernel.items()]
    return "\n".join(lines)


def select(only: str | None = None) -> tuple[CheckedKernel, ...]:
    """The kernels whose label contains ``only`` (all when None)."""
    chosen = tuple(k for k in ALL_KERNELS if not only or only in k.label)
    if not chosen and not TRITON_KERNELS and any(only in k.label for k in tritoncheck.KERNELS):
        raise InvalidConfig(f"{only!r} selects Triton kernels: {TRITON_MISSING}")
    if not chosen:
        raise InvalidConfig(f"no kernel matches {only!r}; labels look like 'tiling.naive_matmul_kernel()' "
                            "or 'lab04_shared_memory.transpose_tiled' or 'triton:attention.flash_forward_kernel'")
    return chosen


def main(arch_text: str | None = None, only: str | None = None, out=print) -> int:
    archs = parse_archs(arch_text) if arch_text else CUDA13_ARCHS
    kernels = select(only)
    started = time.perf_counter()
    results = check(archs, kernels)
    numba_ptxas = any(not isinstance(k, tritoncheck.TritonKernel) for k in kernels)
    out(f"registers per thread ('+s': spills), ptxas {ptxinfo.ptxas_version() if numba_ptxas else '(Triton’s own)'}, "
        f"{len(kernels)} kernels × {len(archs)} architectures")
    out(table_text(results, archs))
    if any(isinstance(k, tritoncheck.TritonKernel) for k in kernels):
        out("'+l': local memory (spills or a stack) in a Triton kernel, from cuobjdump")
        out(tensor_core_text(results, archs))
    elif not TRITON_KERNELS and not only:
        out("Triton kernels: not checked, Triton is not installed here (it ships Linux wheels only)")
    failures = [r for r in results if not r.ok]
    for r in failures:
        out(f"FAIL {r.kernel} sm_{r.arch}: {r.error}")
    linked = sorted({r.kernel for r in results if r.tool.startswith("nvJitLink")})
    if linked:
        out(f"linked with numba-cuda's CUDA C++ helpers by nvJitLink (LTO): {', '.join(linked)}")
    spills = sorted({f"{r.kernel} (sm_{r.arch}: {r.spill_store_bytes} B stored)" for r in results
                     if r.ok and (r.spill_store_bytes or r.spill_load_bytes)})
    out(f"spills: {', '.join(spills) if spills else 'none'}")
    out(f"{len(results) - len(failures)} of {len(results)} compiled in {time.perf_counter() - started:.0f} s")
    return 1 if failures else 0
