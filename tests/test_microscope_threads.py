"""The microscope's per-thread counts of global reads and writes, and its thread × element picture."""

import numpy as np
import plotly.graph_objects as go
from numba import cuda

from gpucourse import microscope


@cuda.jit
def add_guarded(out, a, b):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = a[i] + b[i]


@cuda.jit
def reads_twice(out, a):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = a[i] * a[i]


@cuda.jit
def grid_stride(out, a):
    start, step = cuda.grid(1), cuda.gridsize(1)
    for i in range(start, out.size, step):
        out[i] = a[i]


def test_each_thread_reads_each_input_once_and_writes_once():
    n = 40
    report = microscope.trace(add_guarded, 2, 32, np.zeros(n), np.ones(n), np.ones(n))
    table = report.thread_accesses()
    assert set(table.thread) == set(range(n))  # threads 40..63 fail the guard and touch nothing
    assert (table["count"] == 1).all()
    assert report.per_thread_max("load", "a") == 1 and report.per_thread_max("load") == 2
    assert report.per_thread_max("store", "out") == 1 and report.per_thread_max("atomic") == 0
    assert table[(table.thread == 33) & (table.op == "store")].block.iloc[0] == (1, 0, 0)


def test_a_second_read_of_the_same_element_is_counted():
    report = microscope.trace(reads_twice, 1, 32, np.zeros(32), np.ones(32))
    assert report.per_thread_max("load", "a") == 2


def test_a_grid_stride_loop_gives_each_thread_several_elements():
    report = microscope.trace(grid_stride, 2, 32, np.zeros(200), np.arange(200.0))
    assert report.per_thread_max("load", "a") == 4  # 200 elements / 64 threads → at most ⌈3.1⌉
    fig = report.picture_threads("a")
    assert isinstance(fig, go.Figure)
    xs, ys = fig.data[0].x, fig.data[0].y
    assert all(x % 64 == y for x, y in zip(xs, ys, strict=True))  # element i is read by thread i mod 64
    assert sorted(xs) == list(range(200))
