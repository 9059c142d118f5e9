"""The CUDA occupancy calculator, rule for rule (NVIDIA's ``cuda_occupancy.h``, CUDA 13).

    from gpucourse.lessons.occupancy.calculator import occupancy
    r = occupancy(threads_per_block=128, registers_per_thread=37, cc=(7, 0))
    r.active_blocks, r.active_warps, r.occupancy, r.limiter   # 12, 48, 0.75, "registers"
    print(r.explain())                                         # the arithmetic, step by step

Four things cap the number of blocks resident on one SM (a streaming multiprocessor):

* registers — allocated per warp: registers/thread × 32 rounded up to 256; each of the SM's
  four sub-partitions holds 65,536 / 4 = 16,384 registers, so it holds
  ⌊16,384 / registers-per-warp⌋ warps. A block whose warps (rounded up to a multiple of 4)
  need more than 65,536 registers cannot launch at all;
* shared memory — per block: its bytes plus the 1 KB the driver reserves (cc ≥ 8.0), rounded
  up to the allocation granularity (256 B on cc 7.x, 128 B on cc 8.x/9.x); the SM's carve-out
  divided by that. Above 48 KB a block must opt in (``cudaFuncSetAttribute``);
* warps — the SM's warp slots divided by the block's warps (threads rounded up to 32);
* blocks — a fixed maximum of resident blocks per SM.

Active blocks = the smallest of the four; the ones that reach it are the *limiter* (ties are
named together, as NVIDIA's calculator does). Occupancy = active warps / the SM's warp slots.
The block-barrier limit of cc ≥ 9.0 (2 barriers per resident block, 1 per kernel) and
partitioned global caching (cc 5.2/6.x) never bind on the parts modelled here (gpucourse.hardware).
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field

from gpucourse.errors import InvalidConfig
from gpucourse.hardware import (  # noqa: F401  (re-exported: lessons and tests read them from here)
    COMPUTE_CAPABILITIES,
    MAX_REGISTERS_PER_THREAD,
    MAX_STATIC_SHARED_PER_BLOCK_BYTES,
    MAX_THREADS_PER_BLOCK,
    REGISTER_ALLOCATION_UNIT,
    SUB_PARTITIONS,
    WARP_SIZE,
)
from gpucourse.hardware import ComputeCapability as Architecture

DEFAULT_SHARED_PER_BLOCK_BYTES = MAX_STATIC_SHARED_PER_BLOCK_BYTES  # above this a kernel must opt in

LIMITERS = ("registers", "shared memory", "warps", "blocks")
KB = 1024

ARCHITECTURES: dict[tuple[int, int], Architecture] = COMPUTE_CAPABILITIES
SUPPORTED_CCS = tuple(ARCHITECTURES)


def architecture(cc) -> Architecture:
    """The limits of compute capability ``cc``: (9, 0), "9.0", 9.0 or "sm_90"."""
    key = _parse_cc(cc)
    if key not in ARCHITECTURES:
        allowed = ", ".join(a.name for a in ARCHITECTURES.values())
        raise InvalidConfig(f"compute capability {cc!r} is not modelled; choose one of {allowed}")
    return ARCHITECTURES[key]


def _parse_cc(cc) -> tuple[int, int] | None:
    if type(cc) is tuple and cc in ARCHITECTURES:  # the common case, kept fast for chart sweeps
        return cc
    if isinstance(cc, str):
        text = cc.strip().lower().removeprefix("sm_").removeprefix("sm")
        if "." in text:
            major, _, minor = text.partition(".")
        elif text.isdigit() and len(text) >= 2:
            major, minor = text[:-1], text[-1]
        else:
            return None
        return (int(major), int(minor)) if major.isdigit() and minor.isdigit() else None
    if isinstance(cc, float):
        return int(cc), round((cc - int(cc)) * 10)
    if isinstance(cc, (tuple, list)) and len(cc) == 2 and all(
        isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in cc
    ):
        return int(cc[0]), int(cc[1])
    return None


def round_up(value: int, unit: int) -> int:
    return unit * -(-value // unit)


def registers_per_warp(registers_per_thread: int) -> int:
    """Registers a warp is given: registers/thread × 32, rounded up to 256."""
    return round_up(registers_per_thread * WARP_SIZE, REGISTER_ALLOCATION_UNIT)


def shared_bytes_allocated(shared_bytes_per_block: int, cc=(9, 0)) -> int:
    """Shared memory one block takes from the SM: its bytes + the driver's reservation, rounded up."""
    arch = architecture(cc)
    total = shared_bytes_per_block + arch.reserved_shared_per_block_bytes
    return round_up(total, arch.shared_granularity_bytes)


