"""One source for the hardware facts: the occupancy calculator and the microscope agree."""

from pathlib import Path

from gpucourse import hardware, validate
from gpucourse.lessons.occupancy import calculator as occupancy
from gpucourse.microscope import limits

ROOT = Path(__file__).resolve().parents[1]


def test_the_calculator_and_the_microscope_know_the_same_compute_capabilities():
    assert set(occupancy.SUPPORTED_CCS) == set(limits.ARCHS) == set(hardware.COMPUTE_CAPABILITIES)


def test_the_calculator_and_the_microscope_agree_on_shared_memory_per_block():
    for cc in hardware.COMPUTE_CAPABILITIES:
        calculator = occupancy.architecture(cc).shared_per_block_optin_bytes
        assert limits.arch(cc).max_shared_bytes_opt_in == calculator, cc
        assert limits.arch(cc).max_static_shared_bytes == occupancy.DEFAULT_SHARED_PER_BLOCK_BYTES == 48 * 1024


def test_the_opt_in_maxima_per_compute_capability():
    # CUDA C++ Programming Guide, "Technical Specifications per Compute Capability": maximum shared
    # memory per block (with the opt-in), KiB.
    expected_kib = {(7, 0): 96, (7, 5): 64, (8, 0): 163, (8, 6): 99, (8, 7): 163, (8, 9): 99, (9, 0): 227,
                    (10, 0): 227, (10, 3): 227, (12, 0): 99}
    assert {cc: a.max_shared_bytes_opt_in // 1024 for cc, a in limits.ARCHS.items()} == expected_kib


def test_launch_limits_are_the_same_everywhere():
    assert validate.MAX_THREADS_PER_BLOCK == occupancy.MAX_THREADS_PER_BLOCK == 1024
    assert validate.MAX_BLOCK_DIM == limits.arch().max_block_dim == (1024, 1024, 64)
    assert validate.MAX_GRID_DIM == limits.arch().max_grid_dim == (2**31 - 1, 65535, 65535)
    assert limits.arch().max_threads_per_block == 1024


def test_hardware_facts_are_defined_once():
    """No module keeps its own copy of a fact that gpucourse/hardware.py holds."""
    facts = ("WARP_SIZE", "MAX_THREADS_PER_BLOCK", "MAX_BLOCK_DIM", "MAX_GRID_DIM")
    copies = [f"{path.relative_to(ROOT)}: {line}" for path in sorted((ROOT / "gpucourse").rglob("*.py"))
              for line in path.read_text().splitlines()
              if line.split("=")[0].strip() in facts and "=" in line and "==" not in line]
    assert [copy.split(":")[0] for copy in copies] == ["gpucourse/hardware.py"] * len(facts), copies
    assert hardware.WARP_SIZE == 32


def other_gpus_note(lesson: str) -> str:
    text = (ROOT / "notebooks" / f"{lesson}.py").read_text()
    start = text.index("# ## On other GPUs")
    return text[start:text.index("# %%", start)]


def test_the_lessons_say_what_changes_on_a_t4_and_on_geforce_cards():
    t4 = hardware.COMPUTE_CAPABILITIES[(7, 5)]
    note = other_gpus_note("05_occupancy")
    assert f"{t4.max_threads_per_sm:,} threads ({t4.max_warps_per_sm} warps) and {t4.max_blocks_per_sm} blocks" in note
    assert f"{t4.shared_per_sm_bytes // 1024} KB of shared memory per SM" in note
    ada = hardware.COMPUTE_CAPABILITIES[(8, 9)]
    assert f"{ada.max_threads_per_sm:,} threads ({ada.max_warps_per_sm} warps)" in note
    assert f"{t4.shared_per_sm_bytes // 1024} KB of shared memory per SM" in other_gpus_note("04_shared_memory")
    precision_note = other_gpus_note("07_precision")
    assert "no bf16 and no TF32 tensor cores" in precision_note and "1/64 of fp32" in precision_note
    assert "1/64" in other_gpus_note("04_shared_memory")
