"""Lesson 04's rungs after register blocking: the vectorised Numba kernels and the CUDA C++ RawKernel.

In the simulator: correctness at ragged sizes, the microscope's counts against the traffic model, the
bank rule. Without a GPU, with ptxas and cuobjdump: what the compiler made of each rung (LDS.128,
no local memory, the FFMA share of the k-loop) — the evidence the lesson's ladder cites.
"""

import numpy as np
import pytest

from gpucourse.errors import InvalidConfig, NoGPU
from gpucourse.lessons import tiling
from gpucourse.lessons.tiling import compiled

RNG = np.random.default_rng(7)


def operands(m, k, n):
    return RNG.uniform(-1, 1, (m, k)).astype(np.float32), RNG.uniform(-1, 1, (k, n)).astype(np.float32)


@pytest.mark.parametrize("block_tile, thread_tile", [(64, 4), (128, 8)])
@pytest.mark.parametrize("m, k, n", [(37, 29, 41), (5, 3, 7), (64, 17, 1)])
def test_vectorised_rungs_are_right_for_ragged_sizes(block_tile, thread_tile, m, k, n):
    # k = 29: four k-tiles, the last one partial, and both shared buffers in use.
    a, b = operands(m, k, n)
    c = tiling.matmul(a, b, "vectorised", block_tile, thread_tile=thread_tile)
    np.testing.assert_allclose(c, a.astype(np.float64) @ b, atol=1e-5)


@pytest.mark.parametrize("block_tile, thread_tile, n", [(64, 4, 64), (128, 8, 40)])
def test_the_microscope_counts_the_modelled_traffic_and_the_scalar_bank_rule(block_tile, thread_tile, n):
    r = tiling.rung("vectorised", block_tile, thread_tile=thread_tile)
    counts = tiling.counted_traffic(r, n)
    assert counts["correct"]
    assert counts["counted_bytes"] == counts["model_bytes"] == tiling.matmul_traffic_bytes(r, n)
    # Each float of a B fragment seen alone: lanes 8 apart read words 32 apart, one bank (2 ways). The
    # compiler merges 4 of them into one LDS.128, served in quarter-warp phases: conflict-free (SASS below).
    assert counts["max_bank_ways"] == 2


def test_the_vectorised_rung_has_the_register_blocked_rungs_traffic():
    for bt, kt, tt in tiling.VECTORISED:
        v = tiling.rung("vectorised", bt, k_tile=kt, thread_tile=tt)
        assert tiling.matmul_traffic_bytes(v, 4096) == tiling.matmul_traffic_bytes(
            tiling.rung("register-blocked", bt, k_tile=kt, thread_tile=tt), 4096)
    assert tiling.intensity(tiling.rung("CUDA C++"), 4096) == tiling.intensity(tiling.rung("vectorised", 128,
                                                                                            thread_tile=8), 4096)


def test_the_ladder_and_launches_hold_the_new_rungs():
    labels = [r.label for r in tiling.ladder(16)]
    assert labels == ["naive", "tiled 16", "register-blocked 64/4", "vectorised 64/4", "register-blocked 128/8",
                      "vectorised 128/8", "CUDA C++ 128/8 (float4)", "cuBLAS"]
    assert tiling.rung("vectorised", 128, thread_tile=8).launch_config(4096, 4096) == ((32, 32), (256,))
    assert tiling.rung("CUDA C++").launch_config(1000, 4096) == ((32, 8), (256,))
    assert tiling.rung("vectorised", 128, thread_tile=8).shared_bytes == 16640  # ptxas: 16640 bytes smem


@pytest.mark.parametrize("args, words", [
    ((96, 8, 8), "power of two"), ((128, 8, 2), "thread_tile"), ((128, 6, 8), "power of two"),
    ((256, 8, 4), "1024"), ((64, 512, 4), "whole rounds"), ((128, 128, 4), "48 KB"),
])
def test_bad_vectorised_shapes_are_refused_in_one_line(args, words):
    with pytest.raises(InvalidConfig, match=words):
        tiling.check_vectorised(*args)


def test_the_cuda_cpp_rung_needs_a_gpu_and_float4_shapes():
    a, b = operands(8, 8, 8)
    with pytest.raises(NoGPU):
        tiling.matmul(a, b, "CUDA C++")
    from gpucourse.lessons.tiling.experiments import _check_float4_shape

    _check_float4_shape(4096, 4096, 1000)
    with pytest.raises(InvalidConfig, match="multiples of 4"):
        _check_float4_shape(4096, 1001, 4096)
    with pytest.raises(InvalidConfig, match="not a Numba kernel"):
        tiling.rung("CUDA C++").kernel()
    with pytest.raises(InvalidConfig, match="microscope"):
        tiling.counted_traffic(tiling.rung("CUDA C++"), 8)


def test_the_cuda_cpp_source_has_the_launch_shape_it_is_given():
    source = tiling.SGEMM_CUDA_SOURCE
    assert f"{tiling.SGEMM_CUDA_NAME}(const float* __restrict__ A" in source
    assert "__launch_bounds__(256)" in source and "BM = 128, BK = 8" in source
    r = tiling.rung("CUDA C++")
    assert (r.tile, r.k_tile, r.thread_tile) == (128, 8, 8) and r.launch_config(128, 128)[1] == (256,)