def carveout_bytes(percent: int | None, cc=(9, 0)) -> int:
    """The SM's shared-memory size for a carve-out preference (None: the driver's default, the largest).

    ``percent`` is CUDA's ``cudaFuncAttributePreferredSharedMemoryCarveout`` (0–100 % of the
    largest carve-out); it is rounded up to the next size the SM supports.
    """
    arch = architecture(cc)
    if percent is None or percent == -1:
        wanted = arch.shared_per_sm_bytes
    else:
        percent = _integer("carveout_percent", percent, 0, 100)
        wanted = percent * arch.shared_per_sm_bytes // 100
    for size_kb in arch.carveouts_kb:
        if wanted <= size_kb * KB:
            return size_kb * KB
    raise AssertionError("a carve-out above the SM's shared memory")  # unreachable: percent ≤ 100


def _aligned_carveout(nbytes: int, arch: Architecture) -> int | None:
    for size_kb in arch.carveouts_kb:
        if nbytes <= size_kb * KB:
            return size_kb * KB
    return None


def _integer(name: str, value, minimum: int, maximum: int | None = None, hint: str = "") -> int:
    if type(value) is int and value >= minimum and (maximum is None or value <= maximum):
        return value  # fast path: a plain int in range
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise InvalidConfig(f"{name} must be a whole number{hint}, got {value!r}")
    value = int(value)
    if value < minimum or (maximum is not None and value > maximum):
        span = f"from {minimum} to {maximum}" if maximum is not None else f"≥ {minimum}"
        raise InvalidConfig(f"{name} must be {span}{hint}, got {value}")
    return value


@dataclass(frozen=True)
class Occupancy:
    """What the calculator says about one launch configuration on one compute capability."""

    threads_per_block: int
    registers_per_thread: int
    shared_bytes_per_block: int
    cc: tuple[int, int]
    active_blocks: int
    active_warps: int
    max_warps: int
    occupancy: float
    limiters: tuple[str, ...]
    limits: dict[str, int | None]  # blocks per SM each resource allows (None: no limit)
    warps_per_block: int
    registers_per_warp: int
    shared_bytes_allocated: int
    shared_per_sm_bytes: int
    reason: str = ""  # why the configuration cannot launch (active_blocks == 0)
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def limiter(self) -> str:
        """The binding resource(s): 'registers', 'warps', or ties such as 'warps + blocks'."""
        return " + ".join(self.limiters)

    @property
    def launches(self) -> bool:
        return self.active_blocks > 0

    @property
    def occupancy_pct(self) -> float:
        return 100.0 * self.occupancy

    @property
    def active_threads(self) -> int:
        return self.active_blocks * self.threads_per_block

    def summary(self) -> str:
        if not self.launches:
            return f"cannot launch: {self.reason}"
        return (
            f"{self.active_blocks} blocks × {self.warps_per_block} warps = {self.active_warps} of "
            f"{self.max_warps} warps ({self.occupancy_pct:.1f} %), limited by {self.limiter}"
        )

    __str__ = summary

    def explain(self) -> str:
        """The calculation in words and numbers, one line per resource."""
        arch = architecture(self.cc)
        regs = self.registers_per_thread
        lines = [
            f"cc {arch.name} ({arch.example}): {self.max_warps} warp slots, {arch.max_blocks_per_sm} blocks, "
            f"{arch.registers_per_sm:,} registers, {self.shared_per_sm_bytes // KB} KB shared memory per SM",
            f"block: {self.threads_per_block} threads → {self.warps_per_block} warps",
        ]
        if regs == 0:
            lines.append("registers: none used → no limit")
        else:
            per_sp = arch.registers_per_sm // SUB_PARTITIONS
            lines.append(
                f"registers: {regs} × 32 = {regs * WARP_SIZE} per warp → rounded up to "
                f"{self.registers_per_warp}; "
                f"⌊{per_sp:,} / {self.registers_per_warp}⌋ = {per_sp // self.registers_per_warp} warps per "
                f"sub-partition × 4 = {SUB_PARTITIONS * (per_sp // self.registers_per_warp)} warps → "
                f"{_limit_text(self.limits['registers'])} blocks"
            )
        reserved = arch.reserved_shared_per_block_bytes
        if self.limits["shared memory"] is None:
            lines.append("shared memory: none used → no limit")
        else:
            lines.append(
                f"shared memory: {self.shared_bytes_per_block:,} B + {reserved:,} B reserved → rounded up to "
                f"{self.shared_bytes_allocated:,} B; ⌊{self.shared_per_sm_bytes:,} / "
                f"{self.shared_bytes_allocated:,}⌋ = {_limit_text(self.limits['shared memory'])} blocks"
            )
        lines.append(
            f"warps: ⌊{self.max_warps} / {self.warps_per_block}⌋ = {self.limits['warps']} blocks"
        )
        lines.append(f"blocks: at most {self.limits['blocks']} per SM")
        lines.append(self.summary())
        lines.extend(self.notes)
        return "\n".join(lines)


