"""Lesson 00a: the launch arithmetic against hand-worked numbers, the kernels against NumPy, the
microscope's per-thread counts of each kernel, and the CUDA C++ and Numba PTX compiled without a GPU."""

import pytest

from gpucourse.errors import InvalidConfig
from gpucourse.lessons import first_kernels as fk
from gpucourse.measure import runtime


def test_launch_arithmetic_by_hand():
    assert fk.launch_plan(200, 64) == {"n": 200, "threads_per_block": 64, "blocks": 4, "threads_launched": 256,
                                       "threads_past_the_end": 56}
    assert fk.blocks_for(256, 128) == 2 and fk.blocks_for(257, 128) == 3 and fk.blocks_for(1, 1024) == 1
    assert fk.grid_2d(20, 40, 16, 8) == {"grid": (3, 3), "block": (16, 8), "threads_launched": 1152,
                                         "idle_threads": 352}
    assert fk.elements_per_thread(300, 64) == (4, 5)
    numpy_args = fk.transfers(20, 2, 1, device_resident=False).iloc[0]
    device_args = fk.transfers(20, 2, 1, device_resident=True).iloc[0]
    assert (numpy_args["copies to the device"], numpy_args["copies to the host"]) == (60, 60)
    # device arrays: x and y copied in once, out allocated on the device (no copy), out copied back once
    assert (device_args["copies to the device"], device_args["copies to the host"]) == (2, 1)


@pytest.mark.parametrize("bad", [lambda: fk.blocks_for(0, 32), lambda: fk.blocks_for(10, 1025),
                                 lambda: fk.grid_2d(4, 4, 0, 4), lambda: fk.coordinates_table(0, 8),
                                 lambda: fk.trace_saxpy(5000, 64), lambda: fk.nvrtc_ptx(cc=(3, 0))])
def test_bad_input_is_refused_before_any_launch(bad):
    with pytest.raises(InvalidConfig):
        bad()


def test_each_thread_writes_its_own_coordinates():
    table = fk.coordinates_table(3, 8)
    assert table.loc[13, "blockIdx.x"] == 1 and table.loc[13, "threadIdx.x"] == 5
    assert (table["cuda.grid(1)"] == table.element).all()


def test_saxpy_and_its_variants_are_right_and_touch_each_element_once():
    assert fk.run_saxpy(1000, 128)["correct"]
    assert fk.run_saxpy(77, 32, kernel=fk.saxpy_grid_stride)["correct"]
    report = fk.trace_saxpy(200, 64)
    table = report.thread_accesses()
    assert table.thread.nunique() == 200  # the 56 threads past the end touch nothing
    assert report.per_thread_max("load", "x") == 1 and report.per_thread_max("store", "out") == 1
    strided = fk.trace_grid_stride(300, 2, 32)
    assert strided.per_thread_max("load", "x") == 5
    assert fk.trace_saxpy_2d(20, 40, 16, 8).thread_accesses().query("op == 'store'").thread.nunique() == 800


def test_the_missing_bounds_check_is_reported_as_an_access_out_of_bounds():
    message = fk.out_of_bounds(200, 64)
    assert "index 200 is out of bounds" in message and "block (3, 0, 0)" in message
    assert "no access out of bounds" in fk.out_of_bounds(256, 64)


def test_the_three_ways_table_in_this_mode():
    table = fk.three_ways(1000)
    assert list(table.way) == ["Numba @cuda.jit", "CuPy ElementwiseKernel", "CUDA C++ RawKernel"]
    assert table.correct.iloc[0]


def test_cuda_cpp_and_numba_compile_to_the_same_memory_instructions_without_a_gpu():
    cpp = fk.nvrtc_ptx(cc=(9, 0))
    assert ".target sm_90" in cpp and ".entry saxpy" in cpp
    expected = {"ld.global": 2, "st.global": 1, "fma": 1}
    assert fk.ptx_instruction_counts(cpp) == expected
    assert fk.ptx_instruction_counts(fk.numba_ptx(cc=(9, 0))) == expected
    assert "_Z" not in fk.ptx_body(fk.numba_ptx(cc=(9, 0)))  # mangled parameter names shortened
    with pytest.raises(InvalidConfig, match="NVRTC could not compile"):
        fk.nvrtc_ptx("this is not C++")


@pytest.mark.skipif(runtime.is_gpu(), reason="on a GPU the loops are timed")
def test_copies_without_a_gpu_are_counted_not_timed():
    table = fk.transfer_timings(n=1024, launches=5)
    assert list(table["copies to the device"]) == [15, 2]
    assert table.median_ms.isna().all() and "model" in table.source.iloc[0]


def test_ptx_counts_say_when_a_compiler_is_missing_instead_of_failing(monkeypatch):
    """On macOS or Windows (no CUDA packages) the lesson's PTX cell tells the learner, it does not raise."""
    from gpucourse.errors import InvalidConfig
    from gpucourse.lessons.first_kernels import experiments

    def missing(cc=(9, 0)):
        raise InvalidConfig("NVRTC is not installed here (cuda-bindings): No module named 'cuda'")

    monkeypatch.setattr(experiments, "nvrtc_ptx", missing)
    monkeypatch.setattr(experiments, "numba_ptx", lambda cc=(9, 0): "ld.global.f32 a;\nld.global.f32 b;\n"
                        "fma.rn.f32 c;\nst.global.f32 d;\n")
    counts = experiments.ptx_counts_side_by_side()
    assert counts["Numba"] == {"ld.global": 2, "st.global": 1, "fma": 1}
    assert isinstance(counts["CUDA C++ (NVRTC)"], str) and "NVRTC cannot compile here" in counts["CUDA C++ (NVRTC)"]


def test_lesson_text_agrees_with_the_model_and_the_compilers():
    """The review's 00a findings, as the learner reads them: the copy counts in the figure's description are
    the model's; the simulator is "correct to rounding" (one FMA on a GPU), never "exact"; only the Numba and
    CUDA C++ PTX are compiled, so only they are claimed to be the same; the microscope is defined where it
    first appears."""
    from gpucourse.tooling.build import ROOT

    text = (ROOT / "notebooks" / "00a_first_kernels.py").read_text(encoding="utf-8")
    device = fk.transfers(20, 2, 1, device_resident=True).iloc[0]
    numpy_args = fk.transfers(20, 2, 1, device_resident=False).iloc[0]
    assert (f"NumPy\n# arrays: {numpy_args['copies to the device']} copies to the device and "
            f"{numpy_args['copies to the host']} to the host") in text
    assert (f"Device arrays: {device['copies to the device']} to the device and {device['copies to the host']} "
            "to the host") in text
    assert "exact\n# results" not in text and "(exact" not in text and "correct to rounding" in text
    assert "ElementwiseKernel` and CUDA C++ compile to the same" not in text
    first = text.index("microscope")
    assert "tracing" in text[first: first + 300] and "records every memory access" in text[first: first + 400]
