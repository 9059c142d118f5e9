"""Lesson 00a on a real GPU: the same SAXPY as Numba, CuPy ElementwiseKernel and CUDA C++ RawKernel
gives the float64 reference's answer, and keeping arrays on the device beats NumPy arguments copied at
every launch (a ratio of two measurements made in one run)."""

import pytest
from gpu_expectations import expect

from gpucourse.lessons import first_kernels

pytestmark = pytest.mark.gpu


def test_all_three_ways_agree_with_the_reference():
    table = first_kernels.three_ways(1 << 20)
    assert table.correct.all(), table
    assert len(table) == 3


def test_device_arrays_beat_implicit_copies():
    table = first_kernels.transfer_timings(n=1 << 22, launches=20)
    numpy_ms, device_ms = table.median_ms
    assert numpy_ms >= expect("first_kernels.implicit_over_device_copies") * device_ms, table