def _limit_text(value: int | None) -> str:
    return "no limit" if value is None else str(value)


def occupancy(
    threads_per_block,
    registers_per_thread,
    shared_bytes_per_block=0,
    cc=(9, 0),
    *,
    carveout_percent: int | None = None,
) -> Occupancy:
    """Blocks and warps resident per SM for one launch configuration (NVIDIA's rules).

    ``threads_per_block``: 1–1024 (an int or a block shape such as (16, 16)).
    ``registers_per_thread``: 0–255, as ptxas or ``kernel.get_regs_per_thread()`` reports it.
    ``shared_bytes_per_block``: static + dynamic shared memory of one block, in bytes.
    ``cc``: one of the modelled compute capabilities (``SUPPORTED_CCS``: 7.0 to 12.0).
    ``carveout_percent``: the kernel's preferred shared-memory carve-out (None: driver default).
    """
    if isinstance(threads_per_block, (tuple, list)):
        if not 1 <= len(threads_per_block) <= 3:
            raise InvalidConfig(f"a block shape has 1 to 3 dimensions, got {threads_per_block!r}")
        dims = [_integer("each block dimension", d, 1) for d in threads_per_block]
        threads = math.prod(dims)
        if threads > MAX_THREADS_PER_BLOCK:
            raise InvalidConfig(f"a block may hold at most 1024 threads; {threads_per_block!r} has {threads}")
    else:
        threads = _integer("threads_per_block", threads_per_block, 1, MAX_THREADS_PER_BLOCK)
    regs = _integer("registers_per_thread", registers_per_thread, 0, MAX_REGISTERS_PER_THREAD,
                    " (ptxas never gives a thread more than 255)")
    shared = _integer("shared_bytes_per_block", shared_bytes_per_block, 0, None, " (bytes)")
    arch = architecture(cc)
    if carveout_percent is not None and carveout_percent != -1:
        _integer("carveout_percent", carveout_percent, 0, 100, " (or None for the driver's default)")

    warps_per_block = -(-threads // WARP_SIZE)
    notes: list[str] = []
    reasons: dict[str, str] = {}

    # Registers (cudaOccMaxBlocksPerSMRegsLimit).
    # NVIDIA's calculator also refuses a block whose warps, rounded up to a multiple of the four
    # sub-partitions, need more registers than a block may have. Where a block may have the whole
    # register file (every cc modelled here) the sub-partition rule below gives 0 blocks then
    # anyway: per_warp × ⌈warps / 4⌉ > registers_per_sm / 4 means warps > 4 × ⌊registers_per_sm /
    # 4 / per_warp⌋. So that check is left out; tests/test_occupancy_rounding.py checks the claim.
    per_warp = registers_per_warp(regs)
    per_block = per_warp * warps_per_block
    if per_block > arch.registers_per_block:
        regs_limit: int | None = 0
        reasons["registers"] = (
            f"{warps_per_block} warps × {per_warp} registers = {per_block:,} registers, more than the "
            f"{arch.registers_per_block:,} a block may have"
        )
    elif per_warp == 0:
        regs_limit = None
    else:
        warps_per_sub_partition = (arch.registers_per_sm // SUB_PARTITIONS) // per_warp
        regs_limit = warps_per_sub_partition * SUB_PARTITIONS // warps_per_block
        if regs_limit == 0:
            reasons["registers"] = (
                f"the register file holds {warps_per_sub_partition * SUB_PARTITIONS} warps of {regs} "
                "registers, "
                f"fewer than the block's {warps_per_block}"
            )

    # Warps (cudaOccMaxBlocksPerSMWarpsLimit).
    warps_limit = arch.max_warps_per_sm // warps_per_block
    if warps_limit == 0:
        reasons["warps"] = (
            f"a block of {warps_per_block} warps is larger than the SM's {arch.max_warps_per_sm} slots"
        )

    # Blocks (cudaOccMaxBlocksPerMultiprocessor).
    blocks_limit = arch.max_blocks_per_sm

    # Shared memory (cudaOccMaxBlocksPerSMSmemLimit).
    allocated = shared_bytes_allocated(shared, arch.cc)
    preference = carveout_bytes(carveout_percent, arch.cc)
    optin = shared > DEFAULT_SHARED_PER_BLOCK_BYTES
    per_block_limit = (arch.shared_per_block_optin_bytes if optin else DEFAULT_SHARED_PER_BLOCK_BYTES) \
        + arch.reserved_shared_per_block_bytes
    shared_per_sm = preference
    if allocated > per_block_limit:
        smem_limit: int | None = 0
        reasons["shared memory"] = (
            f"{shared:,} B of shared memory per block is more than the "
            f"{arch.shared_per_block_optin_bytes // KB} KB "
            f"a block may have on cc {arch.name}"
        )
    else:
        if optin:
            notes.append(
                f"note: {shared:,} B is above the 48 KB default per block; the kernel must opt in "
                "(cudaFuncSetAttribute(…MaxDynamicSharedMemorySize…)) or the launch fails"
            )
        if preference < allocated:
            # The preference is ignored when not even one block would fit.
            shared_per_sm = _aligned_carveout(allocated, arch) or arch.shared_per_sm_bytes
            notes.append(
                f"note: the carve-out preference ({preference // KB} KB) is smaller than one block's "
                f"{allocated:,} B, so the driver uses {shared_per_sm // KB} KB"
            )
        smem_limit = shared_per_sm // allocated if allocated > 0 else None

    limits = {
        "registers": regs_limit, "shared memory": smem_limit, "warps": warps_limit, "blocks": blocks_limit,
    }
    active = min(v for v in limits.values() if v is not None)
    limiters = tuple(name for name in LIMITERS if limits[name] == active)
    active_warps = active * warps_per_block
    reason = "; ".join(reasons[name] for name in limiters if name in reasons) if active == 0 else ""
    return Occupancy(
        threads_per_block=threads, registers_per_thread=regs, shared_bytes_per_block=shared, cc=arch.cc,
        active_blocks=active, active_warps=active_warps, max_warps=arch.max_warps_per_sm,
        occupancy=active_warps / arch.max_warps_per_sm, limiters=limiters, limits=limits,
        warps_per_block=warps_per_block, registers_per_warp=per_warp, shared_bytes_allocated=allocated,
        shared_per_sm_bytes=shared_per_sm, reason=reason, notes=tuple(notes),
    )


def table(configs, cc=(9, 0)):
    """A pandas DataFrame of the calculator's answer for (threads, registers[, shared bytes]) tuples."""
    import pandas as pd

    rows = []
    for config in configs:
        r = occupancy(*config, cc=cc) if len(config) < 4 else occupancy(*config)
        rows.append({
            "threads_per_block": r.threads_per_block, "registers_per_thread": r.registers_per_thread,
            "shared_bytes_per_block": r.shared_bytes_per_block, "cc": f"{r.cc[0]}.{r.cc[1]}",
            "active_blocks": r.active_blocks, "active_warps": r.active_warps,
            "occupancy_pct": round(r.occupancy_pct, 2), "limiter": r.limiter or "-", "reason": r.reason,
        })
    return pd.DataFrame(rows)


def best_block_size(registers_per_thread, shared_bytes_per_block=0, cc=(9, 0), *, candidates=None) -> int:
    """The smallest block size (a multiple of 32 by default) that reaches the highest occupancy."""
    candidates = list(candidates or range(WARP_SIZE, MAX_THREADS_PER_BLOCK + 1, WARP_SIZE))
    results = [
        (occupancy(t, registers_per_thread, shared_bytes_per_block, cc).occupancy, -t) for t in candidates
    ]
    best, negative_threads = max(results)
    if best == 0:
        raise InvalidConfig("no block size in the candidates can launch with these resources")
    return -negative_threads


def register_budget(threads_per_block, target_occupancy, shared_bytes_per_block=0, cc=(9, 0)) -> int | None:
    """The most registers per thread that still reach ``target_occupancy`` (0–1), or None if none does.

    This is the number to give ``cuda.jit(max_registers=...)`` (or ``--maxrregcount``).
    """
    target = float(target_occupancy)
    if not 0.0 < target <= 1.0:
        raise InvalidConfig(f"target_occupancy must be in (0, 1], got {target_occupancy!r}")
    for regs in range(MAX_REGISTERS_PER_THREAD, -1, -1):
        if occupancy(threads_per_block, regs, shared_bytes_per_block, cc).occupancy >= target - 1e-12:
            return regs
    return None
