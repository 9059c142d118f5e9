"""The calculator against NVIDIA's own cuda_occupancy.h (from the CUDA toolkit wheel), compiled here.

Skipped where there is no C++ compiler or no header. 3,000 random configurations across every
modelled compute capability (7.0 to 12.0, Blackwell's 10.0, 10.3 and 12.0 included), every carve-out
preference: blocks per SM and the set of limiting factors must be identical.
"""

import random
import shutil
import subprocess
import sysconfig
from pathlib import Path

import pytest

from gpucourse.lessons.occupancy.calculator import SUPPORTED_CCS, occupancy

KB = 1024
HEADER_DIRS = [
    Path(sysconfig.get_paths()["purelib"]) / "nvidia" / cuda / "include" for cuda in ("cu13", "cu12")
]
HEADER = next((d for d in HEADER_DIRS if (d / "cuda_occupancy.h").exists()), None)
COMPILER = shutil.which("g++") or shutil.which("c++")

# Device properties as cudaGetDeviceProperties reports them for each compute capability.
HARNESS = r"""
#include <cstdio>
#include "cuda_occupancy.h"
int main() {
  int maj, min, threads, regs, carveout; long smem;
  while (scanf("%d %d %d %d %ld %d", &maj, &min, &threads, &regs, &smem, &carveout) == 6) {
    int k = maj * 10 + min;
    cudaOccDeviceProp p; memset(&p, 0, sizeof p);
    p.computeMajor = maj; p.computeMinor = min; p.maxThreadsPerBlock = 1024; p.warpSize = 32;
    p.regsPerBlock = 65536; p.regsPerMultiprocessor = 65536; p.numSms = 1; p.sharedMemPerBlock = 48 * 1024;
    int big = k == 80 || k == 87, hopper = k == 90 || k == 100 || k == 103;
    p.maxThreadsPerMultiprocessor = k == 75 ? 1024 : (k == 86 || k == 87 || k == 89 || k == 120) ? 1536 : 2048;
    p.sharedMemPerMultiprocessor = (k == 70 ? 96 : k == 75 ? 64 : big ? 164 : hopper ? 228 : 100) * 1024;
    p.sharedMemPerBlockOptin = (k == 70 ? 96 : k == 75 ? 64 : big ? 163 : hopper ? 227 : 99) * 1024;
    p.reservedSharedMemPerBlock = maj >= 8 ? 1024 : 0;
    cudaOccFuncAttributes a; memset(&a, 0, sizeof a);
    a.maxThreadsPerBlock = 1024; a.numRegs = regs; a.partitionedGCConfig = PARTITIONED_GC_OFF;
    a.numBlockBarriers = 1;
    if (smem > 48 * 1024) { a.shmemLimitConfig = FUNC_SHMEM_LIMIT_OPTIN; a.maxDynamicSharedSizeBytes = smem; }
    else { a.shmemLimitConfig = FUNC_SHMEM_LIMIT_DEFAULT; }
    cudaOccDeviceState s; s.cacheConfig = CACHE_PREFER_NONE; s.carveoutConfig = carveout;
    cudaOccResult r; memset(&r, 0, sizeof r);
    int e = cudaOccMaxActiveBlocksPerMultiprocessor(&r, &p, &a, &s, threads, smem);
    printf("%d %d %u\n", e, r.activeBlocksPerMultiprocessor, r.limitingFactors);
  }
}
"""
FLAGS = {1: "warps", 2: "registers", 4: "shared memory", 8: "blocks"}


@pytest.mark.skipif(
    HEADER is None or COMPILER is None, reason="needs g++ and cuda_occupancy.h (cuda-toolkit wheel)"
)
def test_calculator_equals_nvidia_header(tmp_path):
    source = tmp_path / "occ.cpp"
    source.write_text(HARNESS)
    binary = tmp_path / "occ"
    subprocess.run([COMPILER, "-O1", f"-I{HEADER}", str(source), "-o", str(binary)], check=True, timeout=120)
    rng = random.Random(5)
    configs = []
    for _ in range(3000):
        cc = rng.choice(SUPPORTED_CCS)
        threads = rng.choice([rng.randint(1, 1024), 32 * rng.randint(1, 32)])
        regs = rng.randint(0, 255)
        shared = rng.choice(
            [0, rng.randint(0, 240 * KB), 128 * rng.randint(0, 1900), KB * rng.randint(0, 240)]
        )
        carveout = rng.choice([-1, -1, 0, 25, 50, 100, rng.randint(0, 100)])
        configs.append((cc, threads, regs, shared, carveout))
    text = "\n".join(f"{c[0]} {c[1]} {t} {r} {s} {v}" for c, t, r, s, v in configs)
    lines = subprocess.run(
        [str(binary)], input=text, capture_output=True, text=True, check=True
    ).stdout.split("\n")
    mismatches = []
    for (cc, threads, regs, shared, carveout), line in zip(configs, lines, strict=False):
        error, blocks, factors = map(int, line.split())
        ours = occupancy(threads, regs, shared, cc, carveout_percent=None if carveout == -1 else carveout)
        theirs = {name for bit, name in FLAGS.items() if factors & bit}
        if error or ours.active_blocks != blocks or set(ours.limiters) != theirs:
            mismatches.append(((cc, threads, regs, shared, carveout), blocks, theirs, ours.active_blocks))
    assert not mismatches, mismatches[:10]
    assert {(8, 7), (10, 0), (10, 3), (12, 0)} <= {config[0] for config in configs}
    # The sample exercises every outcome: each limiter alone, ties and configurations that cannot launch.
    outcomes = {
        occupancy(t, r, s, c, carveout_percent=None if v == -1 else v).limiter for c, t, r, s, v in configs
    }
    assert {"registers", "shared memory", "warps", "blocks"} <= outcomes
    assert any(" + " in o for o in outcomes)
