"""Capstone "Attention": naive attention's HBM bytes against FlashAttention's, counted exactly from the shapes and
tiles; online softmax (running maximum and rescaling) in NumPy; a FlashAttention-2 forward in Triton, run by
Triton's interpreter without a GPU and compared with ``torch.nn.functional.scaled_dot_product_attention``; where
each lands on the roofline.

``kernels`` holds the Triton kernel learners read; ``online`` the NumPy online softmax (``tile_step``: one step,
which a lab grades); ``model`` the counted bytes, FLOPs and intensities; ``experiments`` the runner and the
comparison with SDPA.
"""

from gpucourse.lessons.attention.experiments import (
    BF16_REFUSED,
    MAX_INTERPRETED_SCORES,
    check_inputs,
    compare_with_sdpa,
    compiled_kernel,
    flash_attention,
    interpretable_language,
    interpreted_kernel,
    random_qkv,
    sdpa_reference,
    traffic_in_interpreter,
)
from gpucourse.lessons.attention.kernels import (
    HEAD_DIMS,
    LSE_BYTES,
    TILE_SIZES,
    flash_forward_kernel,
)
from gpucourse.lessons.attention.model import (
    Placement,
    compulsory_bytes,
    extra_memory_bytes,
    flash_bytes,
    flash_flops,
    flash_traffic,
    kv_rows_read,
    naive_bytes,
    naive_flops,
    naive_traffic,
    placements,
    q_tiles,
    ridge_point,
    useful_flops,
    visited_tiles,
)
from gpucourse.lessons.attention.online import (
    attention_by_tiles,
    exact_attention,
    naive_softmax,
    online_attention,
    online_softmax,
    scores,
    softmax,
    tile_step,
)
