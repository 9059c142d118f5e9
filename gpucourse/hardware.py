"""The hardware facts the course uses, in one place.

Launch limits and per-SM resources come from the CUDA C++ Programming Guide ("Compute
Capabilities", "Technical Specifications per Compute Capability"); the resident-block limit, the
shared-memory carve-out sizes, the allocation granularity and the per-block reservation are those
of NVIDIA's occupancy calculator, ``cuda_occupancy.h`` (CUDA 13 toolkit). The occupancy calculator
(``gpucourse.lessons.occupancy.calculator``), the microscope's launch checks (``gpucourse.microscope.limits``) and the
lessons read them from here.
"""

from __future__ import annotations

from dataclasses import dataclass

KIB = 1024

WARP_SIZE = 32
MAX_THREADS_PER_BLOCK = 1024
MAX_BLOCK_DIM = (1024, 1024, 64)
MAX_GRID_DIM = (2**31 - 1, 65535, 65535)
MAX_STATIC_SHARED_PER_BLOCK_BYTES = 48 * KIB  # above this a kernel must opt in (dynamic shared memory)
MAX_REGISTERS_PER_THREAD = 255  # ptxas never allocates more (the header's 256 is not reachable)
REGISTERS_PER_SM = 65536
REGISTERS_PER_BLOCK = 65536
REGISTER_ALLOCATION_UNIT = 256  # registers per warp are allocated in units of 256
SUB_PARTITIONS = 4  # an SM is four sub-partitions, each with its own quarter of the register file


@dataclass(frozen=True)
class ComputeCapability:
    """One compute capability's per-SM limits."""

    cc: tuple[int, int]
    example: str
    max_threads_per_sm: int
    max_blocks_per_sm: int
    shared_per_sm_bytes: int  # the largest carve-out
    shared_per_block_optin_bytes: int  # the most one block may have, after opting in
    reserved_shared_per_block_bytes: int  # the driver's per-block reservation (cc ≥ 8.0)
    shared_granularity_bytes: int
    carveouts_kb: tuple[int, ...]  # the shared-memory sizes an SM can be configured with
    registers_per_sm: int = REGISTERS_PER_SM
    registers_per_block: int = REGISTERS_PER_BLOCK

    @property
    def max_warps_per_sm(self) -> int:
        return self.max_threads_per_sm // WARP_SIZE

    @property
    def name(self) -> str:
        return f"{self.cc[0]}.{self.cc[1]}"


_VOLTA_CARVEOUTS_KB = (0, 8, 16, 32, 64, 96)
_TURING_CARVEOUTS_KB = (32, 64)
_A100_CARVEOUTS_KB = (0, 8, 16, 32, 64, 100, 132, 164)  # cc 8.0 and 8.7
_SMALL_AMPERE_CARVEOUTS_KB = (0, 8, 16, 32, 64, 100)  # cc 8.6, 8.9, 12.x
_HOPPER_CARVEOUTS_KB = (0, 8, 16, 32, 64, 100, 132, 164, 196, 228)  # cc 9.0, 10.0, 10.3

COMPUTE_CAPABILITIES: dict[tuple[int, int], ComputeCapability] = {
    a.cc: a
    for a in (
        ComputeCapability((7, 0), "V100", 2048, 32, 96 * KIB, 96 * KIB, 0, 256, _VOLTA_CARVEOUTS_KB),
        ComputeCapability((7, 5), "T4, RTX 20xx", 1024, 16, 64 * KIB, 64 * KIB, 0, 256, _TURING_CARVEOUTS_KB),
        ComputeCapability((8, 0), "A100", 2048, 32, 164 * KIB, 163 * KIB, KIB, 128, _A100_CARVEOUTS_KB),
        ComputeCapability((8, 6), "A10, RTX 30xx", 1536, 16, 100 * KIB, 99 * KIB, KIB, 128,
                          _SMALL_AMPERE_CARVEOUTS_KB),
        ComputeCapability((8, 7), "Jetson AGX Orin", 1536, 16, 164 * KIB, 163 * KIB, KIB, 128, _A100_CARVEOUTS_KB),
        ComputeCapability((8, 9), "L4, L40S, RTX 40xx", 1536, 24, 100 * KIB, 99 * KIB, KIB, 128,
                          _SMALL_AMPERE_CARVEOUTS_KB),
        ComputeCapability((9, 0), "H100, H200", 2048, 32, 228 * KIB, 227 * KIB, KIB, 128, _HOPPER_CARVEOUTS_KB),
        ComputeCapability((10, 0), "B200", 2048, 32, 228 * KIB, 227 * KIB, KIB, 128, _HOPPER_CARVEOUTS_KB),
        ComputeCapability((10, 3), "B300", 2048, 32, 228 * KIB, 227 * KIB, KIB, 128, _HOPPER_CARVEOUTS_KB),
        ComputeCapability((12, 0), "RTX 50xx, RTX PRO 6000", 1536, 24, 100 * KIB, 99 * KIB, KIB, 128,
                          _SMALL_AMPERE_CARVEOUTS_KB),
    )
}
