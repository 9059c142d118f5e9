# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3 (gpucourse)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 07 · Mixed precision and tensor cores
#
# **In 55 minutes you will predict what a number becomes in six formats, why fp16 training needs a
# loss scaler and bf16 does not, and what a tensor core costs you in accuracy; 19 optional minutes
# add what it buys you in speed, why a dimension of 50304 can beat 50257, and what block-scaled
# formats store.**
#
# *Teaching 33 min · exercises 22 min · optional sections (marked in their headings) 19 min ·
# prerequisites: lessons 00 (measuring) and 01 (warps); a little PyTorch.*
#
# ## Objectives
# By the end you can:
# 1. for any value, predict the value stored in fp32, tf32, bf16, fp16, fp8 E4M3 and E5M2, and say
#    when it overflows, saturates, underflows or is exact;
# 2. derive a format's range (largest, smallest normal) and precision (machine ε) from its
#    exponent and mantissa bits;
# 3. predict where a running fp16 sum stops growing, and fix it with fp32 accumulation or Kahan's
#    compensation;
# 4. explain why fp16 gradients underflow, how a loss scaler fixes it, and why bf16 needs none;
# 5. rank the matmul dtypes by error (and, in the optional section, by throughput), and choose the
#    cheapest that meets an error budget;
# 6. *(optional section)* say why a matrix dimension of 50304 can beat 50257, and check it by
#    measurement;
# 7. *(optional section)* say what MXFP8, MXFP4 and NVFP4 store, and read a quantisation error that
#    is normalised by the whole tensor.

# %%
from gpucourse.measure import runtime

runtime.banner()

# %% [markdown]
# ## Six formats, one picture
#
# A binary floating-point number is a **sign**, an **exponent** and a **mantissa** (IEEE 754-2019
# §3): value = (−1)^sign × 1.mantissa × 2^(exponent − bias). The exponent's bits buy **range** (how
# large and how small), the mantissa's bits buy **precision** (how finely the numbers are spaced).
# Each row below is one format, drawn bit by bit:
#
# <details><summary>Description of the picture</summary>
#
# Six rows of small boxes, one box per bit, one row per format: fp32, tf32, bf16, fp16, fp8_e4m3 and
# fp8_e5m2, each row labelled with its total bits. In every row the sign bit comes first, then the
# exponent bits, then the mantissa bits, each field in its own colour and labelled with its width;
# tf32's 13 dropped bits are dotted boxes. A key under the rows names the colours: sign, exponent
# (range), mantissa (precision), dropped bits.
#
# </details>

# %%
from gpucourse.lessons.precision import formats

formats.layout_figure()

# %% [markdown]
# * **fp32**: the IEEE single format, 8 + 23 bits.
# * **tf32**: not a storage format. Tensor cores in "TF32 mode" read fp32 numbers but use only the
#   top 10 mantissa bits: fp32's range with fp16's precision. Whether the 13 low bits are rounded
#   or simply dropped depends on the path (see *Explain*).
# * **bf16** ("brain float"): fp32 with the mantissa cut to 7 bits — the same range, coarse steps.
# * **fp16**: IEEE half, 5 + 10 bits: fine steps, narrow range.
# * **fp8 E4M3 and E5M2** (OCP 8-bit floating-point specification, 2023; Hopper and Ada tensor
#   cores): E4M3 has no infinity; out-of-range conversions saturate to ±448 (PTX `.satfinite`;
#   torch's cast in torch 2.13.0, the version the course pins, checked on its CPU build — other
#   versions and devices may differ, so check yours with `torch.tensor([500.0]).to(torch.float8_e4m3fn)`)
#   or give NaN (the OCP spec's non-saturating mode). E5M2 is a tiny IEEE-style format.
#
# The table is computed from the bit counts (and a test compares it with torch's and NumPy's own
# `finfo`):

# %%
formats.format_table()

# %% [markdown]
# ### Predict
# Before you use the explorer, write down what is stored for: **0.1 in bf16**, **65520 in fp16**,
# **500 in fp8 E4M3** and **1e-8 in fp16**. (Hint: what is the spacing of each format near that
# value? Which side of the largest or smallest number is it?)

