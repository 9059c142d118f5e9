"""Launch a fixed catalogue of course kernels once each, in a fixed order (for ncu). Prints a JSON list
of {launch, label, grid, block, args} to stdout; with --check runs without ncu to check it works."""
import json, sys
import numpy as np
import gpucourse  # noqa: F401  (mode)
from numba import cuda
from gpucourse.lessons.coalescing import kernels as co
from gpucourse.lessons.tiling import kernels as ti
from gpucourse.lessons.reductions import kernels as re_
from gpucourse.lessons.divergence import kernels as dv

log = []
def launch(label, kernel, grid, block, *args, note=""):
    try:
        kernel[grid, block](*args)
        cuda.synchronize()
    except Exception as exc:  # noqa: BLE001  (the simulator lacks warp intrinsics)
        print(f"skip {label}: {type(exc).__name__}", file=sys.stderr)
        return
    log.append({"launch": len(log), "label": label, "grid": grid, "block": block, "note": note})

import os
SMALL = bool(os.environ.get("CATALOGUE_SMALL"))
n = 1 << (10 if SMALL else 20)
f32 = np.float32
for stride, offset in ((1, 0), (2, 0), (4, 0), (8, 0), (32, 0), (1, 1)):
    src = cuda.to_device(np.arange(n * stride + offset, dtype=f32))
    dst = cuda.device_array(n * stride + offset, dtype=f32)
    launch(f"strided_copy stride={stride} offset={offset}", co.strided_copy, n // 256, 256, src, dst, n, stride, offset,
           note=f"n={n}")
m = 1 << (9 if SMALL else 16)
p = cuda.to_device(np.ones((m, 8), dtype=f32))
launch("drift_aos", co.drift_aos, m // 256, 256, p, 0.01, note=f"particles={m}")
soa = [cuda.to_device(np.ones(m, dtype=f32)) for _ in range(6)]
launch("drift_soa", co.drift_soa, m // 256, 256, *soa, 0.01, note=f"particles={m}")
N = 64 if SMALL else 1024
a = cuda.to_device(np.arange(N * N, dtype=f32).reshape(N, N)); out = cuda.device_array((N, N), dtype=f32)
launch("copy_rows", co.copy_rows, (N // 32, N // 8), (32, 8), a, out, note="1024x1024")
launch("copy_columns", co.copy_columns, (N // 32, N // 8), (32, 8), a, out, note="1024x1024")
launch("tile_copy", ti.copy_kernel(), (N // 32, N // 32), (32, 8), a, out, note="1024x1024 tile 32 rows 8")
launch("naive_transpose", ti.naive_transpose_kernel(), (N // 32, N // 32), (32, 8), a, out, note="1024x1024")
launch("shared_transpose pad=0", ti.shared_transpose_kernel(pad=0), (N // 32, N // 32), (32, 8), a, out, note="1024x1024")
launch("shared_transpose pad=1", ti.shared_transpose_kernel(pad=1), (N // 32, N // 32), (32, 8), a, out, note="1024x1024")
M = 32 if SMALL else 256
A = cuda.to_device(np.ones((M, M), dtype=f32)); B = cuda.to_device(np.ones((M, M), dtype=f32)); C = cuda.device_array((M, M), dtype=f32)
launch("naive_matmul", ti.naive_matmul_kernel(), (M // 16, M // 16), (16, 16), A, B, C, note="256^3")
launch("tiled_matmul tile=16", ti.tiled_matmul_kernel(16), (M // 16, M // 16), (16, 16), A, B, C, note="256^3")
k = 1 << (10 if SMALL else 16)
x = cuda.to_device(np.ones(k, dtype=f32)); xo = cuda.device_array(k // 256, dtype=f32)
for name, fac in (("interleaved", re_.interleaved_kernel), ("strided_index", re_.strided_index_kernel),
                  ("sequential", re_.sequential_kernel)):
    launch(f"reduce_{name} B=256", fac(256), k // 256, 256, x, xo, note=f"n={k}")
launch("reduce_warp_shuffle B=256", re_.warp_shuffle_kernel(256), k // 512, 256, x, xo, note=f"n={k}")
vals = cuda.to_device((np.arange(k) % 4).astype(f32)); cnt = cuda.to_device(np.zeros(1, dtype=np.int32))
launch("count_above_per_lane", re_.count_above_per_lane, k // 256, 256, vals, f32(1.5), cnt, note="half the lanes pass")
launch("count_above_ballot", re_.count_above_ballot, k // 256, 256, vals, f32(1.5), cnt, note="half the lanes pass")
xs = cuda.to_device(np.ones(k, dtype=f32)); outs = cuda.device_array(k, dtype=f32)
for label, flags in (("uniform (all A)", np.ones(k, np.uint8)), ("alternating lanes", (np.arange(k) % 2).astype(np.uint8)),
                     ("by warp", ((np.arange(k) // 32) % 2).astype(np.uint8))):
    launch(f"two_paths {label}", dv.two_paths, k // 256, 256, cuda.to_device(flags), xs, outs, 16, 16, note="body 16/16")
print(json.dumps(log))
