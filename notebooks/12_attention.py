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
# # 12 · Attention: FlashAttention from the roofline down
#
# **Attention is two matrix multiplications with a softmax between them, and written naively it is limited by
# memory, not by the tensor cores. In this lesson you will count, exactly, the bytes naive attention moves
# against FlashAttention's, check the online softmax that makes FlashAttention possible, run a FlashAttention
# forward written in Triton, and place both on the roofline — then, on a GPU, race it against PyTorch's own.**
#
# *49 minutes — objectives and the picture 5, §1 naive attention's bytes 11, §2 online softmax 7, §3
# FlashAttention in Triton 10, §4 the roofline 13, §5 against PyTorch's SDPA 2, key points 1 — then lab 13
# "Online softmax and one flash tile" · prerequisites: lesson 11 "Tensor cores from Python" (`tl.dot`,
# Triton's interpreter), lesson 04 (tiling), lesson 04a (reductions), lesson 00 (the roofline).* This is the
# course's capstone: it uses all of them at once.
#
# ## Objectives
# By the end you can:
# 1. count the HBM bytes of naive attention (the n × n matrices S and P written and read back) and of the
#    FlashAttention-2 forward (Q, K, V read, O written; K and V re-read once per Q tile), from the shapes and
#    the tiles alone;
# 2. compute a softmax one block of columns at a time — a running maximum, a running sum and a rescaling —
#    and check that it equals the whole-row softmax;
# 3. read a FlashAttention forward written in Triton, run it in Triton's interpreter, and check it against
#    `torch.nn.functional.scaled_dot_product_attention`;
# 4. place naive attention and FlashAttention on the roofline, and say what moves FlashAttention's point:
#    the Q tile's rows, and whether the L2 serves the re-reads of K and V.
#
# Without a GPU everything here except §5's timing runs: the byte counts are exact, the online softmax is
# NumPy, and Triton's interpreter runs the kernel on this CPU (slowly: its seconds are never a GPU's).

# %%
from gpucourse.measure import runtime

runtime.banner()

# %% [markdown]
# ## The picture: the score matrix in tiles (2 min)
#
# Attention computes O = softmax(Q·Kᵀ/√d)·V for each (batch, head): Q, K and V are n × d (n tokens, head
# dimension d), and the scores S = Q·Kᵀ/√d are n × n. FlashAttention never stores S. It cuts Q into tiles of
# `br` rows — one program each — and walks K and V in tiles of `bc` rows: each square below is one
# `br × bc` block of scores, computed in registers and forgotten. With a **causal** mask (token r sees tokens
# 0 … r) the tiles wholly above the diagonal are skipped.
#
# <details><summary>Description of the picture</summary>
#
# A grid of squares, Q tiles down the y axis and K/V tiles along the x axis. Squares on and below the diagonal
# are dark blue and labelled "computed"; squares above it are light grey and labelled "skipped". The title
# gives how many of the tiles are computed.
#
# </details>

# %%
from gpucourse.lessons.attention import figures

figures.tiles_figure()

# %% [markdown]
# ## 1 · Naive attention's bytes (11 min)
#
# The naive way is three kernels, each reading its inputs from HBM and writing its output back: S = Q·Kᵀ
# (read Q and K, write S), P = softmax(S) (read S, write P), O = P·V (read P and V, write O). S and P are
# n × n: for long sequences they dwarf Q, K, V and O. Per (batch, head), in elements:
# 2nd + n² for the first kernel, 2n² for the second, n² + 2nd for the third — **4n² + 4nd** in all, times
# the bytes per element. A causal mask changes nothing here: the naive kernels still write and read every
# element of S and P.
#
# FlashAttention-2 reads each Q tile once, and for every Q tile reads the K and V tiles it needs; it writes
# O once, and one fp32 number per row (the logsumexp, which the backward pass needs). Not causal, each of the
# ⌈n/br⌉ Q tiles reads all of K and all of V: **2nd + 2nd·⌈n/br⌉** elements and 4n bytes of logsumexp.
# Its extra memory is linear in n; naive attention's is quadratic.
#
# ### Predict
# One head, n = 4096 tokens, d = 64, fp16, 64-row Q tiles, not causal, no cache: how many MB does naive
# attention move, and how many does FlashAttention? What is their ratio?

# %%
prediction_naive_mb, prediction_flash_mb = ..., ...

# %%
from gpucourse.lessons.attention import model

model.naive_traffic(4096, 64, "fp16")

# %%
from gpucourse.viz import predictions