# %%
prediction_stored = {"0.1 in bf16": "...", "65520 in fp16": "...", "500 in E4M3": "...", "1e-8 in fp16": "..."}

# %% [markdown]
# Now type values (press Enter): the boxes show the bits each format keeps, and each row says
# what is stored and what happened. Try `0.1`, `65504`, `65520`, `448`, `500`, `1e-8`, `2**-24`,
# `inf`. Every conversion rounds once, to nearest with ties to even (IEEE 754 §4.3.1).

# %%
formats.explorer("0.1")

# %%
from gpucourse.viz import predictions

predictions.read_back(
    prediction_stored,
    {f"{value:g} in {name}": float(formats.quantize([value], fmt)[0])
     for value, name, fmt in ((0.1, "bf16", "bf16"), (65520, "fp16", "fp16"), (500, "E4M3", "fp8_e4m3"),
                              (1e-8, "fp16", "fp16"))},
    counted="the explorer above computes each rounding exactly (IEEE 754)")

# %% [markdown]
# ## Three classic surprises
#
# ### Predict
# You add 0.1 to an fp16 running sum, again and again. Where does the sum stop growing? Is it
# below or above the true sum at that point?

# %%
prediction_running_sum = "..."  # e.g. "it stops near 2048"

# %% [markdown]
# Computed now with NumPy's IEEE half precision:

# %%
from gpucourse.lessons import precision

precision.classic_demos()

# %%
plateau, additions = precision.running_sum_plateau(0.1, "fp16")
predictions.read_back(prediction_running_sum, f"it stops at {plateau:g} after {additions} additions",
                      counted="NumPy's IEEE half precision computes it exactly here")

# %% [markdown]
# `300 * 300` is 90000, beyond fp16's largest value 65504: **overflow** to inf. `1e-8` is below
# half of fp16's smallest subnormal 2^-24 ≈ 5.96e-8: **underflow** to 0. And the running sum: from
# 256 up, fp16's numbers are 0.25 apart; 256 + 0.1 lies nearer to 256 than to 256.25, so every
# further addition rounds back to 256. The sum got there *early*: between 128 and 256 the spacing is
# 0.125, and each 0.1 was rounded **up** to a whole step.

# %% [markdown]
# ## Accumulation: the same inputs, four accumulators
#
# A reduction reads many values and keeps one running total. The inputs may be fp16; the
# question is what the **total** is kept in. Here are four Numba CUDA kernels (one thread per row;
# the running sum is saved at a few checkpoints). They run in the simulator without a GPU and
# give bit-for-bit the same results as a NumPy loop doing the same arithmetic (a test checks it).
# This one keeps the total in fp16:

# %%
print(precision.kernel_source("fp16"))

# %% [markdown]
# The second keeps it in fp32 (`total += float32(x[row, j])`) — sequential IEEE fp32, one
# rounding per addition. Tensor cores also accumulate at about fp32 width, but not as a
# sequence of IEEE fp32 additions (see *Explain*).
# The third and fourth add **Kahan's compensation** (Kahan, 1965): a second variable remembers
# the low-order part that each addition rounded away and feeds it back into the next one:

# %%
print(precision.kernel_source("fp16_kahan"))

# %% [markdown]
# `(t - total) - y` is zero in exact arithmetic, so a compiler allowed to reassociate (`fastmath`)
# deletes it; Numba's default keeps IEEE semantics, and so must you.
#
# The running sum of one repeated value first (change the value and the number of terms):

# %%
precision.running_sum_widget(0.1)

# %% [markdown]
# ### Predict
# Sum n random values from [0, 1) stored in fp16. Sketch the error of each accumulator against n
# from 2 to 4096 on log–log axes. Which lines grow? Does any stay flat?

# %%
prediction_error_vs_n = "..."

# %%
accumulation = precision.accumulation_widget("uniform", 4096)
accumulation

