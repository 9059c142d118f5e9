"""Compile-check's Triton half: the course's Triton kernels compiled for every architecture, without a GPU.

``triton.compile(ASTSource(...), target=GPUTarget("cuda", cc, 32))`` runs Triton's own LLVM and the ptxas in its
wheel (no driver); ``cuobjdump`` (``measure.ptxinfo.find_cuobjdump``) reads the cubin's registers and stack and its
SASS. For each architecture this says which tensor-core instruction Triton emitted for ``tl.dot`` and checks it
against what the lessons teach (``TENSOR_CORES``): sm_75 none (Triton emits no ``mma`` for Turing: its dots run
on FMA), sm_80/86/89/120 ``mma.sync``/``HMMA``, sm_90 ``wgmma``/``HGMMA``, sm_100 ``tcgen05.mma``/``UTCHMMA``
(consumer Blackwell, sm_120, has neither ``wgmma`` nor ``tcgen05``). A kernel that does not compile, or that
compiles to other tensor-core instructions than the lessons say, is a failure.

Run by compile-check in a child process (``python -m gpucourse.tooling.tritoncheck``, a JSON request on stdin):
there ``TRITON_INTERPRET`` is off whatever the parent's, so Triton's own ``@triton.jit`` helpers (``tl.zeros``,
``tl.max``) are compiled ones, and the parent never imports Triton (seconds).
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass

# Which tensor-core instruction Triton emits for tl.dot, per architecture: (PTX, SASS), or None for none.
MMA_SYNC, WGMMA, TCGEN05 = ("mma.sync", "HMMA"), ("wgmma.mma_async", "HGMMA"), ("tcgen05.mma", "UTCHMMA")
TENSOR_CORES = {75: None, 80: MMA_SYNC, 86: MMA_SYNC, 89: MMA_SYNC, 90: WGMMA, 100: TCGEN05, 120: MMA_SYNC}
FAMILIES = (MMA_SYNC, WGMMA, TCGEN05)


@dataclass(frozen=True)
class TritonKernel:
    """A Triton kernel of the course, with the argument types and constants compile-check compiles it with.

    ``signature``: Triton's types ("*fp16", "i32", "fp32"); ``unit``: stride arguments that are 1 (as Triton
    specializes a launch on contiguous tensors); ``constexprs``: the tile, as the lesson compiles it."""

    lesson: str
    module: str
    name: str
    signature: tuple[tuple[str, str], ...]
    constexprs: tuple[tuple[str, object], ...]
    unit: tuple[str, ...] = ()
    num_warps: int = 4
    num_stages: int = 3

    @property
    def label(self) -> str:
        module = self.module.removeprefix("gpucourse.").removeprefix("lessons.").removesuffix(".kernels")
        return f"triton:{module}.{self.name}"


_I32 = "i32"
KERNELS = (
    # "Tensor cores from Python": the fp16 matmul with the lesson's compiled tile (kernels.COMPILE_TILE)
    TritonKernel("tensorcores", "gpucourse.lessons.tensorcores.kernels", "matmul_kernel",
                 (("a_ptr", "*fp16"), ("b_ptr", "*fp16"), ("c_ptr", "*fp32"),
                  *((n, _I32) for n in ("M", "N", "K", "stride_am", "stride_ak", "stride_bk", "stride_bn",
                                        "stride_cm", "stride_cn"))),
                 (("BLOCK_M", 128), ("BLOCK_N", 128), ("BLOCK_K", 64)),
                 unit=("stride_ak", "stride_bn", "stride_cn")),
    # "Attention": the FlashAttention forward, fp16, head dimension 64, non-causal, FlashAttention-2's tiles
    TritonKernel("attention", "gpucourse.lessons.attention.kernels", "flash_forward_kernel",
                 (("q_ptr", "*fp16"), ("k_ptr", "*fp16"), ("v_ptr", "*fp16"), ("o_ptr", "*fp16"),
                  ("lse_ptr", "*fp32"), ("n_ctx", _I32), ("scale_log2e", "fp32"),
                  *((n, _I32) for n in ("stride_qh", "stride_qn", "stride_kh", "stride_kn", "stride_vh",
                                        "stride_vn", "stride_oh", "stride_on"))),
                 (("HEAD_DIM", 64), ("BLOCK_M", 128), ("BLOCK_N", 64), ("CAUSAL", False))),
)


def tensor_cores_used(ptx_counts: dict, sass_counts: dict) -> tuple[tuple[str, str], ...]:
    """The (PTX, SASS) families of ``FAMILIES`` found in a compiled kernel: both halves must be there."""
    return tuple(f for f in FAMILIES if ptx_counts.get(f[0]) and sass_counts.get(f[1]))


def describe(used) -> str:
    """'mma.sync/HMMA', 'none'…: what a row of the table says."""
    return ", ".join(f"{p}/{s}" for p, s in used) or "none"


def expected_error(arch: int, used) -> str:
    """'' when the compiled instructions are what ``TENSOR_CORES`` says for ``arch``, else why not."""
    expected = TENSOR_CORES.get(arch, "unknown")
    if expected == "unknown":
        return ""  # an architecture the lessons say nothing about: reported, not judged
    if tuple(used) != ((expected,) if expected else ()):
        return (f"tensor cores: the lessons say sm_{arch} uses {describe((expected,) if expected else ())}, "
                f"Triton compiled {describe(used)}")
    return ""


def _compile_one(kernel: TritonKernel, arch: int) -> dict:
    import importlib

    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from gpucourse.hardware import WARP_SIZE
    from gpucourse.lessons.tensorcores import compiled

    fn = getattr(importlib.import_module(kernel.module), kernel.name)
    jitted = triton.jit(fn)
    signature = dict(kernel.signature)
    constexprs = dict(kernel.constexprs)
    for name in kernel.unit:
        signature[name], constexprs[name] = "constexpr", 1
    for name in constexprs:
        signature[name] = "constexpr"
    # pointers 16-byte aligned, sizes and strides multiples of 16 (what Triton specializes a 4096-long launch on)
    attrs = {(jitted.arg_names.index(name),): [["tt.divisibility", 16]]
             for name, kind in signature.items() if kind != "constexpr" and not kind.startswith("fp")}
    source = ASTSource(fn=jitted, signature=signature, constexprs=constexprs, attrs=attrs)
    done = triton.compile(source, target=GPUTarget("cuda", arch, WARP_SIZE),
                          options={"num_warps": kernel.num_warps, "num_stages": kernel.num_stages})
    sass, usage = compiled._cuobjdump(done.asm["cubin"])
    resources = compiled._RESOURCES.search(usage)
    ptx = compiled.ptx_counts(done.asm["ptx"])
    sass_counts = compiled._classify(compiled.sass_opcodes(sass), ("HMMA", "HGMMA", "UTCHMMA"))
    used = tensor_cores_used(ptx, sass_counts)
    return {"registers": int(resources.group(1)) if resources else None,
            "stack_bytes": int(resources.group(2)) if resources else None,
            "shared_bytes": int(done.metadata.shared), "tensor_cores": describe(used),
            "tool": f"triton {triton.__version__}", "error": expected_error(arch, used)}


def compile_all(kernels, archs) -> list[dict]:
    """Per kernel: {arch: {"registers", "stack_bytes", "shared_bytes", "tensor_cores", "tool", "error"}}."""
    rows = []
    for kernel in kernels:
        row = {}
        for arch in archs:
            try:
                row[str(arch)] = _compile_one(kernel, arch)
            except Exception as exc:  # noqa: BLE001 — one line per failure, the next kernel still runs
                row[str(arch)] = {"error": (f"Triton: {type(exc).__name__}: {exc}").splitlines()[0][:300]}
        rows.append(row)
    return rows


def _child() -> None:
    import os

    os.environ.pop("TRITON_INTERPRET", None)  # compiled helpers, whatever the parent process was told
    request = json.loads(sys.stdin.read())
    by_label = {k.label: k for k in KERNELS}
    rows = compile_all([by_label[label] for label in request["labels"]], request["archs"])
    print("@@RESULT@@" + json.dumps(rows))


if __name__ == "__main__":
    _child()