naive_mb, flash_mb = model.naive_bytes(4096, 64, "fp16") / 1e6, model.flash_bytes(4096, 64, 64, 64, "fp16") / 1e6
predictions.read_back({"naive": prediction_naive_mb, "FlashAttention": prediction_flash_mb},
                      {"naive": round(naive_mb, 1), "FlashAttention": round(flash_mb, 1)}, unit="MB",
                      counted=f"counted from the shapes and tiles: a ratio of {naive_mb / flash_mb:.2f}, and "
                              f"{model.compulsory_bytes(4096, 64, 'fp16') / 1e6:.1f} MB if the L2 served every "
                              f"re-read of K and V")

# %% [markdown]
# Only half the bytes? For large n both counts grow as n²: naive as 4n², FlashAttention (no cache) as
# 2d·n²/br. Their ratio tends to 2·br/d — with 64-row tiles and d = 64, that is 2. The chart shows it for
# every n. The tiles alone do not make FlashAttention cheap in bytes; two other things do. Its K and V
# re-reads are the same K and V for every Q tile of a head — 1.0 MB at n = 4096, d = 64 in fp16, which the L2
# (tens of MB) keeps: then only the compulsory bytes reach HBM, the lowest line. And it never needs S and P in
# memory at all, which is what lets it run at sequence lengths where naive attention's n² matrices would not
# fit.
#
# <details><summary>Description of the picture</summary>
#
# A log-log chart of bytes per head against the sequence length, from 256 to 65,536 tokens. Three lines:
# naive attention on top, FlashAttention without the L2 just below it and parallel (a constant factor of
# about 2 lower), both rising with slope 2; the compulsory bytes far below, rising with slope 1.
#
# </details>

# %%
figures.bytes_figure()

# %% [markdown]
# What FlashAttention saves beyond bytes moved is memory held. Naive attention keeps S and P, 2n² elements per
# head; FlashAttention only the logsumexp, one fp32 number per row:

# %%
figures.extra_memory_table()

# %% [markdown]
# At 65,536 tokens naive attention would hold 17 GB of S and P for **one** head (a model has dozens, times the
# batch), while FlashAttention holds a quarter of a megabyte. That, more than the bytes, made long contexts
# practical.

# %% [markdown]
# ## 2 · Online softmax (7 min)
#
# FlashAttention's difficulty is the softmax. Each row of P = softmax(S) needs the row's maximum (subtracted
# so that `exp` does not overflow) and the row's sum (the divisor) — both depend on the **whole** row, which
# FlashAttention never holds. First, why the maximum is subtracted at all:

# %%
import numpy as np

from gpucourse.lessons.attention import online

big_scores = np.array([[10.0, 20.0, 100.0]], dtype=np.float32)
{"naive e^S / Σ e^S": online.naive_softmax(big_scores), "stable": online.softmax(big_scores)}

# %% [markdown]
# `e^100` is about 2.7 × 10⁴³, beyond float32's largest number (3.4 × 10³⁸): the naive softmax gives inf ÷
# inf = nan. Subtracting the maximum changes no result (the factor e^(−max) cancels between the numerator and
# the sum) and keeps every exponent ≤ 0.
#
# The **online** softmax keeps three running quantities per row while it walks the blocks of columns: the
# maximum so far m, the sum so far l = Σ e^(s − m), and the output so far acc = Σ e^(s − m)·v, not yet divided
# by l. When a new block brings a larger maximum m_new, everything summed so far was computed against the old
# m and is too large by e^(m_new − m); it is rescaled by α = e^(m − m_new):
#
#     m_new = max(m, rowmax(S_j))
#     l_new = α · l + rowsum(e^(S_j − m_new))
#     acc_new = α · acc + e^(S_j − m_new) · V_j
#
# and at the end O = acc / l, logsumexp = m + ln l. That is `online.tile_step`; lab 13 asks you to write it.
#
# ### Predict
# A row has seen one block with maximum m = 2 and sum l = 3. The next block's largest score is 5. By what
# factor α are l and acc multiplied before the new block's terms are added?

# %%
prediction_alpha = ...

# %%
m, total, acc = online.tile_step(np.array([2.0]), np.array([3.0]), np.zeros((1, 1)), np.array([[5.0]]),
                                 np.array([[1.0]]))
predictions.read_back(prediction_alpha, round(float(np.exp(2.0 - 5.0)), 4),
                      counted=f"tile_step gives m = {m[0]:g} and l = 3·α + e^0 = {total[0]:.4f}: the old sum "
                              f"shrinks by α = e^(2 − 5) and the new block adds 1")