# %%
predictions.read_back(
    prediction_error_vs_n, counted="the chart above computes every accumulator now, in both modes",
    model="the fp16 total's error grows roughly like √n and jumps once the sum reaches 2048; "
          "fp32 grows slowly; both Kahan versions stay flat")

# %% [markdown]
# **Explain.** Each addition rounds with a relative error of at most the unit roundoff u (2^-11
# for fp16, 2^-24 for fp32). A running sum of n terms can pile up (n − 1) rounding errors: the
# classical bound is (n − 1)·u·Σ|x| (Higham, *Accuracy and Stability of Numerical Algorithms*,
# §4.2), and random errors typically grow like √n·u. In fp16 that is already 1 % after a few
# thousand terms — and worse: once the total's spacing exceeds the terms, additions are lost
# outright (choose "up to n = 16384" to watch the fp16 sum stall near 2048, where fp16's spacing
# is 2). An fp32 total keeps the error near 10^-7. Kahan's error bound is about 2u·Σ|x|,
# **independent of n**: in fp16 it brings the sum to the best an fp16 result can be (one rounding,
# ≈ u), in fp32 to ≈ 10^-8 here. That is why tensor-core matmuls are normally run with an
# accumulator of about fp32 width (fp16 and fp8 inputs may also be given an fp16 accumulator, and
# the fp32-wide one is not sequential IEEE fp32: see the Explain), why PyTorch asks cuBLAS for fp32
# accumulation in its fp16/bf16 matmuls (although by default it still allows reduced-precision
# reductions inside fp16 GEMMs:
# `torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction`), and why the cheat
# sheet among the sources says "reductions should accumulate in FP32 even when inputs are BF16".

# %% [markdown]
# ## Range: why fp16 training needs a loss scaler
#
# Gradients are often tiny. A loss that averages many outputs divides every gradient by their
# number; a model late in training has small errors. Here is a tiny model built to show this
# honestly: a two-layer MLP fitting targets of size ≈ 2^-12, the loss averaged over 4096 × 16
# outputs, so each output's gradient dL/dy is about 10^-9. It is trained with torch on the CPU;
# "fp16 storage" means every weight, activation and gradient is **rounded to fp16** where it would
# be stored, while the arithmetic stays fp32 (the tensor-core contract). Rounding is exact, so the
# underflow is real, not modelled.
#
# ### Predict
# fp16's smallest subnormal is 2^-24 ≈ 6 × 10^-8. What fraction of the dL/dy values survive as
# fp16? What does the loss do? And with bf16?

# %%
prediction_underflow = "..."

# %% [markdown]
# <details><summary>Description of the picture</summary>
#
# A line chart of the training loss divided by its first value (log axis) against the training step,
# one line each for fp32 (the reference), fp16 without a scaler, fp16 with a GradScaler and bf16
# without a scaler. Three of the lines fall together and lie on top of each other; the fp16 line
# without a scaler stays flat at 1: that run does not learn.
#
# </details>

# %%
runs = precision.train_all(steps=60)
precision.loss_curves_figure(runs=runs)

# %%
precision.underflow_table(runs)

# %%
predictions.read_back(prediction_underflow, "fp16 storage: every dL/dy entry underflows to 0, so the loss is flat; "
                      "a loss scale of 2^16 rescues it; bf16 loses none",
                      counted="the table above trains the tiny model now, in both modes")

# %% [markdown]
# With fp16 storage **every** output gradient rounds to zero, so every weight gradient is zero and
# the loss never moves. `torch.amp.GradScaler` multiplies the loss by a scale S (2^16 here) before
# the backward pass, so every gradient is S times larger and lands inside fp16's range; it divides
# the weight gradients by S (in fp32) before the optimizer step. If any gradient overflowed to inf
# it skips that step and halves S; after a run of good steps it doubles S (Micikevicius et al.,
# *Mixed Precision Training*, ICLR 2018). The fp16 + scaler curve lies on the fp32 one.
# bf16 needs no scaler: it has fp32's 8 exponent bits, down to ≈ 10^-38 (and its coarse
# mantissa costs little here).
#
# The histogram shows the gradients of the first step on a log2 scale, against a format's zones:
# values that round to 0, subnormals (fewer significant bits), the normal range, overflow. Move the
# scale: which values does 2^16 rescue in fp16? How far can you go before something overflows?
# Switch to bf16 and to fp8 E5M2 (the format proposed for gradients).

