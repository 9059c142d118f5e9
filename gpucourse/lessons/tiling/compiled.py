"""Lesson 04 "Shared memory: tiling and bank conflicts": what the compiler makes of each matmul rung.

No GPU needed: numba-cuda writes each Numba rung's PTX (in a child process with the real CUDA target),
NVRTC compiles the CUDA C++ rung, the CUDA wheel's ``ptxas`` assembles them for one architecture (with
``-v``: registers, spills) and ``cuobjdump`` (the toolkit's, or the one in Triton's wheel) prints the
SASS. ``sass_table`` counts, per rung, the instructions of its innermost loop: FFMAs, shared loads
(LDS: 4 bytes; LDS.128: 16 bytes), all instructions, and local-memory traffic (LDL/STL: spills).

It is evidence about instructions, not a timing: the share of issue slots that are FFMAs bounds
what a rung can reach (an SM issues one instruction per scheduler and clock).
"""

from __future__ import annotations

import functools
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd

from gpucourse.errors import InvalidConfig
from gpucourse.lessons.tiling.kernels import SGEMM_CUDA_SOURCE
from gpucourse.lessons.tiling.model import Rung, numba_rungs, rung
from gpucourse.measure import ptxinfo
from gpucourse.measure.compat import CHILD_PRELUDE
from gpucourse.measure.ptxinfo import find_cuobjdump

SIGNATURE = "void(float32[:, ::1], float32[:, ::1], float32[:, ::1])"  # C-contiguous, as CuPy allocates
TIMEOUT_S = 300

_CHILD = CHILD_PRELUDE + r"""
import json, os, sys
os.environ.pop("NUMBA_ENABLE_CUDASIM", None)
from numba import cuda  # the real CUDA target: it compiles to PTX without a GPU
os.environ["GPUCOURSE_MODE"] = "sim"
os.environ["NUMBA_ENABLE_CUDASIM"] = "1"  # numba.cuda is already the real one
from gpucourse.lessons.tiling import model
request = json.loads(sys.stdin.read())
out = {}
for label, (kind, tile, k_tile, thread_tile) in request["rungs"].items():
    kernel = model.Rung(kind, tile, k_tile, thread_tile).kernel()
    ptx, _ = cuda.compile_ptx(kernel.py_func, request["signature"], cc=tuple(request["cc"]))
    out[label] = ptx
print("@@PTX@@" + json.dumps(out))
"""




def tools_missing() -> str | None:
    """Why SASS cannot be shown here (None when ptxas and cuobjdump are both found)."""
    if ptxinfo.find_ptxas() is None:
        return "ptxas was not found (it comes with the cuda-toolkit[nvcc] wheel)"
    if find_cuobjdump() is None:
        return "cuobjdump was not found (the CUDA toolkit's, or the one in Triton's wheel)"
    return None


def _numba_ptx(rungs: list[Rung], cc: tuple[int, int]) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("NUMBA_ENABLE_CUDASIM", None)
    root = str(Path(__file__).resolve().parents[3])
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    request = {"signature": SIGNATURE, "cc": list(cc),
               "rungs": {r.label: [r.kind, r.tile, r.k_tile, r.thread_tile] for r in rungs}}
    done = subprocess.run([sys.executable, "-c", _CHILD], input=json.dumps(request), capture_output=True,
                          text=True, timeout=TIMEOUT_S, env=env)
    line = next((x for x in done.stdout.splitlines() if x.startswith("@@PTX@@")), None)
    if line is None:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1][:300]
        raise InvalidConfig(f"numba-cuda could not compile the rungs to PTX here ({tail})")
    return json.loads(line.removeprefix("@@PTX@@"))


def cuda_cpp_ptx(cc=(9, 0)) -> str:
    """The CUDA C++ rung's PTX from NVRTC (the compiler CuPy's RawKernel uses)."""
    from gpucourse.lessons.first_kernels.experiments import nvrtc_ptx

    return nvrtc_ptx(SGEMM_CUDA_SOURCE, cc)


