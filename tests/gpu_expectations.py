"""What the GPU tier may expect on each architecture: every threshold of tests/test_gpu_*.py, in one place.

A ratio that holds on an H100 can fail on a T4 or an RTX 4090 for reasons of the hardware, not of
the course. So every threshold a GPU test asserts is written here per compute capability (one
row per architecture family, Turing to Blackwell), each with its derivation: the datasheet,
whitepaper or NVIDIA guide it follows from, or the course's own counted model. Nothing here is
a measurement; the first real run on each family confirms or corrects it (`make gpu-report`).

A family can hold a threshold (a number) or a `Skip` with the reason it is not asserted there.
A GPU whose compute capability has no row (a Jetson at cc 8.7, a future cc 11.x) skips every
expectation, naming its architecture: an unknown GPU never passes or fails on a guess.

Facts the derivations use (per SM; CUDA C++ Programming Guide, "Technical Specifications per
Compute Capability" and "Arithmetic Instructions" throughput table; GA100, GA102, AD102, GH100
and Blackwell architecture whitepapers):

| cc   | parts (examples)            | warps/SM | fp32 FMA lanes/SM | bf16/TF32 tensor cores          |
|------|-----------------------------|----------|-------------------|----------------------------------|
| 7.5  | T4, RTX 20xx                | 32       | 64                | fp16/int8 only                   |
| 8.0  | A100                        | 64       | 64                | yes, data-centre rate            |
| 8.6  | A10, A40, RTX 30xx          | 48       | 128               | yes; GeForce at half rate        |
| 8.9  | L4, L40S, RTX 40xx          | 48       | 128               | yes (and fp8); GeForce half rate |
| 9.0  | H100, H200                  | 64       | 128               | yes (and fp8)                    |
| 10.0 | B200 (10.3: B300)           | 64       | 128               | yes (and fp8)                    |
| 12.0 | RTX 50xx, RTX PRO 6000      | 48       | 128               | yes (and fp8); GeForce half rate |
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import pytest

from gpucourse.measure import calibration as _calibration
from gpucourse.measure import runtime

# The architecture families the GPU tier is written for (issue 15: Turing to Blackwell).
FAMILIES: dict[tuple[int, int], str] = {
    (7, 5): "Turing (T4, RTX 20xx)",
    (8, 0): "Ampere GA100 (A100)",
    (8, 6): "Ampere GA10x (A10, A40, RTX 30xx)",
    (8, 9): "Ada (L4, L40S, RTX 40xx)",
    (9, 0): "Hopper (H100, H200)",
    (10, 0): "Blackwell GB100 (B200)",
    (10, 3): "Blackwell Ultra (B300)",
    (12, 0): "Blackwell GB20x (RTX 50xx, RTX PRO 6000)",
}
REQUIRED_FAMILIES = ((7, 5), (8, 0), (8, 6), (8, 9), (9, 0), (10, 0), (12, 0))  # sm_75 … sm_120

# fp32 FMA lanes per SM (results per clock): Programming Guide throughput table; whitepapers above.
FP32_LANES_PER_SM = {(7, 5): 64, (8, 0): 64, (8, 6): 128, (8, 9): 128, (9, 0): 128, (10, 0): 128, (10, 3): 128,
                     (12, 0): 128}
FMA_LATENCY_CYCLES = 4  # the lesson's assumption (occupancy_lesson.MODEL_FMA_LATENCY_CYCLES), not a measurement
SCHEDULERS_PER_SM = 4  # four sub-partitions per SM since Volta (hardware.SUB_PARTITIONS)
# best_copy ÷ the one-element copy is never asked below this, whatever the model's gain: the model never predicts
# less than 1 (more bytes in flight cannot slow a copy), and 3 % is one run's noise between two 1-GiB copies.
ONE_ELEMENT_FLOOR = 0.97

# Lessons 03, 04a and 05's one calibration (gpucourse.measure.calibration, issue 47): the H200's loaded latency,
# calibrated on lesson 03's recorded one-element copy, and its recorded copy ceiling. The derivations below
# compute from these, never from a typed latency.
_CAL = _calibration.recorded(_calibration.CALIBRATION_GPU)
_LATENCY_NS = _CAL.latency_ns if _CAL else float("nan")
_CAL_CEILING = _CAL.ceiling_gbps if _CAL else float("nan")
_CAL_ONE = _CAL.one_element_gbps if _CAL else float("nan")
_WARP_COPY_BYTES = 256  # a float32 warp load and its store (occupancy_lesson.MODEL_BYTES_PER_WARP_COPY)


def _need_kib(ceiling_gbps: float, sm_count: int) -> float:
    """Reads in flight per SM a copy at ``ceiling_gbps`` needs at the calibrated latency (KiB)."""
    return ceiling_gbps / 2 * _LATENCY_NS / sm_count / 1024


def _one_element_gbps(sm_count: int) -> float:
    """The model's one-element copy (8 KiB of reads per SM) at the calibrated latency, uncapped (GB/s)."""
    return 2 * 8192 * sm_count / _LATENCY_NS


def _gain(ceiling_gbps: float, sm_count: int) -> float:
    """The model's best_copy ÷ one-element gain: min(ceiling, 8 × the one-element rate) ÷ min(ceiling, it)."""
    one = _one_element_gbps(sm_count)
    return min(ceiling_gbps, 8 * one) / min(ceiling_gbps, one)


_WARPS_NEEDED = _CAL_CEILING / 132 * _LATENCY_NS / _WARP_COPY_BYTES  # lesson 05's model on the H200
_ILP4_25 = min(1.0, 64 / _WARPS_NEEDED)  # 16 warps × 4 loads at 25 %, the 100 % point at the ceiling
_B200_ILP4_25 = min(1.0, 64 / (8000 / 148 * _LATENCY_NS / _WARP_COPY_BYTES))


@dataclass(frozen=True)
class Skip:
    """Not asserted on this family, and why."""

    reason: str


@dataclass(frozen=True)
class Expectation:
    claim: str
    derivation: str  # where the threshold comes from (a cited source or the course's counted model)
    by_cc: Mapping[tuple[int, int], float | Skip]
    bound: str = "at least"  # the measured ratio must be "at least" or "at most" the threshold


def everywhere(value: float) -> dict[tuple[int, int], float | Skip]:
    """The same threshold on every family: for claims that follow from the programming model
    (warps of 32, 32-byte sectors, SIMT branches), which every family shares."""
    return dict.fromkeys(FAMILIES, value)