# %%
precision.gradient_widget("fp16", 0)

# %% [markdown]
# ## Tensor cores: speed by dtype *(optional, 11 min)*
#
# A tensor core multiplies small matrix tiles per instruction; the CUDA cores do one fused
# multiply-add per lane. NVIDIA's H100/H200 SXM datasheet gives (dense, no sparsity): FP32 on CUDA
# cores 67 TFLOP/s; TF32 494.7; FP16 and BF16 989.4; FP8 1978.9.
#
# ### Predict
# On an H100 or H200, a large fp32 matmul with TF32 off runs at some fraction of 67 TFLOP/s. How
# many times faster do you expect bf16? TF32? Write two ratios.

# %%
prediction_speedups = {"bf16 / fp32": "...", "tf32 / fp32": "..."}

# %% [markdown]
# Each point is a `torch.matmul` of random normal n × n matrices (never zeros: on zeros the GPU
# draws less power and can hold higher clocks, which would flatter the rate; Horace He, "Strangely,
# Matrix Multiplications on GPUs Run Faster When Given 'Predictable' Data!", 2024, measured it on
# an A100), timed by the course's harness, TFLOP/s from the counted 2n³. On a GPU it is measured
# now; without one it comes from a recording made on a real GPU. Until one exists, the long-dashed
# lines are published maxima: the "maximum achievable matmul FLOPS" Stas Bekman's ML Engineering
# book reports for bf16 and fp8 (the best of many shapes, torch.matmul, on H100/H200 SXM; not
# your GPU). The dotted lines are the datasheet figures of the GPU the numbers come from (of an H200,
# labelled as assumed, when there are none).

# %%
precision.throughput_widget()

# %% [markdown]
# <details><summary>Description of the picture</summary>
#
# A bar chart of TFLOP/s by dtype (fp32, tf32, fp16, bf16, fp8_e4m3). Hatched grey bars give the
# datasheet figure of each dtype, rising from fp32 to fp8; beside each, a blue bar gives the
# measured ceiling (the best of the sweep) with its share of the datasheet. Without a GPU or a
# recording, dotted bars give the published maximum achievable bf16 and fp8 TFLOP/s (ML Engineering
# book, H100/H200 SXM rows) beside the datasheet bars; the other dtypes have no published bar.
#
# </details>

# %%
precision.ceiling_figure()

# %%
predictions.read_back(prediction_speedups, {"bf16 / fp32": f"{989.4 / 67:.1f}× (datasheet)",
                                            "tf32 / fp32": f"{494.7 / 67:.1f}× (datasheet)"},
                      measured=precision.measured_speedups,  # the best of each on the charts above (a GPU only)
                      stands_in="the datasheet and published figures on the charts above")

# %% [markdown]
# A float32 matmul faster than 67 TFLOP/s on an H100/H200 can only be running on tensor cores:
# that is TF32. PyTorch leaves it off for matmuls; since PyTorch 2.9 the switch is
# `torch.backends.cuda.matmul.fp32_precision = "tf32"` (`"ieee"` turns it off; the older TF32
# flags are deprecated: PyTorch's "CUDA semantics" notes, TF32 section), and
# `gpucourse.measure.torch_precision` uses whichever the installed torch has. The course's GPU
# tier asserts in one run that bf16 is at least 8× and TF32 at least 3× the fp32 rate at 8192³.
#
# ## …and accuracy by dtype
#
# ### Predict
# Rank fp32, tf32, fp16, bf16 and fp8 by the relative error of C = A·B against an fp64
# reference, for random normal A and B.

# %%
prediction_accuracy_rank = "..."