# %% [markdown]
# Now the check that matters: attention through the online softmax, 64 columns at a time, against the
# whole-row softmax, on random inputs in float64 (causal, so rows start with masked −inf scores):

# %%
figures.online_check()

# %% [markdown]
# The differences are at float64's rounding level: the online form is not an approximation, only a different
# order of the same sums. FlashAttention's forward is this loop, with S_j = Q_tile·K_jᵀ computed by the tensor
# cores one tile at a time.
#
# ## 3 · The FlashAttention forward in Triton (10 min)
#
# Here is the kernel, as `experiments.flash_attention` launches it: one program per (Q tile, batch·head). It
# loads its Q tile once; walks K and V (causal: only up to its diagonal); keeps m, l and acc in registers; and
# writes O and the logsumexp once. Scores are kept in base 2 (`exp2` of the scores times log₂ e, as
# FlashAttention-2 and Triton's tutorial do): the same softmax with one multiply fewer. Masked rows and
# columns past the sequence's end give −inf scores, so any n works.

# %%
import inspect

from gpucourse.lessons.attention import kernels

print(inspect.getsource(kernels.flash_forward_kernel))

# %% [markdown]
# Three things to find in it: the two `tl.dot` calls (lesson 11's tensor-core matmul: Q·Kᵀ and P·V); the
# rescaling by `alpha` of `l` and `acc` (§2's recurrence); and `p.to(v.dtype)` — P goes into the second matmul
# in the inputs' precision, fp16 here, with fp32 accumulation (lesson 07).
#
# ### Predict
# One head, n = 256, d = 64, fp16, 32 × 32 tiles, not causal: how many bytes do the kernel's loads read?
# (Q once, K and V once per Q tile.)

# %%
prediction_bytes_read = ...

# %% [markdown]
# The next cell runs a few cases in Triton's interpreter on this CPU (a few seconds): each against
# `scaled_dot_product_attention` (the errors, and whether they lie within fp16's or fp32's tolerance), with the
# bytes its loads and stores really moved, counted by wrapping the interpreter's masked loads and stores. Where
# Triton cannot be installed (macOS, Windows: it ships Linux wheels only) the cell shows a committed recording
# of the same cases instead, and says so in its caption. On a GPU the kernel is compiled, not interpreted: the
# errors are measured there, and the bytes come from the recording (only the interpreter counts them).

# %%
results, results_source = figures.interpreter_results()
print(results_source)
results

# %% [markdown]
# Each case's counted bytes against the model's count (`model.flash_traffic`, times batch·heads):

# %%
figures.traffic_check(results)

# %%
first = results.iloc[0]
predicted_read = model.flash_traffic(256, 64, 32, 32, "fp16")
predictions.read_back(prediction_bytes_read, sum(v for k, v in predicted_read.items() if k.startswith("read")),
                      unit="B", counted=f"the interpreter counted {int(first['bytes read']):,} B read and "
                                        f"{int(first['bytes written']):,} B written for that case")

# %% [markdown]
# The model's count and the interpreter's agree to the byte, causal cases and a partial last tile (n = 200)
# included: the model is the kernel's own loop bounds. Every case is within tolerance of SDPA. The
# interpreter's seconds are NumPy's on one CPU core, not the kernel's speed: §5 times it on a GPU.
#
# Bad input is refused before anything launches, in one line. One refusal is worth reading: the interpreter
# computes a bf16 `tl.dot` silently wrong (Triton 3.7 and 3.9), so in the interpreter the runner refuses bf16
# rather than show a wrong answer; on a GPU bf16 runs.

# %%
from gpucourse.errors import CourseError
from gpucourse.lessons.attention import experiments

try:  # the interpreter's checks, in any mode (on a GPU the same inputs would run, compiled)
    experiments.check_inputs(*experiments.random_qkv(1, 1, 64, 64, "bfloat16"), 32, 32, interpreted=True)
except CourseError as refusal:
    print(refusal)

# %% [markdown]
# ## 4 · The roofline (13 min)
#
# Lesson 00's roofline: a kernel is memory-bound when its arithmetic intensity (FLOP per byte) lies left of the
# ridge point (peak FLOP/s ÷ bandwidth), compute-bound right of it. Attention's FLOPs are its two matmuls,
# 4n²d per head; its bytes are §1's.
#
# ### Predict
# On the H200 (fp16 ridge from its datasheet below), n = 4096, d = 64, 64-row tiles: which of naive attention,
# FlashAttention without the L2, and FlashAttention with K and V re-read from the L2 is compute-bound?

