"""Lesson 07 "Mixed precision and tensor cores": range, precision, accumulation, loss scaling, speed.

* Classic demos: ``classic_demos()`` runs fp16's three famous surprises for real (NumPy).
* Accumulation: Numba CUDA kernels that sum float16 inputs in fp16, in fp32, and with Kahan's
  compensation (in fp16 and in fp32): ``accumulate(x, method)``; NumPy references that do the
  same arithmetic in the same order: ``reference_accumulate``; ``accumulation_errors`` and
  ``accumulation_figure`` (error vs n), ``running_sum_figure`` (the fp16 sum that sticks).
* Range and loss scaling: ``train_tiny_model(recipe)`` trains a tiny MLP with torch on the CPU
  with every tensor stored in fp32, fp16 or bf16 (rounded exactly; arithmetic in fp32 as on
  tensor cores); its gradients underflow in fp16, a ``torch.amp.GradScaler`` fixes it, bf16
  needs none. ``loss_curves_figure``; ``gradient_histogram_figure`` (log2 bins against each
  format's range).
* Tensor cores: ``measure_matmul`` / ``matmul_sweep`` (GPU, registered as
  ``precision.matmul``), ``vocab_shape_sweep`` (N = 50304 vs 50257, ``precision.vocab_shape``),
  ``relative_errors`` (real on the CPU or GPU), ``throughput_figure`` / ``ceiling_figure``
  (measured on a GPU, else recorded, else said so; datasheet lines labelled "datasheet").
"""

from __future__ import annotations

from gpucourse.lessons.precision import formats
from gpucourse.lessons.precision.blockscaled import (  # noqa: F401
    block_scaled_errors,
    mx_quantize,
    mxfp8_against_per_tensor,
    nvfp4_quantize,
)
from gpucourse.lessons.precision.experiments import (
    LESSON,
    SWEEP_SIZES,
    VOCAB_HIDDEN,
    VOCAB_TOKENS,
    VOCABS,
    _check_shape,
    _matmul_sweep,
    fp8_supported,
    matmul_sweep,
    measure_matmul,
    relative_errors,
    vocab_shape_sweep,
)
from gpucourse.lessons.precision.figures import (
    MATMUL_LABELS,
    METHOD_LABELS,
    _room_for_caption,
    accumulation_figure,
    accumulation_widget,
    accuracy_figure,
    ceiling_figure,
    dot_errors_figure,
    gradient_histogram_figure,
    gradient_widget,
    loss_curves_figure,
    measured_speedups,
    running_sum_figure,
    running_sum_widget,
    throughput_figure,
    throughput_widget,
    vocab_figure,
    vocab_result,
)
from gpucourse.lessons.precision.kernels import (
    sum_fp16_kernel,
    sum_fp32_kernel,
    sum_kahan_fp16_kernel,
    sum_kahan_fp32_kernel,
)
from gpucourse.lessons.precision.model import (
    DATA_KINDS,
    DATASHEET_FALLBACK_DEVICE,
    DOT_KINDS,
    KERNELS,
    MATMUL_DTYPES,
    METHODS,
    RECIPE_LABELS,
    RECIPES,
    SIM_MAX_ELEMENTS,
    THREADS_PER_BLOCK,
    TinyProblem,
    TrainingRun,
    accumulate,
    accumulation_errors,
    ceiling_table,
    classic_demos,
    datasheet_tflops,
    dot_errors,
    dot_inputs,
    exact_dots,
    exact_sums,
    format_zones,
    gradient_sample,
    kernel_source,
    log2_histogram,
    make_data,
    reference_accumulate,
    running_sum_plateau,
    train_all,
    train_tiny_model,
    underflow_share,
    underflow_table,
    unsupported_dtypes,
    vocab_measured,
    vocab_ratios,
)