# %% [markdown]
# Computed now (on the CPU here: fp32, fp16, bf16 and fp8 through torch for real; tf32 emulated by
# rounding the inputs to 10 mantissa bits, because CPUs have no TF32 mode):
#
# <details><summary>Description of the picture</summary>
#
# A bar chart on a log axis of each dtype's matmul relative error against fp64, one labelled bar per
# dtype (fp32, tf32, fp16, bf16, fp8_e4m3), with a short black dash per dtype marking the unit
# roundoff of its input format. fp32's bar is the lowest and fp8's the highest, and each bar lies
# near its own dash.
#
# </details>

# %%
errors = precision.relative_errors(256)
precision.accuracy_figure(errors)

# %%
ranked = " < ".join(errors.sort_values("relative_error").dtype.astype(str))
predictions.read_back(prediction_accuracy_rank, "each format's error follows its input's unit roundoff",
                      counted=f"computed now on the CPU, the ranking is {ranked}")

# %% [markdown]
# The error tracks the **input** format's unit roundoff (the black marks), because accumulation
# is fp32 throughout: fp32 ≈ 10^-7, tf32 and fp16 ≈ 3 × 10^-4 (same 10-bit mantissa; fp16 also
# rounds its output, so it is a little worse), bf16 ≈ 3 × 10^-3, fp8 E4M3 a few per cent even with
# per-tensor scaling (`torch.nn.functional.scaled_mm` with `ScalingType.TensorWise`). On tensor
# cores the GPU tier checks fp32 < tf32 < bf16 and fp32 < fp16 < bf16; tf32 against fp16 it only
# records, because with equal mantissas their order depends on how the library rounds fp32 inputs
# to TF32 (an H200 measured tf32 below fp16, 2.9 × 10^-4 against 3.6 × 10^-4:
# `data/reference/nvidia-h200/expectations.json`). Whether an error is acceptable depends on the
# computation: lab 07 asks you to pick the cheapest format for a budget.
#
# ## Shapes: 50257 or 50304? *(optional, 5 min)*
#
# GPT-2's vocabulary has 50257 tokens, so its output layer multiplies (tokens × 768) by
# (768 × 50257). 50257 is odd; 50304 = 64 × 786 is the next multiple of 64. Tensor cores work on
# tiles (multiples of 8 or 16 elements), and a row of 50257 bf16 values is not a multiple of 16
# bytes long, which rules out the widest loads (Hopper's tensor memory accelerator needs
# 16-byte-aligned row strides). The cheat sheet among the sources calls padding the vocabulary "a
# free speedup". The padded shape does 0.09 % more arithmetic; is it faster?
#
# ### Predict
# Ratio of TFLOP/s at N = 50304 to N = 50257 in bf16: about 1, about 1.1, or more?

# %%
prediction_vocab = "..."

# %% [markdown]
# <details><summary>Description of the picture</summary>
#
# A grouped bar chart: for each dtype (bf16, fp16) and pass (forward, input gradient), the median
# time of the LM head's matmul with vocabulary 50257 beside 50304, each bar with an error bar (the
# IQR of the timings). The caption says where the timings come from: this GPU, or the course's
# recording with its device, contract and date.
#
# </details>

# %%
from IPython.display import display

vocab_table, vocab_ratios, vocab_source = precision.vocab_result()
if vocab_ratios is not None:
    display(vocab_ratios)
    ratio = vocab_ratios.time_ratio_50257_over_50304
    print(f"time at 50257 ÷ time at 50304: {ratio.min():.1f}× to {ratio.max():.1f}× ({vocab_source})")
precision.vocab_figure()

# %%
vocab_range = precision.vocab_measured(vocab_ratios)
predictions.read_back(prediction_vocab, "about 1: the FLOP count barely changes (0.09 %); the model knows "
                      "nothing of shapes", measured=precision.vocab_measured(vocab_ratios),
                      stands_in=(f"nothing ({vocab_source})" if vocab_range is None
                                 else f"the recording's {vocab_range} ({vocab_source})"))

# %% [markdown]
# The chart is a recording of the course's own (its caption names the GPU, the contract and the
# date), not your GPU, unless you run this on one. Where it exists, the odd vocabulary is several
# times slower in both passes and both dtypes (the printed ratios), not 0.09 %: the padding's
# "free speedup" is real on that GPU, and far larger than the arithmetic suggests.

