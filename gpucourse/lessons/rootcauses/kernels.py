"""Lab 11's mystery code, exactly as learners read it: four kernels and two PyTorch steps, each slow
for one cause from the course's vocabulary (``model.CAUSES``). Which cause is the lab's question:
nothing here says it, and the lab's answers (the causes, the fixes) live only in the lab's solution.

Every kernel takes its output first (``out``), so a fixed kernel with the same signature can be run
on the same inputs and its output compared.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

# gpucourse/__init__ has chosen the mode before this runs. Kernels reach ``cuda`` through this
# module-level name so that the simulator (and the microscope) can swap in their own.
from numba import cuda, float32, int32

HEIGHT, WIDTH = 32, 32          # brighten: a 32×32 image, stored row by row
BINS = 8                        # tally: classes 0..7
TALLY_BLOCK = 64                # tally: threads per block
ROW = 32                        # tally: ints per thread's row of counts
STAGE_FLOATS = 12288            # flip: floats in the staging buffer
# A shared array's size must be a constant when numba-cuda compiles for a GPU (the simulator accepts
# an expression): one name for the product.
TABLE_WORDS = TALLY_BLOCK * ROW


@cuda.jit
def brighten(out, img, height, width):
    """Brighten an image stored row by row: every pixel becomes ``min(1.5 * pixel + 0.1, 1)``."""
    i = cuda.grid(1)
    if i < height * width:
        pixel = (i % height) * width + i // height
        out[pixel] = min(img[pixel] * 1.5 + 0.1, 1.0)


@cuda.jit
def tally(out, classes, per_thread):
    """Each thread counts the classes (0..BINS-1) of its ``per_thread`` items in its own row of a
    shared table, then writes its BINS counts to ``out``. Item k of thread i is
    ``classes[k * n_threads + i]``."""
    table = cuda.shared.array(TABLE_WORDS, int32)
    t = cuda.threadIdx.x
    i = cuda.grid(1)
    n_threads = cuda.gridDim.x * cuda.blockDim.x
    for b in range(BINS):
        table[t * ROW + b] = 0
    for k in range(per_thread):
        c = classes[k * n_threads + i]
        table[t * ROW + c] += 1
    for b in range(BINS):
        out[b * n_threads + i] = table[t * ROW + b]


@cuda.jit
def price_orders(out, qty, price, kind):
    """Each order line's total by its kind: 0 plain, 1 member discount, 2 with tax, 3 refund."""
    i = cuda.grid(1)
    if i < out.size:
        k = kind[i]
        if k == 0:
            out[i] = qty[i] * price[i]
        elif k == 1:
            out[i] = qty[i] * price[i] * float32(0.9)
        elif k == 2:
            out[i] = qty[i] * price[i] * float32(1.2)
        else:
            out[i] = qty[i] * price[i] * float32(-1.0)


@cuda.jit
def flip_blocks(out, a):
    """Reverse each block's chunk of ``a``, staged in shared memory."""
    stage = cuda.shared.array(STAGE_FLOATS, float32)
    t = cuda.threadIdx.x
    i = cuda.grid(1)
    stage[t] = a[i]
    cuda.syncthreads()
    out[i] = stage[cuda.blockDim.x - 1 - t]


def clipped_step(model, opt, x, y, max_norm=1.0):
    """One training step with gradient-norm clipping; returns the loss (a tensor)."""
    loss = F.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    norm = torch.sqrt(sum((p.grad ** 2).sum() for p in model.parameters()))
    for p in model.parameters():
        p.grad.div_(max(1.0, norm / max_norm))
    opt.step()
    return loss.detach()


def decay_all(params, rate):
    """Weight decay on a list of tensors, in place."""
    for p in params:
        p.mul_(1.0 - rate)
