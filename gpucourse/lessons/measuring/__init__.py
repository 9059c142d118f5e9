"""Lesson 00 "Start here: measuring GPU code": asynchronous launches and the device's ceilings.

* ``async_pitfall()``: the same kernel timed three ways on a GPU — the wall clock around the
  launch alone (it returns before the GPU has finished: the "thousands-fold speed-up"
  illusion), the wall clock with ``synchronize``, and device events.
* ``async_analogy()``: the same trap on the CPU in simulator mode (a background thread stands in
  for the GPU), labelled as an analogy: no GPU time is shown.
* ``roofline_figure()``: the device's two ceilings, measured (copy GB/s, matmul TFLOP/s) and
  from the datasheet, as a roofline.
"""

from __future__ import annotations

from gpucourse.lessons.measuring.experiments import (
    ROOF_PRECISIONS,
    SPIN_ITERATIONS,
    async_analogy,
    async_pitfall,
    ceilings,
    roof_precisions,
    tensor_precision,
)
from gpucourse.lessons.measuring.figures import async_figure, async_pitfall_figure, roofline_figure
from gpucourse.lessons.measuring.kernels import _spin_kernel
