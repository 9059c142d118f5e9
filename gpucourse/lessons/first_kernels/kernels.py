"""Lesson 00a "Your first kernels": exactly the kernels the lesson shows and runs.

Each kernel is a function of its thread's coordinates: ``cuda.threadIdx``, ``cuda.blockIdx`` and
``cuda.blockDim`` (``cuda.grid(1)`` is ``blockIdx.x * blockDim.x + threadIdx.x``). The same SAXPY
is also written as a CuPy ``ElementwiseKernel`` and as CUDA C++ for a CuPy ``RawKernel``.
"""

from __future__ import annotations

from numba import cuda  # after gpucourse.measure.runtime (imported by the package) chose the mode


@cuda.jit
def who_am_i(block_of, thread_of, global_of):
    """Every thread writes down its own coordinates: the block, its index in the block, and both combined."""
    i = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x  # the same as cuda.grid(1)
    if i < global_of.size:
        block_of[i] = cuda.blockIdx.x
        thread_of[i] = cuda.threadIdx.x
        global_of[i] = i


@cuda.jit
def saxpy(a, x, y, out):
    """out = a·x + y, one element per thread."""
    i = cuda.grid(1)
    if i < out.size:  # the bounds check: the last block has threads past the end
        out[i] = a * x[i] + y[i]


@cuda.jit
def saxpy_unguarded(a, x, y, out):
    """The same kernel without the bounds check: the last block's extra threads run off the arrays."""
    i = cuda.grid(1)
    out[i] = a * x[i] + y[i]


@cuda.jit
def saxpy_2d(a, x, y, out):
    """out = a·x + y for 2-D arrays: x runs along a row (columns), y down the rows."""
    col, row = cuda.grid(2)  # x first: x = column, y = row
    if row < out.shape[0] and col < out.shape[1]:
        out[row, col] = a * x[row, col] + y[row, col]


@cuda.jit
def saxpy_grid_stride(a, x, y, out):
    """A grid-stride loop: any grid covers any n; each thread takes every (grid size)-th element."""
    start = cuda.grid(1)
    stride = cuda.gridsize(1)  # blockDim.x * gridDim.x: the number of threads launched
    for i in range(start, out.size, stride):
        out[i] = a * x[i] + y[i]


# The same SAXPY for CuPy, as an ElementwiseKernel: CuPy writes the index arithmetic, the bounds
# check and the launch; you write the body for one element (C++ syntax), with typed parameters.
SAXPY_ELEMENTWISE = {
    "in_params": "float32 a, float32 x, float32 y",
    "out_params": "float32 out",
    "operation": "out = a * x + y",
    "name": "saxpy_elementwise",
}

# And as plain CUDA C++ (a CuPy RawKernel, or NVRTC, or nvcc): everything is written out.
SAXPY_CUDA_SOURCE = r"""extern "C" __global__
void saxpy(float a, const float* x, const float* y, float* out, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;   // cuda.grid(1)
    if (i < n) {                                     // the bounds check
        out[i] = a * x[i] + y[i];
    }
}
"""
