"""A 16-byte load and store from numba-cuda: what array indexing cannot express, an ``@intrinsic`` can.

Indexing a float32 array gives 4-byte loads (``LDG.E``), a float64 view 8-byte ones (``LDG.E.64``), and a
complex128 view two 8-byte loads per element: numba-cuda 0.30's indexing never emits CUDA C's ``float4`` load
(``LDG.E.128``). ``load4`` / ``store4`` below do, through ``numba.cuda.extending.intrinsic``: they load or store
``<4 x float>`` with 16-byte alignment in LLVM IR, and ptxas makes ``LDG.E.128`` / ``STG.E.128`` of them
(``compiled.loads_as_compiled`` shows it on this machine, no GPU needed).

Not a lesson kernel and never launched by the course: the caller must guarantee ``i % 4 == 0`` and a 16-byte
aligned array (a fresh CuPy or Numba allocation is; a view at an odd offset is not, and a misaligned 16-byte
access is a sticky "misaligned address" error), there is no bounds check, and it is LLVM IR in a Numba kernel.
For a copy it buys nothing the course needs: four 8-byte loads per thread (``best_copy``) already keep more
bytes in flight than the H200's ceiling needs.
"""

from __future__ import annotations

from llvmlite import ir
from numba import cuda, types
from numba.cuda.extending import intrinsic

_VEC4 = ir.VectorType(ir.FloatType(), 4)


@intrinsic
def load4(typingctx, arr, i):
    """``arr[i:i+4]`` (float32) as ONE 16-byte load; the caller guarantees i % 4 == 0 and an aligned base."""

    def codegen(context, builder, sig, args):
        base = context.make_array(sig.args[0])(context, builder, args[0]).data
        vec = builder.load(builder.bitcast(builder.gep(base, [args[1]]), _VEC4.as_pointer()), align=16)
        parts = [builder.extract_element(vec, ir.Constant(ir.IntType(32), k)) for k in range(4)]
        return context.make_tuple(builder, sig.return_type, parts)

    return types.UniTuple(types.float32, 4)(arr, i), codegen


@intrinsic
def store4(typingctx, arr, i, a, b, c, d):
    """``arr[i:i+4] = a, b, c, d`` (float32) as ONE 16-byte store; same guarantees as ``load4``."""

    def codegen(context, builder, sig, args):
        base = context.make_array(sig.args[0])(context, builder, args[0]).data
        vec = ir.Constant(_VEC4, ir.Undefined)
        for k in range(4):
            vec = builder.insert_element(vec, args[2 + k], ir.Constant(ir.IntType(32), k))
        builder.store(vec, builder.bitcast(builder.gep(base, [args[1]]), _VEC4.as_pointer()), align=16)
        return context.get_dummy_value()

    return types.void(arr, i, a, b, c, d), codegen


@cuda.jit
def copy4(src, dst):
    """One 16-byte load and one 16-byte store per thread (n a multiple of 4; fresh, aligned arrays)."""
    i = cuda.grid(1)
    if 4 * i + 3 < src.size:
        a, b, c, d = load4(src, 4 * i)
        store4(dst, 4 * i, a, b, c, d)