# %% [markdown]
# ## Block-scaled formats: MXFP8, MXFP4, NVFP4 *(optional, 3 min)*
#
# One scale per tensor lets one outlier push small values to zero; block scaling gives each short
# run its own scale. OCP MX v1.0 (2023): **32** elements under one **E8M0** scale (a power of two);
# MXFP8 has E4M3/E5M2 elements, MXFP4 **E2M1** (0, ±0.5, ±1, ±1.5, ±2, ±3, ±4, ±6). NVIDIA's
# **NVFP4** ("Introducing NVFP4", NVIDIA technical blog, 2025): **16** E2M1 values per **E4M3**
# scale, plus one FP32 scale a tensor. Blackwell's tensor cores apply the block scales inside the
# matmul; Hopper's cannot, so here it is exact NumPy on the same synthetic data, no timing:

# %%
precision.block_scaled_errors()

# %% [markdown]
# Block scales keep what one FP4 scale flushes to zero. MXFP8 still shows a larger relative RMS
# error than per-tensor FP8 here, yet a smaller error per element (the mean relative error column).
# The RMS is normalised by the whole tensor, and one outlier holds most of its energy; a per-tensor
# scale maps exactly that value onto 448 and stores it without error, while MXFP8 rounds it to E4M3's
# three mantissa bits. The spec's power-of-two scale can also push a block's maximum past 448, where
# it saturates, but that is a small part of the error; NVIDIA's TransformerEngine rounds the scale up
# so nothing saturates (the recipe of Mishra et al., "Recipes for Pre-training LLMs with MXFP8",
# 2025: the table's third row), and its RMS barely moves. The breakdown, computed on the same data:

# %%
precision.mxfp8_against_per_tensor()

# %% [markdown]
# ## Explain
#
# * **Formats.** IEEE 754-2019 defines binary32 and binary16, rounding to nearest with ties to
#   even and overflow to ±∞; the OCP FP8 specification (2023) defines E4M3 (no ∞, one NaN pattern,
#   largest 448) and E5M2. PTX converts to fp8 only with `.satfinite` (`cvt.rn.satfinite.e4m3x2.f32`):
#   out-of-range values clamp to the largest finite value, as torch 2.13.0's `float8_e4m3fn`
#   conversion does (checked on its CPU build).
#   TF32 is produced by `cvt.rna.tf32.f32` (ties away from zero, sm_80) or `cvt.rn` (sm_90): fp32
#   with its low 13 mantissa bits rounded off — when a kernel converts. PyTorch's
#   numerical-accuracy notes say TF32 tensor cores read "only the first 10 bits of the input
#   mantissa" (a kernel that passes fp32 straight in drops the rest: truncation), while
#   TensorFlow's documentation says fp32 inputs are rounded to 10 bits "in most cases". So two
#   libraries' TF32 results can differ in the last bit; this lesson's CPU emulation rounds to
#   nearest.
# * **Accumulation.** Higham (*Accuracy and Stability of Numerical Algorithms*, ch. 4): recursive
#   summation (n − 1)u·Σ|x|, Kahan ≈ 2u·Σ|x|. The PTX matrix instructions (`mma`, Hopper's
#   `wgmma`) take fp16/bf16/fp8 inputs with an fp32 accumulator (fp16 and fp8 inputs may also
#   accumulate in fp16). That accumulator is about fp32 wide, but the hardware does not add the
#   products one at a time with IEEE rounding: Fasi, Higham, Mikaitis and Pranesh ("Numerical
#   behavior of NVIDIA tensor cores", *PeerJ Computer Science* 7:e330, 2021) found that the V100,
#   T4 and A100 add a block of products at once, aligning them to the largest and truncating
#   rather than rounding; DeepSeek-AI's DeepSeek-V3 technical report (arXiv:2412.19437, 2024)
#   reports that FP8 GEMMs on Hopper (H800) keep only about 14 bits in the accumulation, and
#   promotes partial sums to CUDA-core fp32 every 128 elements. Lab 07's first exercise is the
#   sequential IEEE fp32 version — the one a tensor core approximates, not reproduces.
# * **Loss scaling.** Micikevicius et al. (2018) introduced fp32 master weights, fp32
#   accumulation and loss scaling for fp16 training; bf16 (Kalamkar et al., 2019) keeps fp32's
#   exponent and trains without a scaler.
# * **Throughput.** Datasheet dense rates as above. The measured ceiling is the best the library
#   reaches on random data; it sits below the datasheet, and only a measurement (the chart above,
#   on a GPU or from a recording) says by how much on a given machine.
#
# ## A story from the field
# The cheat sheet among the course's sources sorts almost every slow GPU job into three
# diagnoses; the third is "you never enabled the fast path": a model trained in fp32, so no
# tensor core ever ran. Another source, an article on GPU architecture for ML engineers, makes the
# case with a table of datasheet rates — and shows how easy it is to get them wrong: it lists the
# A100 at 77.6 TFLOP/s for FP16 "without sparsity". That is about the A100's non-tensor FP16 rate
# (78 TFLOP/s in NVIDIA's A100 whitepaper); its datasheet gives 312 dense tensor-core TFLOP/s
# (624 with sparsity). Check a rate against the datasheet, then measure.
#
# A profiler shows which path ran. In `torch.profiler` the GEMM kernel names differ between the
# CUDA-core and tensor-core paths; Nsight Compute reports the utilisation of the tensor pipe,
# which is near zero for an fp32 matmul with TF32 off. Then check the shapes: a dimension that is
# not a multiple of 8 or 16 may pick a slower kernel.