def families(default: float | Skip, **overrides: float | Skip) -> dict[tuple[int, int], float | Skip]:
    """``default`` on every family, with overrides keyed ``sm_75``, ``sm_80``…"""
    table = dict.fromkeys(FAMILIES, default)
    for key, value in overrides.items():
        cc = (int(key[3:-1]), int(key[-1]))
        if cc not in FAMILIES:
            raise KeyError(f"{key} is not a family of this table")
        table[cc] = value
    return table


NO_BF16_ON_TURING = Skip("Turing (T4, RTX 20xx) has no bf16 or TF32 tensor cores (Turing whitepaper)")
TF32_AT_FP32_RATE = Skip("GeForce cards of this family run TF32 at the fp32 CUDA-core rate (GA102/AD102/RTX "
                         "Blackwell whitepapers), and the family holds them")
NO_FP8 = Skip("fp8 tensor cores came with Ada and Hopper (cc ≥ 8.9)")
_ONE_BLOCK_PER_SM = ("ptxas gives the vectorised 128/8 rung {regs} registers a thread on this family (compile-check): "
                     "one 256-thread block per SM (65,536 registers), so the derivation's two blocks per SM does not "
                     "hold and the fraction is not derived here")
_SMALL_PARTS = ("the family includes parts with 20–40 SMs (T4 40, RTX 3050 20, RTX 4060 24, RTX 5060 30 SMs: "
                "datasheets/whitepapers), and the 3× comes from many SMs' shared-memory atomics running in "
                "parallel against 16 hot addresses in the L2; it is not derived for so few SMs")


def _ilp_gain(cc: tuple[int, int], occupancy: float = 0.125) -> float:
    """Little's law for the FMA chains: at ``occupancy``, the fp32 throughput with four independent
    chains per thread ÷ with one (each capped at the SM's fp32 rate)."""
    from gpucourse import hardware

    warps_per_scheduler = occupancy * hardware.COMPUTE_CAPABILITIES[cc].max_warps_per_sm / SCHEDULERS_PER_SM
    lanes_per_scheduler = FP32_LANES_PER_SM[cc] / SCHEDULERS_PER_SM
    needed = FMA_LATENCY_CYCLES * lanes_per_scheduler / 32  # warp instructions in flight to keep it busy
    return min(1.0, 4 * warps_per_scheduler / needed) / min(1.0, warps_per_scheduler / needed)