def assemble(ptx: str, cc=(9, 0)) -> tuple[dict, str]:
    """(ptxas -v report, SASS text) of one PTX module."""
    ptxas, cuobjdump = ptxinfo.find_ptxas(), find_cuobjdump()
    if ptxas is None or cuobjdump is None:
        raise InvalidConfig(tools_missing())
    with tempfile.TemporaryDirectory(prefix="gpucourse-sass-") as tmp:
        source, cubin = Path(tmp) / "kernel.ptx", Path(tmp) / "kernel.cubin"
        source.write_text(ptx)
        done = subprocess.run([str(ptxas), f"-arch=sm_{cc[0]}{cc[1]}", "-v", str(source), "-o", str(cubin)],
                              capture_output=True, text=True, timeout=TIMEOUT_S)
        if done.returncode:
            raise InvalidConfig(f"ptxas failed: {(done.stderr.strip().splitlines() or ['?'])[-1][:300]}")
        sass = subprocess.run([cuobjdump, "-sass", str(cubin)], capture_output=True, text=True, check=True,
                              timeout=TIMEOUT_S).stdout
    return ptxinfo.parse_ptxas(done.stdout + done.stderr), sass


_INSTRUCTION = re.compile(r"/\*([0-9a-f]{4,})\*/\s+([^;]*);")


def instructions(sass: str) -> list[tuple[int, str]]:
    """(address, text) of every SASS instruction."""
    return [(int(address, 16), text.strip()) for address, text in _INSTRUCTION.findall(sass)]


def _opcode_counts(texts: list[str]) -> dict[str, int]:
    def count(pattern: str) -> int:
        return sum(bool(re.search(pattern, t)) for t in texts)

    return {"instructions": len(texts), "FFMA": count(r"\bFFMA\b"), "LDS.128": count(r"\bLDS\.128\b"),
            "LDS (4 B)": count(r"\bLDS(\.U)?\s"), "LDG": count(r"\bLDG\b"), "LDG.128": count(r"\bLDG\.E\.128\b"),
            "BAR": count(r"\bBAR\.SYNC\b"), "LDL/STL": count(r"\b(LDL|STL)\b")}


def innermost_loop(sass: str) -> dict[str, int]:
    """Counts over the backward branch's body that holds the most FFMAs (the k-loop's body); the whole
    kernel when no loop holds an FFMA (a fully unrolled kernel has none)."""
    code = instructions(sass)
    addresses = [a for a, _ in code]
    best: list[str] | None = None
    for i, (address, text) in enumerate(code):
        target = re.search(r"BRA\s+(0x[0-9a-f]+)", text)
        if target and int(target.group(1), 16) < address and int(target.group(1), 16) in addresses:
            body = [t for _, t in code[addresses.index(int(target.group(1), 16)):i + 1]]
            if best is None or sum("FFMA" in t for t in body) > sum("FFMA" in t for t in best):
                best = body
    return _opcode_counts(best if best and any("FFMA" in t for t in best) else [t for _, t in code])


def sass_row(label: str, report: dict, sass: str) -> dict:
    loop = innermost_loop(sass)
    total = _opcode_counts([t for _, t in instructions(sass)])
    shared_loads = loop["LDS.128"] + loop["LDS (4 B)"]
    return {"rung": label, "registers": report.get("registers"), "spill bytes":
            (report.get("spill_store_bytes") or 0) + (report.get("spill_load_bytes") or 0),
            "stack frame bytes": report.get("stack_frame_bytes"), "LDL/STL (kernel)": total["LDL/STL"],
            "loop: FFMA": loop["FFMA"], "loop: LDS.128": loop["LDS.128"], "loop: LDS (4 B)": loop["LDS (4 B)"],
            "loop: instructions": loop["instructions"],
            "FFMA per shared load": loop["FFMA"] / shared_loads if shared_loads else float("nan"),
            "FFMA share of the loop": loop["FFMA"] / loop["instructions"] if loop["instructions"] else float("nan"),
            "LDG.128 (kernel)": total["LDG.128"], "barriers (kernel)": total["BAR"]}


def sass_table(cc=(9, 0), *, tile: int = 32, cuda_cpp: bool = True) -> pd.DataFrame:
    """Per rung (tiled, register-blocked, vectorised, CUDA C++): registers, spills and the innermost
    loop's instruction counts, compiled for ``cc`` without a GPU (a few seconds; a one-line error when
    the tools are missing)."""
    why = tools_missing()
    if why:
        raise InvalidConfig(f"SASS cannot be shown here: {why}")
    return _sass_table(tuple(cc), int(tile), bool(cuda_cpp)).copy()