# %% [markdown]
# ## On other GPUs
# The tensor-core rates in this lesson are an H100/H200's. Elsewhere:
# * **T4 (Turing, cc 7.5)** has fp16 tensor cores only: no bf16 and no TF32 tensor cores (they
#   arrived with cc 8.0) and no fp8 (cc 8.9). On a T4, "tf32" runs as plain fp32, and a bf16 matmul,
#   if the library runs it at all, runs without tensor cores: expect fp16 to be the fast format.
#   So on a GPU below cc 8.0 the throughput chart does not time tf32 or bf16 at all: it labels them
#   "not supported before Ampere" (`precision.unsupported_dtypes`) rather than plot fp32 speed
#   under a tensor-core name, and the datasheet ratios above (14.8×, 7.4×) are an H100's, not a T4's.
# * **GeForce cards (RTX 30xx/40xx/50xx)** have bf16 and TF32 tensor cores, but run fp16/bf16 with
#   fp32 accumulation at half the rate of fp16 accumulation, TF32 at about their fp32 rate, and
#   fp64 at 1/64 of fp32 (NVIDIA's Ampere GA102, Ada and RTX Blackwell architecture whitepapers):
#   the ratios between formats are much smaller than on a data-centre GPU, and the float64
#   reference is slow.
# * Which formats a GPU has is a question of its compute capability; `precision.fp8_supported()`
#   asks the device this lesson runs on.

# %% [markdown]
# ## Key points
# * Exponent bits buy range, mantissa bits buy precision: bf16 = fp32's range with 8 significant
#   bits; fp16 = 11 significant bits but only up to 65504 and down to 6 × 10^-8; fp8 needs scaling.
# * Accumulate in fp32 (tensor cores accumulate at about fp32 width, though not as sequential IEEE
#   fp32); when even fp32 is not enough, Kahan's compensation makes the error independent of n.
#   Never let a compiler reassociate it away.
# * fp16 training needs a loss scaler because small gradients underflow; bf16 does not. On paper
#   (H100 SXM) bf16 tensor cores are ~15× the *fp32* CUDA-core rate (989.4 vs 67 TFLOP/s) and
#   ~7.4× the *bf16* CUDA-core rate (133.8 TFLOP/s, NVIDIA's Hopper whitepaper): measure yours,
#   and mind the shapes.
#
# **Next:** [lab 07](../labs/lab07_precision/lab07_precision.ipynb) — an fp16-input dot product
# with fp32 accumulation, a Kahan version, and the cheapest format for an error budget.