EXPECTATIONS: dict[str, Expectation] = {
    # --- the foundation: harness, ceilings, lessons 00–01 -------------------------------------------------
    "events.four_times_work.min": Expectation(
        "4× the iterations of a dependent FMA chain take 3–5× the event time",
        "the spin kernel is one dependent chain per thread in one wave: its time is iterations × the FMA "
        "latency on any family (Programming Guide, 'Multiprocessor Level' latency hiding); ±25 % for "
        "launch and clock changes", everywhere(3.0)),
    "events.four_times_work.max": Expectation(
        "(upper bound of the same)", "the spin kernel's time is linear in its iterations on every family (see "
        "events.four_times_work.min): 4× the work cannot take more than 4× plus launch and clock noise",
        everywhere(5.0), "at most"),
    "async.sync_over_launch": Expectation(
        "the launch alone returns ≥ 20× sooner than launch + synchronize",
        "a launch returns after queuing (Programming Guide, 'Asynchronous Concurrent Execution'), a few µs; "
        "132 blocks fit in one wave on every family (≥ 32 warps × 20+ SMs) and run 10^6 dependent FMAs "
        "(≈ 4×10^6 cycles: milliseconds at any clock of 1–2.5 GHz)", everywhere(20.0)),
    "launch.empty_kernel_ms": Expectation(
        "an empty kernel, batched, costs < 50 µs per launch",
        "launch overhead is a few µs on every family (CUDA Best Practices Guide, 'Kernel launch overhead'); "
        "an H100 measured 1.8 µs per batched empty launch (data/reference/nvidia-h100-80gb-hbm3/first-contact); "
        "50 µs is far above any family's", everywhere(0.05), "at most"),
    "ceiling.copy_over_datasheet.min": Expectation(
        "a 256 MiB device copy reaches 50–105 % of the datasheet bandwidth",
        "runtime.DATASHEETS (each row cited); a copy is the best case for DRAM, and no part exceeds its "
        "datasheet by more than rounding", everywhere(0.5)),
    "ceiling.copy_over_datasheet.max": Expectation(
        "(upper bound of the same)", "no part's copy exceeds its datasheet bandwidth (runtime.DATASHEETS, each "
        "row cited) by more than the datasheet's rounding", everywhere(1.05), "at most"),
    "staircase.33_over_64": Expectation(
        "33 threads cost what 64 do (two warps either way)",
        "warps are 32 threads on every compute capability (Programming Guide, 'SIMT Architecture')",
        everywhere(0.85)),
    "staircase.33_over_32": Expectation(
        "the 33rd thread costs a whole warp",
        "warps are 32 threads on every compute capability (Programming Guide, 'SIMT Architecture'): 33 threads "
        "are two warps, 32 one, so the counted model gives 2×; 1.6 leaves room for the launch", everywhere(1.6)),
    # --- lesson 02: divergence ------------------------------------------------------------------------------
    "divergence.interleaved_over_clustered": Expectation(
        "half the lanes on a heavy path, interleaved, cost ≥ 1.7× the same work clustered per warp",
        "a divergent warp runs both paths one after the other on every family, independent thread "
        "scheduling included (Programming Guide, 'SIMT Architecture'; Volta whitepaper); the counted model "
        "gives 2× for equal paths", everywhere(1.7)),
    "divergence.one_in_32_over_all": Expectation(
        "one lane in 32 on path A makes every warp pay for it (≥ 0.8× of all lanes)",
        "as divergence.interleaved_over_clustered: the warp pays for path A when any lane takes it",
        everywhere(0.8)),
    "divergence.predicated_gap": Expectation(
        "a trivially predicated branch shows no divergence gap (< 1.25×)",
        "the compiler predicates a one-instruction branch (PTX 'selp'/predication; the lesson's PTX check "
        "shows it), so both placements run the same instructions", everywhere(1.25), "at most"),
    "divergence.sort_pays": Expectation(
        "sorting first pays for heavy bodies and not for trivial ones (speed-up vs 1×)",
        "the counted model: compaction removes idle lanes of a 1024-FMA body but costs more than a 1-FMA "
        "body saves, on every SIMT family", everywhere(1.0)),
    # --- lesson 03: coalescing ------------------------------------------------------------------------------
    # (lesson 03, work per thread: issue 38; derivations use gpucourse.lessons.coalescing.inflight, Little's law:
    # bytes in flight = bandwidth × latency, with the one calibration per GPU of gpucourse.measure.calibration
    # (issue 47): on the H200 the one-element copy's recorded GB/s at 8 KiB/SM × 132 SMs, read bytes over read rate,
    # gives the loaded latency; a copy at the recorded ceiling then needs _need_kib(ceiling, 132) KiB of reads per SM)
    "coalescing.best_copy_over_copy_ceiling": Expectation(
        "the course's best Numba copy (best_copy: four 8-byte loads per thread before the stores, grid-stride "
        "over a resident grid) reaches ≥ 90 % of the device's copy ceiling on Hopper, ≥ 85 % elsewhere",
        "a coalesced copy moves the same 32-byte sectors as cudaMemcpy (Best Practices Guide, 'Coalesced Access "
        "to Global Memory'); 1 GiB each way is beyond every family's L2. Bytes in flight: 2,048 threads × 4 loads "
        f"× 8 B = 64 KiB of reads per SM. Hopper: an H200 needs {_need_kib(_CAL_CEILING, 132):.1f} KiB/SM at the "
        f"calibrated {_LATENCY_NS:.0f} ns (an H100 SXM {_need_kib(3000, 132):.1f} KiB at ~3.0 TB/s), so best_copy "
        f"holds ≥ {64 / _need_kib(_CAL_CEILING, 132):.1f}× what the ceiling needs and the model predicts the "
        "ceiling itself; 0.90 leaves 10 % for what the model omits (the last wave, DRAM refresh and "
        "read/write turnaround, which cudaMemcpy pays too). sm_100/sm_103 (B200/B300: 148 SMs, 8 TB/s "
        f"datasheet): 8,000 ÷ 2 × {_LATENCY_NS:.0f} ns ÷ 148 = {_need_kib(8000, 148):.1f} KiB/SM needed, 64 KiB "
        "held: the same arithmetic predicts the ceiling, kept at the course's 0.85 until a recording calibrates "
        "it. Other families hold at most 1,536–2,048 threads per SM with less bandwidth per SM (A100 80GB SXM: "
        f"{_need_kib(2039, 108):.1f} KiB/SM needed at its 2,039 GB/s datasheet): 0.85. A prediction until a "
        "GPU run confirms it",
        families(0.85, sm_90=0.90)),
    "coalescing.best_over_one_element_vs_model": Expectation(
        "bytes in flight, the evidence: best_copy's gain over the one-element copy (strided_copy, stride 1) "
        "reaches ≥ 0.85 (Hopper; 0.8 elsewhere) of the gain Little's law predicts for this device, and is never "
        "below ONE_ELEMENT_FLOOR (0.97: best_copy no slower than the one-element copy, 3 % for noise)",
        f"the model's gain = min(ceiling, 2 × 64 KiB × SMs ÷ {_LATENCY_NS:.0f} ns) ÷ min(ceiling, 2 × 8 KiB × SMs "
        f"÷ {_LATENCY_NS:.0f} ns) (threads per SM from gpucourse.hardware, the ceiling measured in the same run). "
        f"Predicted: H200 {_gain(_CAL_CEILING, 132):.2f} (the recorded {_CAL_ONE:,.0f} GB/s vs its "
        f"{_CAL_CEILING:,.0f} ceiling), H100 SXM {_gain(3000, 132):.2f}, B200 {_gain(7000, 148):.1f}–"
        f"{_gain(8000, 148):.1f}, A100 and GDDR parts 1.0 (8 KiB/SM already covers their bandwidth). The "
        "one-element copy is not asked to reach 85 % of the ceiling any more: on an H200 the same arithmetic says "
        f"it cannot ({_CAL_ONE / _CAL_CEILING:.2f}, the course's recording), on a B200 ≈ "
        f"{_one_element_gbps(148) / 7500:.1f}. "
        "The test asserts gain ≥ max(ONE_ELEMENT_FLOOR, threshold × model gain): the model never predicts a "
        "gain below 1, so best_copy may not be slower than one run's noise. Hopper 0.85, derived: best_copy reaches "
        "≥ 0.90 of the ceiling (coalescing.best_copy_over_copy_ceiling) and the one-element copy is the very point "
        "the latency is calibrated on (its model equals its recording), so gain ≥ 0.90 ÷ 1.01 = 0.89 × the "
        f"model's; 0.85 leaves 4 % for one run's noise. On an H200 that asks ≥ {0.85 * _gain(_CAL_CEILING, 132):.2f} "
        f"(model {_gain(_CAL_CEILING, 132):.2f}). "
        f"On an H100 SXM the model gain is only {_gain(3000, 132):.2f}, and a lighter-load latency of 708 ns (the L2 "
        "sweep's grid-stride calibration) brings the one-element copy to the ceiling (gain 1.0): there the floor "
        "binds, and the check says only that best_copy is not slower — the H200 is where it is evidence. "
        f"Other families 0.8: the {_LATENCY_NS:.0f}-ns latency is the H200's, taken for every part (HBM3/3e "
        "latencies are alike; a shorter GDDR latency only makes the predicted gain 1.0, which the floor then asks)",
        families(0.8, sm_90=0.85)),
    "coalescing.stride32_over_stride1.max": Expectation(
        "float32 stride 32 reaches ≤ 0.16× the bandwidth of stride 1 (both with copy_ilp4, four loads per thread)",
        "the sector model: at stride 32 every lane has its own 32-byte sector, 4 useful bytes of 32 fetched for "
        "the read and the write alike: 1/8 of a coalesced copy, on every family since Maxwell (Best Practices "
        "Guide, 'Strided Accesses'); 0.16 = 1/8 + 30 % for noise and the L2 hits of neighbouring warps. Both "
        "copies keep four loads per thread in flight, so stride 1 runs at the ceiling, not at a latency-bound "
        "0.62 (which would move the ratio's bound to 0.2)", everywhere(0.16), "at most"),
    "coalescing.stride32_over_stride1.min": Expectation(
        "float32 stride 32 keeps ≥ 1/32 of the bandwidth of stride 1 (copy_ilp4 both): fetch granularity, not more",
        "a GPU that fetched a whole 128-byte line per lane for the read and the write would keep 4 of 128 bytes "
        "= 1/32 (the folklore's figure); the H200's recording lies between 1/16 and 1/32: 170 GB/s at stride 32 = "
        "1/15.4 of its one-element stride-1 copy and 1/25 of its ceiling (coalescing.stride.csv), as a 64-byte "
        "L2 fetch per miss would give plus partial-sector writes (a hypothesis: dram__sectors_read.sum would "
        "tell). Below 1/32 something other than fetch granularity (TLB misses over the 4 GiB the test spans) would be "
        "at work. A prediction until a GPU run confirms it", everywhere(1 / 32)),
    "coalescing.stride8_over_stride1": Expectation(
        "float32 stride 8 reaches ≤ 0.35× the bandwidth of stride 1",
        "sectors are 32 bytes on every family since Maxwell (Best Practices Guide, 'Strided Accesses'): the "
        "sector model gives 1/8; 256 MiB each way is beyond every L2", everywhere(0.35), "at most"),
    "coalescing.misaligned_over_aligned": Expectation(
        "a copy misaligned by one element keeps ≥ 0.8× the bandwidth",
        "the sector model's bound is 4/5 (a 128-byte warp request touches 5 sectors instead of 4; Best "
        "Practices Guide, 'A Sequential but Misaligned Access Pattern')", everywhere(0.8)),
    # --- lesson 04: tiling ------------------------------------------------------------------------------------
    "tiling.tiled_over_naive": Expectation(
        "the best tiled rung beats the naive matmul by ≥ 1.3× at N = 4096",
        "the counted traffic model (tiling.matmul_traffic_bytes): a tile of 16 cuts each warp's global "
        "requests ≥ 3.8×; NVIDIA's Best Practices Guide ('Shared Memory in Matrix Multiplication (C=AB)') "
        "shows the same change paying on a V100. Shared memory per SM (64 KB on Turing and up) holds a "
        "32×32 float tile pair on every family", everywhere(1.3)),
    "tiling.best_rung_over_cublas.max": Expectation(
        "our best rung stays below 1.5× cuBLAS (a sanity bound)",
        "cuBLAS fp32 is tuned per family; beating it by half would mean a broken measurement",
        everywhere(1.5), "at most"),
    "tiling.cublas_over_fp32_peak.max": Expectation(
        "cuBLAS fp32 (TF32 off) stays within the datasheet's fp32 peak (+5 %)",
        "runtime.DATASHEET_TFLOPS (cited rows only; other parts skip the check): above the CUDA cores' peak "
        "would mean tensor cores (TF32) were used", everywhere(1.05), "at most"),
    # --- lesson 04: the matmul ladder after register blocking (issue 38 item 2; review gpu-recordings.md §3.2) ---
    # Instruction counts: tiling.compiled.sass_table() on sm_90 (ptxas 13.0 from numba-cuda 0.30.4's PTX;
    # tests/test_tiling_vectorised.py pins them). Recorded anchors: data/reference/nvidia-h200/quick/
    # tiling.matmul.csv (tiled 32 = 0.21 and register-blocked 64/4 = 0.21 of cuBLAS at N = 1024) and
    # expectations.json (best rung 0.200 of cuBLAS's 51.3 TFLOP/s at N = 4096). Published anchor:
    # data/published/sgemm-cuda/ (CUDA C++ on an RTX A6000, 128 fp32 lanes per SM like an H200).
    "tiling.register_blocking_over_tiled": Expectation(
        "the best register-blocked Numba rung (vectorised ones included) beats the best tiled rung by ≥ 1.5× "
        "at N = 4096",
        "SASS: the tiled 32 k-loop issues 32 FFMA in 134 instructions (0.24 of its issue slots, 40 shared "
        "loads); the vectorised 128/8 k-loop 64 FFMA in 96 (0.67; 4 LDS.128), ≈ 0.52 of a whole k-tile's ≈ 990 "
        "instructions once the prefetch, stores and barrier are counted: 2.2× the FFMAs per issue slot. A "
        "family with 64 fp32 lanes per SM (cc 7.5, 8.0) halves every warp's FFMA rate, which the tiled loop "
        "(issue-bound) feels less than the vectorised one: still ≥ 2× by the same counts. The old "
        "register-blocked rungs gained nothing over tiled 32 on an H200 (7.93 vs 7.92 TFLOP/s at N = 1024: "
        "8 or 16 4-byte LDS per 16 or 64 FFMA); 1.5 is asserted for the rungs rewritten to fix that (on cc 7.5 "
        "and 8.0 the 128/8 rung gets 130–133 registers, one block per SM: the 64/4 rung, 54–56 registers, is the "
        "candidate there)",
        everywhere(1.5)),
    "tiling.vectorised_over_cublas": Expectation(
        "the vectorised 128/8 Numba rung reaches ≥ 40 % of cuBLAS fp32 (TF32 off) at N = 4096",
        "a prediction, not yet measured. Issue bound from the SASS: ≈ 0.52 of a k-tile's instructions are "
        "FFMAs, so ≤ 0.52 of the fp32 peak; cuBLAS fp32 ran at 0.77 of the H200's peak (51.3 of 66.9 TFLOP/s), "
        "so the rung's ceiling is ≈ 0.67 of cuBLAS. 120 registers × 256 threads: 2 blocks per SM; N = 4096 gives "
        "1,024 blocks, 3.9 waves on 132 SMs (the last wave 88 % full). SGEMM_CUDA's CUDA C++ kernels with the "
        "same tiling reached 68.7 % (2-D block tiling) and 78.4 % (vectorised) of cuBLAS on an RTX A6000. "
        "What Numba cannot do costs the rest (see tiling.cuda_cpp_over_cublas). 0.40 is the review's lower "
        "estimate (40–60 %) and 0.6 of the issue ceiling. ptxas gives the rung ≤ 128 registers on cc 8.6–12.0 "
        "(`python -m gpucourse compile-check --only vectorised`: 128, 128, 120, 107, 116), so 2 blocks per SM there",
        families(0.40, sm_75=Skip(_ONE_BLOCK_PER_SM.format(regs=130)), sm_80=Skip(_ONE_BLOCK_PER_SM.format(regs=133)))),
    "tiling.cuda_cpp_over_cublas": Expectation(
        "the CUDA C++ RawKernel (same tiling, float4 global loads, unrolled k-tile) reaches ≥ 60 % of cuBLAS fp32 "
        "at N = 4096",
        "a prediction, not yet measured. SASS (NVRTC → ptxas 13.0, sm_90): 512 FFMA in a 600-instruction k-tile "
        "(0.85 of issue slots, above cuBLAS's 0.77 of peak: issue is not the limit), 32 LDS.128 and 2 LDG.E.128 "
        "per k-tile, 125 registers (2 blocks per SM), no spills. SGEMM_CUDA's equivalents (kernels 6 and 11: "
        "vectorised loads, double buffering) reached 78.4 % and 74.3 % of cuBLAS on an RTX A6000; 0.60 leaves "
        "room for a different GPU and cuBLAS version",
        everywhere(0.60)),
    "tiling.padded_over_unpadded_transpose": Expectation(
        "the padded shared-memory transpose against the unpadded one, 8192² float32",
        "bank conflicts serialise the unpadded column reads 32-way on every family (Programming Guide, "
        "'Shared Memory'; NVIDIA blog 'An Efficient Matrix Transpose in CUDA C/C++'). Where DRAM bandwidth "
        "is high next to shared memory's (HBM parts: A100, H100/H200, B200) removing them shows (≥ 1.3×); on "
        "GDDR parts the transpose is DRAM-bound either way, so padding must only not cost (≥ 0.95: one "
        "run's noise)",
        families(0.95, sm_80=1.3, sm_90=1.3, sm_100=1.3, sm_103=1.3)),
    "tiling.padded_transpose_over_copy": Expectation(
        "the padded transpose reaches ≥ 0.6× a plain copy",
        "with tiles in shared memory every global read and write is coalesced, moving a copy's bytes (NVIDIA "
        "blog 'An Efficient Matrix Transpose in CUDA C/C++'); 0.6 leaves room for the barrier", everywhere(0.6)),
    "tiling.padded_over_naive_transpose": Expectation(
        "the padded transpose beats the naive one",
        "the naive transpose's strided writes touch 8× the sectors (sector model, every family)", everywhere(1.0)),
    # --- lesson 05: occupancy ---------------------------------------------------------------------------------
    "occupancy.calculator_matches_driver": Expectation(
        "the course's calculator agrees with the driver's occupancy query on every configuration (share)",
        "gpucourse.occupancy implements cuda_occupancy.h for each modelled cc (hardware.COMPUTE_CAPABILITIES; "
        "the header test samples every one)", everywhere(1.0)),
    "occupancy.memory_low_over_high": Expectation(
        "the resident-grid ILP-1 copy at ≤ 25 % occupancy reaches ≤ 0.7× its speed at ≥ 75 %",
        "Little's law: a warp of the ILP-1 copy keeps 128 B in flight, so 25 % occupancy keeps 8 (cc 7.5), "
        "12 (cc 8.6/8.9/12.0) or 16 (cc 8.0/9.0/10.x) × 128 B per SM in flight; the need is bandwidth × "
        "latency ÷ SMs, with bandwidth from the datasheets and the H200's calibrated loaded latency, "
        f"{_LATENCY_NS:.0f} ns (gpucourse.measure.calibration; the lesson takes it for a GPU the course has not "
        "recorded, and a longer latency only lowers the ratio). For the lowest bandwidth per SM of each family (T4 "
        "320 GB/s/40, A100 PCIe 1555/108, A10 600/72, H100 PCIe 2000/114, B200 8000/148, RTX 5090 1792/170) "
        "the predicted ratio is ≤ 0.35, far from 0.7. On an H200 with the recorded inputs (the one calibration: "
        f"{_LATENCY_NS:.0f} ns on lesson 03's one-element copy, {_CAL_CEILING:,.0f} GB/s copy ceiling: "
        f"{_WARPS_NEEDED:.0f} warp copies needed per SM) the model gives 0.25; a lighter-load latency at 25 % "
        "raises it to ≈ 0.3 (review "
        "gpu-recordings.md §2.4). The grid is exactly the resident blocks (driver blocks/SM × SMs, grid-stride "
        "loop), so the block dispatcher (≈ 1.65 G blocks/s on H100/H200, which made the one-element copy flat "
        "at 0.99) works once per block slot and cannot set the pace",
        families(0.7, sm_89=Skip(
            "the family holds the L4 (300 GB/s over 58 SMs): 25 % occupancy keeps 1.5 KB per SM in flight "
            f"against a need of ≈ {300 / 58 * _LATENCY_NS / 1000:.1f} KB at the H200's calibrated "
            f"{_LATENCY_NS:.0f} ns, so the 0.7 bound would rest on an unmeasured GDDR latency (it fails below "
            "≈ 420 ns)"))),
    "occupancy.memory_ilp4_low_over_ilp1_high": Expectation(
        "the resident-grid ILP-4 copy at 25 % occupancy reaches ≥ 0.8× the ILP-1 copy at 100 %",
        "Little's law: both keep the same bytes in flight per SM (16 warps × 4 loads = 64 warps × 1 load on "
        "cc 8.0/9.0/10.x; 12 × 4 = 48 × 1 on cc 8.6/8.9/12.0; 8 × 4 = 32 × 1 on cc 7.5), so at one latency "
        "they move the same bytes per second, and where that saturates DRAM both sit at the ceiling; 0.8 "
        "leaves room for the ILP-4 kernel's extra index arithmetic and tail loop. It holds on every family "
        f"because it needs no latency or bandwidth figure (model on an H200: {_ILP4_25:.2f} ÷ {_ILP4_25:.2f} = 1.0)",
        everywhere(0.8)),
    "occupancy.memory_ilp4_low_over_high": Expectation(
        "the resident-grid ILP-4 copy at 25 % occupancy keeps ≥ 0.55× (Hopper) its speed at 100 %",
        "Little's law with the H200's recorded inputs (occupancy_lesson.predictions: 4 × 16 warps = 64 warp "
        f"loads in flight of {_WARPS_NEEDED:.0f} needed → {_ILP4_25:.2f} of the ceiling, where the 100 % point "
        f"sits) gives {_ILP4_25:.2f}; with the lighter-load latency of the L2 sweep's grid-stride calibration "
        "(8 KiB/SM ↔ 3.05 TB/s) 0.71 (review gpu-recordings.md §2.4: 0.6–0.75). Hopper 0.55 = 0.9 × the lowest of "
        f"these models ({_ILP4_25:.2f}, at the heaviest latency recorded; the lighter load at 25 % can only shorten "
        "it), the 10 % for one run's noise and the first attempt's shortfall (its recorded point sat at 0.94 × "
        "this model). The ILP-4 kernel's own overhead cancels: both points run the same kernel (an earlier 0.45 "
        "took it off again). Asserted on Hopper only, whose inputs were recorded: a B200 has 1.7× the bandwidth "
        f"per SM (8,000 GB/s ÷ 148), so at the same latency its ratio falls to ≈ {_B200_ILP4_25:.2f}, and GDDR "
        "parts reach their ceiling with few bytes in flight (ratio near 1, which says nothing about ILP)",
        families(Skip("derived only for Hopper (H100/H200), whose latency and copy ceiling are recorded; "
                      f"elsewhere the ratio depends on an unmeasured latency (B200 ≈ {_B200_ILP4_25:.2f}, GDDR "
                      "parts ≈ 1)"),
                 sm_90=0.55)),
    "occupancy.ilp4_over_ilp1": Expectation(
        "at 12.5 % occupancy, four independent FMA chains per thread beat one by ≥ 1.3×",
        "Little's law for issue (_ilp_gain): warps per scheduler at 12.5 % = max warps/SM ÷ 32; a scheduler "
        "needs FMA latency (4 cycles, assumed) × its fp32 lanes ÷ 32 warp instructions in flight. Predicted "
        "gain: 2.0 on cc 7.5, 9.0, 10.x; 2.7 on cc 8.6, 8.9, 12.0; 1.0 on cc 8.0. The kernels run 8 FMAs per "
        "chain per loop iteration (LLVM unrolls further: ≥ 8 and ≥ 32 FMAs per loop body, "
        "tests/test_occupancy_experiment.py), so the loop's counter and branch no longer bound them",
        families(1.3, sm_80=Skip(
            "an A100 SM has 64 fp32 lanes (GA100 whitepaper): 8 resident warps with one dependent chain each "
            "already cover a 4-cycle FMA latency at 12.5 % occupancy, so four chains are predicted to gain "
            "nothing (1.0×)"))),
    "occupancy.ilp4_over_ilp1.max": Expectation(
        "(upper bound of the same): the gain stays within 1.25× the latency model's maximum",
        "the same model: four chains can at most fill the issue slots one chain leaves empty, so the gain is at "
        "most _ilp_gain (2.0 on cc 7.5, 9.0, 10.x; 2.7 on cc 8.6, 8.9, 12.0); 1.25× for clock and issue "
        "noise. A larger gain means the ILP-1 kernel is bound by something other than FMA latency (the old "
        "one-FMA-per-iteration loop measured 2.96× on an H200: loop overhead)",
        families(Skip("the A100's predicted gain is 1.0: an upper bound there tests noise, not the model"),
                 **{f"sm_{a}{b}": round(1.25 * _ilp_gain((a, b)), 2) for a, b in FAMILIES if (a, b) != (8, 0)}),
        "at most"),
    "occupancy.fma_ilp4_low_over_high": Expectation(
        "four FMA chains per thread at 25 % occupancy keep ≥ 0.85× their throughput at 100 %",
        "Little's law for issue: at 25 %, 4 (cc 9.0/10.x/8.0), 3 (cc 8.6/8.9/12.0) or 2 (cc 7.5) warps per "
        "scheduler × 4 chains = 8–16 FMAs in flight against the 4 (2 on 64-lane SMs) a scheduler needs at a "
        "4-cycle latency: the fp32 pipe is already full, so more occupancy adds nothing; 0.85 for noise",
        everywhere(0.85)),
    # --- lesson 06: races -------------------------------------------------------------------------------------
    "races.privatised_over_atomic": Expectation(
        "a privatised histogram (16 bins, 10^7 items) is ≥ 3× faster than global atomics",
        "global atomics on 16 hot addresses serialise in the L2 slices that own them; privatised, each SM "
        "counts in its own shared memory in parallel (Programming Guide, 'Atomic Functions'; NVIDIA blog "
        "'GPU Pro Tip: Fast Histograms Using Shared Atomics on Maxwell'). The gain grows with the SM count; "
        "3× is asserted on families whose every part has ≥ 108 SMs (A100 108, H100 PCIe 114, H200 132, "
        "B200 148)",
        families(Skip(_SMALL_PARTS), sm_80=3.0, sm_90=3.0, sm_100=3.0, sm_103=3.0)),
    # --- lesson 07: precision ---------------------------------------------------------------------------------
    "precision.bf16_over_fp32": Expectation(
        "bf16 matmul TFLOP/s ÷ fp32 (CUDA cores) at 8192³",
        "dense bf16 tensor ÷ fp32 on the datasheets is ≥ 8× on the HBM parts (A100 312/19.5 = 16×, H100 SXM "
        "989/67 = 14.8×); GeForce Ampere, Ada and RTX Blackwell run bf16 with fp32 accumulation at half the "
        "data-centre tensor rate (whitepapers), and the RTX 4090 datasheet ratio is 165/82.6 = 2×: 1.5 "
        "leaves room for cuBLAS's efficiency at 8192",
        families(1.5, sm_75=NO_BF16_ON_TURING, sm_80=8.0, sm_90=8.0, sm_100=8.0, sm_103=8.0)),
    "precision.tf32_over_fp32": Expectation(
        "TF32 matmul TFLOP/s ÷ fp32 at 8192³",
        "dense TF32 ÷ fp32 on the datasheets: A100 156/19.5 = 8×, H100 SXM 495/67 = 7.4×; asserted at 3×",
        families(TF32_AT_FP32_RATE, sm_75=NO_BF16_ON_TURING, sm_80=3.0, sm_90=3.0, sm_100=3.0, sm_103=3.0)),
    "precision.tensor_rounding_order": Expectation(
        "relative errors order fp32 < tf32 < bf16 and fp32 < fp16 < bf16 on tensor cores (1: the order must hold)",
        "mantissa bits: fp32 23, TF32 10, fp16 10, bf16 7 (PTX ISA, 'Floating point types'): 10 bits beat 7 "
        "whether fp32 inputs are rounded or truncated to TF32 (truncation at most doubles the error: 2^-10 "
        "against bf16's 2^-8). tf32 against fp16 is not asserted: with equal mantissas the order depends on "
        "that rounding (an H100 rounds, tf32/fp16 = 0.82 at 4096, first-contact probe); the tier records it. "
        "Needs TF32 and bf16 tensor cores (Ampere and later)",
        families(1.0, sm_75=NO_BF16_ON_TURING)),
    "precision.fp8_relative_error": Expectation(
        "an fp8 (E4M3, per-tensor scaled) matmul's relative error stays < 0.1",
        "E4M3 keeps 3 mantissa bits: unit roundoff 2^-4 per input, which averages down over a dot product",
        families(0.1, sm_75=NO_FP8, sm_80=NO_FP8, sm_86=NO_FP8), "at most"),
    # --- lesson 00a: first kernels ------------------------------------------------------------------------
    "first_kernels.implicit_over_device_copies": Expectation(
        "20 SAXPY launches on NumPy arrays (implicit copies) take ≥ 2× the time of the same launches on device "
        "arrays",
        "counted copies (every copy inside both timings): 20 launches × 3 arrays × (in + back) × 16 MiB = 120 "
        "transfers over PCIe/NVLink-C2C against 2 in + 1 out; a 16 MiB SAXPY reads and writes 48 MiB in "
        "HBM/GDDR (≥ 300 GB/s on every family's parts) while "
        "the host link moves ≤ 64 GB/s (PCIe 5 x16), so each implicit copy costs more than the kernel itself",
        everywhere(2.0)),
    # --- lesson 08: feeding the GPU -------------------------------------------------------------------------
    "feeding.pinned_over_pageable": Expectation(
        "host→device GB/s of a 256 MiB copy, pinned ÷ pageable",
        "the driver stages a pageable copy through a pinned buffer (CUDA C++ Best Practices Guide, 'Pinned "
        "Memory'), so pinned never loses; by how much depends on the host, so only ≥ 1 is asserted",
        everywhere(1.0)),
    "feeding.small_copy_over_big": Expectation(
        "GB/s of a 4 KiB pinned copy ÷ a 256 MiB one",
        "a copy costs a fixed latency of several µs (CUDA C++ Best Practices Guide, 'Data Transfer Between Host "
        "and Device'); 4 KiB at ≥ 10 GB/s would take 0.4 µs, so latency dominates and the rate stays < 1/4",
        everywhere(0.25), "at most"),
    "feeding.no_sync_over_item": Expectation(
        "time per step without a host sync ÷ with .item() every step",
        "removing a synchronisation can only let the host run ahead (Programming Guide, 'Asynchronous "
        "Concurrent Execution'): ≤ 1 plus 5 % for one run's noise", everywhere(1.05), "at most"),
    "feeding.eager_over_graph_per_kernel": Expectation(
        "µs per tiny kernel of a 64-kernel chain, eager launches ÷ one CUDA graph replay",
        "a graph replay saves the host's per-launch cost (several µs: CUDA Programming Guide, 'CUDA Graphs') "
        "while a tiny kernel runs ~2 µs: 1.5× is a floor", everywhere(1.5)),
    "feeding.unfused_over_fused": Expectation(
        "time of the five-kernel elementwise chain ÷ the fused kernel, n = 2^24 float32",
        "counted: the chain moves 44 bytes of DRAM per element, the fused kernel 12 (3.7×); 2.5× leaves room "
        "for the last kernel's tail and clocks", everywhere(2.5)),
    "feeding.l2_over_dram": Expectation(
        "warm copy GB/s with the working set a quarter of the L2 ÷ 16× the L2",
        "the L2's bandwidth is about 2–3× HBM's on A100/H100 and more over GDDR (whitepapers); 1.3× is a floor. "
        "It holds only if the kernel spends its time in the L2: one pass over 13 MB was launch and drain on an "
        "H100 (1.1 TB/s against 2.3 TB/s from DRAM, first-contact probe), so l2_sweep repeats the working set "
        "inside one launch until it has moved 16× the L2",
        everywhere(1.3)),
    # --- lesson 04a: reductions ---------------------------------------------------------------------------
    "reductions.sequential_over_interleaved": Expectation(
        "sequential addressing ÷ interleaved (tid % (2s)) GB/s, 2^26 float32, 256-thread blocks",
        "counted: sequential addressing drops the integer modulo and 35 of the 47 add issues per block "
        "(lesson 04a's model); a memory-bound sum hides part of that, so only 1.2× is asserted until the "
        "first recording calibrates it", everywhere(1.2)),
    # --- lesson 04a and 04: bytes in flight (branch `ladders`, issue 38 item 2) ------------------------------
    "reductions.best_rung_over_cupy_sum": Expectation(
        "the course's best rung (the grid-stride rung) ÷ cupy.sum, GB/s, 2^26 float32 in one run",
        "Little's law: the grid-stride rung keeps four 4-byte loads in flight per resident thread for its whole "
        "life (four partial sums; the SASS issues the four LDG back to back, tests/test_hoisted_loads_sass.py): "
        "on an H200 132 SMs × 2,048 threads × 16 B = 4.33 MB (32 KiB/SM). A sum only reads, so it needs its "
        "read rate × the loaded latency in flight: at most the copy ceiling's 4,271 GB/s (cupy.sum measured "
        "4,116 at 2^26) × lesson 03's calibrated 823 ns (inflight.h200_calibration: the one-element copy's "
        "8 KiB/SM ÷ its rate, reads and writes both counted, as the ceiling counts them) = 3.52 MB. The margin "
        "is 1.23×, not more: the rung reaches 0.85 of the rate as long as the loaded latency stays under "
        "4.33 MB ÷ (0.85 × 4,271 GB/s) = 1.19 µs (tests/test_gpu_expectations.py recomputes these figures). "
        "(An earlier version divided the reads in flight by a copy's read+write rate and claimed 2.5×.) "
        "Beyond bytes in flight the rung costs little: ~1,000 block atomics and one launch against a 65 µs "
        "read. On other families: threads per SM × 16 B over the family's bandwidth per SM × latency; "
        "GDDR parts need far less. Replaces `library_over_best ≥ 0.8`, which passed whatever the best rung did "
        "(measured 1.97). Prediction, first checked on the next GPU run", everywhere(0.85)),
    "reductions.best_rung_over_library.max": Expectation(
        "the course's best rung ÷ the best library sum stays below 1.1 (the libraries are the ceiling)",
        "CUB's sum reads each element once with vectorised loads at the copy rate; a course rung 10 % faster "
        "would mean a broken measurement or a wrong sum", everywhere(1.1), "at most"),
    "tiling.tile_copy_over_ceiling": Expectation(
        "the tile copy (four loads hoisted per thread) ÷ the device's measured copy ceiling, 8192² float32",
        "Little's law as for the grid-stride reduction: 32×8 blocks, 4 loads of 4 B per thread, 2,048 threads "
        "per SM: 4.3 MB in flight on an H200, over twice what the ceiling needs; the earlier tile copy, one "
        "load in flight, measured 0.70 (H200, expectations.json). Prediction", everywhere(0.85)),
    "tiling.padded_transpose_over_best_copy": Expectation(
        "the padded transpose ÷ the course's best copy (the faster of lesson 04's tile copy and lesson 03's "
        "best_copy on the same bytes), 8192²",
        "the same four loads in flight per thread as the copy, coalesced both ways, conflict-free; what it adds "
        "is a 4 KB shared round trip and one barrier per tile, a few hundred ns of a block's life in which its "
        "loads are not in flight while the SM's other 7 blocks keep theirs. The earlier kernels (one load in "
        "flight) measured 0.81 of their tile copy on an H200. Prediction", everywhere(0.85)),
    # --- lesson 10: data-parallel training (one GPU: overlap with a side stream) ------------------------------
    "dataparallel.overlapped_over_after": Expectation(
        "step ms with each gradient copied to pinned host memory from a hook on a side stream ÷ with the copies "
        "after backward (8 fp32 4096² layers, 1,024 rows: 537 MB of gradients)",
        "the lesson's timeline model (dataparallel.predicted_overlap: H200 fp32 datasheet × 0.5, a 50 GB/s "
        "link) predicts ≈ 0.73 (26 against 35 ms); at twice the modelled compute speed ≈ 0.69; copies and "
        "kernels run on different engines (Programming Guide, 'Overlap of Data Transfer and Kernel "
        "Execution'), so 0.9 is a ceiling any family with a copy engine per direction meets",
        everywhere(0.9), "at most"),
    # --- lesson 11: tensor cores from Python (issue 49) -------------------------------------------------------
    "tensorcores.triton_over_torch": Expectation(
        "the lesson's Triton matmul (tl.dot; tile 128×128×64, 4 warps, 3 stages) ÷ torch.matmul (cuBLAS) TFLOP/s, "
        "fp16 or bf16 in (one verdict each), fp32 accumulate, 4096³",
        "on sm_90 the compiled kernel issues the same tensor-core instruction cuBLAS does (wgmma, SASS "
        "HGMMA.64x128x16.F32; in bf16 HGMMA too, with the same 96 KiB and 195 registers: "
        "data/compiled/tensorcores/compiled.json) from a 3-stage cp.async pipeline in 96 KiB "
        "of shared memory, 195 registers a thread; a 4096³ matmul is 1,024 FLOP/byte, four times right of the "
        "H200's published ridge (lesson 11's roofs), so both are compute-bound and differ only in how well the "
        "tensor cores are fed (cuBLAS adds TMA and warp specialisation); bf16 runs at fp16's rate on the tensor cores "
        "(H100 datasheet), so one threshold serves both. Issue 49 asks 0.85 of cuBLAS on H100/H200. "
        "Prediction, first checked on the next GPU run; other families are not asked until one is recorded",
        families(Skip("lesson 11's threshold is written for H100/H200 (issue 49); this family has no recording "
                      "of the kernel yet"), sm_90=0.85)),
    # --- lesson 12: attention (the Triton FlashAttention forward against SDPA's FlashAttention backend) ---------
    "attention.flash_over_sdpa": Expectation(
        "SDPA flash-backend ms ÷ the lesson's Triton FlashAttention-2 forward ms (its share of SDPA's speed), fp16, "
        "batch 4 × 16 heads, n = 4096, d = 64 and 128, causal and not (timing.GPU_SETTINGS: 128×64 tiles)",
        "both are the same algorithm with the same counted bytes and FLOPs (attention.model: 4n²d matmul FLOPs; "
        "with the L2 serving K/V re-reads, ~2,000 FLOP per byte at n = 4096, far right of the H200's fp16 ridge "
        "of 206): both are compute-bound, so the ratio is the two kernels' tensor-core and softmax efficiency. "
        "Triton's fused-attention tutorial, the same loop (128×64 tiles, 3 stages, 8 warps at d = 128), reports "
        "its throughput beside FlashAttention-2's (python/tutorials/06-fused-attention.py benchmarks against "
        "flash_attn), and FlashAttention-2 reaches 50–73 % of an A100's peak (Dao 2023, "
        "§4.1). The lesson's kernel lacks the tutorial's split of the causal loop into off-diagonal and "
        "diagonal stages (every causal tile is masked here) and the newer tutorial's warp specialisation: 0.70 leaves "
        "that room. SDPA's backend on Hopper is FlashAttention-2, not FA3 (pytorch 2.x). Prediction, first checked "
        "on the next GPU run; other families are not asserted until one is recorded",
        families(Skip("not yet derived for this family: the H100/H200 threshold comes from Triton's tutorial "
                      "benchmarks on Hopper"), sm_90=0.70)),
}


def _this_gpu() -> tuple[tuple[int, int], str]:
    info = runtime.device()
    return tuple(info.compute_capability), info.name


def expect(key: str) -> float:
    """The threshold of expectation ``key`` for this GPU's architecture, or a skip that says why."""
    expectation = EXPECTATIONS[key]
    cc, name = _this_gpu()
    arch = f"compute capability {cc[0]}.{cc[1]} ({name})"
    if cc not in FAMILIES:
        pytest.skip(f"no GPU-tier expectations are written for {arch}: add its family to "
                    "tests/gpu_expectations.py with each threshold's derivation")
    value = expectation.by_cc.get(cc)
    if value is None:
        pytest.skip(f"{key} has no threshold for {arch} in tests/gpu_expectations.py")
    if isinstance(value, Skip):
        pytest.skip(f"{key} is not asserted on {arch}, {FAMILIES[cc]}: {value.reason}")
    return value