@functools.lru_cache(maxsize=8)
def _sass_table(cc: tuple[int, int], tile: int, cuda_cpp: bool) -> pd.DataFrame:
    rungs = [rung("tiled", tile)] + numba_rungs()
    ptx = _numba_ptx(rungs, cc)
    rows = [sass_row(label, *assemble(text, cc)) for label, text in ptx.items()]
    if cuda_cpp:
        rows.append(sass_row(rung("CUDA C++").label, *assemble(cuda_cpp_ptx(cc), cc)))
    return pd.DataFrame(rows)


# --- the ladder as a worklog: what each step changed, its SASS, its measured (or predicted) speed -----------

STEPS = {
    "naive": "one thread per output; A and B read from global memory for every multiply-add",
    "tiled 32": "32×32 tiles of A and B staged in shared memory: each fetched float serves 32 FMAs",
    "register-blocked 64/4": "each thread computes a 4×4 patch from registers; its fragments are strided (16 "
                             "apart), so every float is its own 4-byte LDS",
    "vectorised 64/4": "fragments contiguous (A stored transposed): 4 floats per LDS.128; next k-tile "
                       "prefetched into registers, two shared buffers, one barrier per k-tile",
    "register-blocked 128/8": "8×8 patch per thread, still strided 4-byte LDS; 150 registers: 1 block per SM",
    "vectorised 128/8": "8×8 patch as 4×4 quadrants 64 apart: 4 LDS.128 per 64 FFMA; prefetch; 120 registers",
    "CUDA C++ 128/8 (float4)": "the same tiling in CUDA C++: float4 global loads and stores, int32 indices, "
                               "the k-tile fully unrolled (no loop counter between FMAs)",
    "cuBLAS": "the library (fp32, TF32 off): warp tiling, asynchronous copies, tuned per GPU",
}
PREDICTIONS = {  # the GPU tier's expectations (tests/gpu_expectations.py), at N = 4096, until a GPU measures them
    "vectorised 128/8": "≥ 40 % of cuBLAS (GPU-tier prediction, derived from this SASS)",
    "CUDA C++ 128/8 (float4)": "≥ 60 % of cuBLAS (GPU-tier prediction, derived from this SASS)",
}


def ladder_table(n: int = 4096, *, sass: bool = True) -> pd.DataFrame:
    """Each rung: what changed, what ptxas made of it (no GPU needed), and its speed — measured now on a
    GPU, else the course's recording (its size and contract in ``attrs["source"]``), else the GPU tier's
    prediction. Without ptxas the SASS columns say why they are empty."""
    from gpucourse.lessons.tiling.experiments import measure_matmul_ladder
    from gpucourse.measure import reference, runtime

    rows = {label: {"rung": label, "what changed": text} for label, text in STEPS.items()}
    if sass:
        why = tools_missing()
        try:
            records = [] if why else sass_table().to_dict("records")
        except (InvalidConfig, OSError, subprocess.SubprocessError) as error:  # a compiler that fails here
            why, records = str(error), []
        if not why:
            for record in records:
                rows[record["rung"]].update({
                    "FFMA per shared load": round(record["FFMA per shared load"], 2),
                    "FFMA share of the k-loop": round(record["FFMA share of the loop"], 2),
                    "registers": record["registers"], "spill bytes": record["spill bytes"]})
        else:
            rows["naive"]["FFMA per shared load"] = f"no SASS here: {why}"
    data, source = None, "no GPU here and no recording of the matmul ladder yet"
    if runtime.is_gpu():
        data, source = measure_matmul_ladder([n]), f"measured now on {runtime.device().name} at N = {n}"
    else:
        rec = reference.load("tiling.matmul")
        if rec is not None:
            largest = int(rec.data.n.max())
            data, source = rec.data[rec.data.n == largest], f"{rec.caption()}, N = {largest}"
    for label, row in rows.items():
        hit = None if data is None else data[data.rung == label]
        if hit is not None and len(hit):
            row["GFLOP/s"] = round(float(hit.gflops.iloc[0]))
            row["of cuBLAS"] = f"{float(hit.fraction_of_library.iloc[0]):.0%}"
        else:
            row["GFLOP/s"] = None
            row["of cuBLAS"] = PREDICTIONS.get(label, "not measured here")
    table = pd.DataFrame(list(rows.values()))
    table.attrs["source"] = source
    return table
