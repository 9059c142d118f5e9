"""Lesson 01 "Warps and SIMT": how a block's threads become warps and lanes, and what it costs.

* ``lane_map(block_shape)``: every thread's (x, y, z), linear index, warp and lane — the
  hardware's rule: linear = x + y·Bx + z·Bx·By, warp = linear // 32, lane = linear % 32.
* ``lane_map_figure``: that map drawn, one cell per thread, coloured and labelled by warp.
* ``staircase_figure``: time vs threads per block for a compute-bound kernel — measured on a
  GPU, else the recorded sweep — beside the model: a block costs ⌈threads/32⌉ warps.
"""

from __future__ import annotations

from gpucourse.lessons.warps.experiments import FMA_ITERATIONS, STAIRCASE_THREADS, measure_staircase
from gpucourse.lessons.warps.figures import coverage_figure, lane_map_figure, staircase_figure
from gpucourse.lessons.warps.kernels import _fma_kernel
from gpucourse.lessons.warps.model import lane_map, staircase_model, warps_per_block