# %%
prediction_compute_bound = "..."  # naive, flash (no L2), flash (L2), or several

# %%
placements = figures.placements_table(4096, 64, 64, 64, "fp16", gpu=figures.GPU)
placements

# %%
bound = placements.set_index("what")["bound"]
predictions.read_back(prediction_compute_bound,
                      ", ".join(w for w, b in bound.items() if b == "compute-bound") or "none",
                      counted=f"the ridge is {placements['ridge (FLOP per byte)'].iloc[0]:g} FLOP per byte")

# %% [markdown]
# <details><summary>Description of the picture</summary>
#
# A log-log roofline: attainable fp16 TFLOP/s against FLOP per byte, a sloped line meeting a flat roof at the
# ridge. Naive attention's point sits on the slope, far left; FlashAttention without the L2 on the slope, to
# its right; FlashAttention with the L2 serving the re-reads on the flat roof, far right.
#
# </details>

# %%
figures.roofline_figure(4096, 64, 64, 64, "fp16", gpu=figures.GPU)

# %% [markdown]
# **Explain.** Naive attention's intensity is 4n²d FLOPs over about 4n² elements: d/2 FLOP per fp16 byte
# whatever n — memory-bound for every head dimension in use. FlashAttention without the L2 has 4n²d FLOPs over
# about 2d·n²/br elements: br FLOP per fp16 byte — the **Q tile's rows** set the intensity, which is why
# FlashAttention makes its Q tiles as tall as registers allow (128 rows on Hopper):

# %%
figures.intensity_by_tile(4096, 64, "fp16", gpu=figures.GPU)

# %% [markdown]
# Even 128-row tiles stay left of the H200's ridge if every re-read goes to HBM. With the L2 serving the
# re-reads, only the compulsory bytes are left, and FlashAttention is compute-bound: its speed is then the
# tensor cores' and the softmax's. That is where FlashAttention-2 (work split, fewer non-matmul operations),
# FlashAttention-3 (Hopper: wgmma, TMA, warp specialisation) and FlashAttention-4 (Blackwell) spend their
# effort.
#
# Now move the sequence length, the head dimension, the tile and the causal mask. On a GPU the chart also
# times the Triton kernel and SDPA's FlashAttention backend at those values (4 × 16 heads, fp16) and puts
# their achieved TFLOP/s on the roofline.
#
# <details><summary>Description of the picture</summary>
#
# A slider for n, dropdowns for the head dimension and the Q tile's rows, a causal checkbox, above the same
# roofline chart for the chosen values; the legend gives each point's FLOP per byte and whether it is
# memory- or compute-bound. On a GPU two more points show the measured kernel and SDPA, with their times.
#
# </details>

# %%
figures.attention_explorer()

# %% [markdown]
# ## 5 · Against PyTorch's SDPA (2 min)
#
# `torch.nn.functional.scaled_dot_product_attention` picks a backend — FlashAttention-2 on Ampere and later
# for fp16 and bf16, memory-efficient attention, or the plain math — and §3 checked our kernel against it on
# the CPU. On a GPU the next cell times both at n = 4096, d = 64, fp16, under the course's harness (the kernel
# is checked against SDPA before it is timed). The course's GPU tier expects the lesson's kernel to reach at
# least 0.70 of SDPA's FlashAttention speed there on an H100 or H200 (tests/gpu_expectations.py says why).
# Without a GPU the cell says so in one line.

# %%
from gpucourse.lessons.attention import timing

if runtime.is_gpu():
    print(timing.against_sdpa(4096, 64, causal=False))
else:
    print(timing.NO_GPU)

# %% [markdown]
# ## Key points
# * Naive attention writes and reads the n × n matrices S and P: 4n² + 4nd elements per head, d/2 FLOP per
#   fp16 byte — memory-bound whatever n.
# * The online softmax (running maximum, running sum, rescaling by e^(m − m_new)) computes the exact softmax one
#   block of columns at a time; it is what lets FlashAttention keep S in registers.
# * FlashAttention's bytes are Q, K, V and O plus K and V re-read once per Q tile: br FLOP per fp16 byte without
#   a cache, compute-bound once the L2 serves the re-reads. Its extra memory is linear in n.
# * Count first, then measure: the interpreter's byte count equals the model's, and the kernel equals SDPA.
#
# **Next:** lab 13 "Online softmax and one flash tile" (`lab13_attention`): write `tile_step`, the online
# softmax's recurrence, and one FlashAttention tile step, checked against the whole-row softmax.