# --- SASS: what ptxas makes of the rungs (no GPU; needs ptxas and cuobjdump) ------------------------------


@pytest.fixture(scope="module")
def sass():
    why = compiled.tools_missing()
    if why:
        pytest.skip(why)
    return compiled.sass_table((9, 0)).set_index("rung")


def test_no_rung_spills_or_uses_local_memory(sass):
    assert (sass["spill bytes"] == 0).all() and (sass["stack frame bytes"] == 0).all(), sass
    assert (sass["LDL/STL (kernel)"] == 0).all(), sass


def test_the_vectorised_fragments_are_lds128_and_the_old_ones_are_not(sass):
    v128, v64 = sass.loc["vectorised 128/8"], sass.loc["vectorised 64/4"]
    assert (v128["loop: LDS.128"], v128["loop: LDS (4 B)"], v128["loop: FFMA"]) == (4, 0, 64)
    assert (v64["loop: LDS.128"], v64["loop: LDS (4 B)"], v64["loop: FFMA"]) == (2, 0, 16)
    # the review's diagnosis of the old rungs: 8 (16) 4-byte LDS per 16 (64) FFMA, no LDS.128
    old = sass.loc["register-blocked 64/4"]
    assert (old["loop: LDS.128"], old["loop: LDS (4 B)"], old["loop: FFMA"]) == (0, 8, 16)
    assert sass.loc["register-blocked 128/8", "loop: LDS (4 B)"] == 16
    # FFMAs per issued instruction of the k-loop: the number the GPU-tier derivation uses
    assert v128["FFMA share of the loop"] >= 0.6 > sass.loc["register-blocked 128/8", "FFMA share of the loop"]


def test_the_cuda_cpp_rung_loads_float4_and_unrolls_the_k_tile(sass):
    cpp = sass.loc["CUDA C++ 128/8 (float4)"]
    assert cpp["LDG.128 (kernel)"] >= 4  # A and B, in the prologue and the loop: 16-byte global loads
    assert (cpp["loop: FFMA"], cpp["loop: LDS.128"], cpp["loop: LDS (4 B)"]) == (512, 32, 0)
    assert cpp["FFMA share of the loop"] >= 0.8
    assert cpp["registers"] <= 128  # __launch_bounds__(256): two blocks of 256 threads fit an SM's 64 K registers


def test_a_kernel_without_lds128_fails_the_count():
    # Known-wrong case for the counter: SASS with scalar shared loads only.
    fake = ("/*0000*/ LDS R1, [R2] ;\n/*0010*/ FFMA R3, R1, R1, R3 ;\n/*0020*/ LDS.128 R4, [R2+0x10] ;\n"
            "/*0030*/ @P0 BRA 0x0 ;\n/*0040*/ EXIT ;\n")
    loop = compiled.innermost_loop(fake)
    assert (loop["LDS (4 B)"], loop["LDS.128"], loop["FFMA"], loop["instructions"]) == (1, 1, 1, 4)


def test_the_ladder_table_shows_recordings_labelled_and_predictions_as_such(monkeypatch):
    import pandas as pd

    from gpucourse.measure import reference

    data = pd.DataFrame({"n": [1024, 1024, 1024], "rung": ["tiled 32", "register-blocked 64/4", "cuBLAS"],
                         "kind": ["tiled", "register-blocked", "cuBLAS"], "gflops": [10.0, 20.0, 100.0],
                         "fraction_of_library": [0.1, 0.2, 1.0]})
    rec = reference.Recording("tiling.matmul", "test-gpu", data, {"device": {"device": "Test GPU"}},
                              reference.REFERENCE_ROOT / "test-gpu" / "tiling.matmul.csv")
    monkeypatch.setattr(reference, "load", lambda name, *a, **k: rec if name == "tiling.matmul" else None)
    table = compiled.ladder_table(sass=False).set_index("rung")
    assert table.loc["register-blocked 64/4", "of cuBLAS"] == "20%"
    assert table.loc["vectorised 128/8", "of cuBLAS"].endswith("(GPU-tier prediction, derived from this SASS)")
    assert table.loc["vectorised 64/4", "of cuBLAS"] == "not measured here"
    assert "N = 1024" in table.attrs["source"] and "Test GPU" in table.attrs["source"]
    assert set(table.index) == set(compiled.STEPS)


def test_the_ladder_table_says_why_when_the_compiler_fails(monkeypatch):
    def broken(*_a, **_k):
        raise InvalidConfig("numba-cuda could not compile the rungs to PTX here (test)")

    monkeypatch.setattr(compiled, "tools_missing", lambda: None)
    monkeypatch.setattr(compiled, "sass_table", broken)
    table = compiled.ladder_table().set_index("rung")
    assert table.loc["naive", "FFMA per shared load"].startswith("no SASS here: numba-cuda could not compile")
