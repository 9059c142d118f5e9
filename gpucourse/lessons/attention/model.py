"""Counted quantities of the attention lesson, as pure functions: HBM bytes, FLOPs, arithmetic intensity, tiles.

Everything is per (batch, head) — multiply by batch·heads for a launch — for a sequence of ``n`` queries and ``n``
keys (self-attention), head dimension ``d`` and ``dtype_bytes`` per element of Q, K, V, O (2 for fp16/bf16, 4 for
fp32). The counts are of DRAM (HBM) traffic if **no cache serves a re-read**: each load that a kernel issues
reaches HBM. That is the model FlashAttention's paper counts in (its "IO complexity", Dao et al. 2022, §3.2); on a
real GPU the L2 catches part of the re-reads (K and V are shared by every Q tile of a head), which
``compulsory_bytes`` bounds from below.

Naive attention, three kernels (the paper's Algorithm 0, also what ``torch``'s "math" backend does):

1. ``S = Q Kᵀ / √d``: reads Q (n·d) and K (n·d), writes S (n·n);
2. ``P = softmax(S)``: reads S (n·n), writes P (n·n);
3. ``O = P V``: reads P (n·n) and V (n·d), writes O (n·d).

   bytes = (4·n·d + 4·n²) · dtype_bytes      (S and P stored in the inputs' dtype; the scale is fused into 1)

Each matmul reads its inputs once (the best a matmul kernel can do); S and P are as big as the inputs' dtype.
*Causal* naive attention moves the same bytes and does the same FLOPs: the mask is applied inside the softmax
kernel (masked scores become −inf there), and the two matmuls compute every element, masked or not. (A
separate ``masked_fill`` kernel would add one more read and write of S: 2·n² elements more; not counted.)

FlashAttention-2 forward with tiles of ``br`` query rows × ``bc`` key rows (the kernel in ``kernels.py``): one
program per Q tile, ``Tr = ⌈n/br⌉`` of them; each reads its Q tile once, then every K and V tile it visits, and
writes its O tile and the rows' logsumexp (fp32, ``LSE_BYTES``) once:

   bytes = (n·d [Q] + Tr·n·d [K] + Tr·n·d [V] + n·d [O]) · dtype_bytes + n · LSE_BYTES      (not causal)

Causal: Q tile i (rows i·br … min((i+1)·br, n) − 1) visits K/V tile j (columns j·bc … ) only if the tile holds
an element on or below the diagonal, j·bc ≤ last row of tile i; it then loads the whole K and V tile (partial at
the end of the sequence: only the rows that exist, as masked loads fetch nothing). So tile i reads
``min(n, (⌊last_row_i / bc⌋ + 1)·bc)`` rows of K and as many of V. Partial tiles (n not a multiple of br or bc)
count only their real rows and columns.

FLOPs are the two matmuls' multiply-adds (2 per multiply-add), the usual convention: 4·n²·d for the whole score
matrix; the softmax's exp, max and sum (≈ 5 per score) are not counted. ``flash_flops`` counts what the tiles
compute (masked elements inside visited tiles included); ``useful_flops`` only the scores at or below the diagonal
(causal: 2·d·n·(n+1)).

Not modelled: the L2, the Q·Kᵀ scale multiply, the register/shared-memory limits on the tile sizes.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpucourse.errors import InvalidConfig
from gpucourse.lessons.attention.kernels import LSE_BYTES
from gpucourse.measure import runtime

DTYPE_BYTES = {"fp16": 2, "bf16": 2, "fp32": 4}


def _positive(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidConfig(f"{name} must be a positive integer; got {value!r}")
    return value


def _bytes_per_element(dtype_bytes) -> int:
    if isinstance(dtype_bytes, str):
        if dtype_bytes not in DTYPE_BYTES:
            raise InvalidConfig(f"dtype must be one of {', '.join(DTYPE_BYTES)} or a byte count; got {dtype_bytes!r}")
        return DTYPE_BYTES[dtype_bytes]
    return _positive("dtype_bytes", dtype_bytes)


# --- naive attention ----------------------------------------------------------------------------------------

def naive_traffic(n: int, d: int, dtype_bytes=2) -> dict[str, int]:
    """Bytes read and written by each of naive attention's three kernels (same for causal: see the module)."""
    n, d, b = _positive("n", n), _positive("d", d), _bytes_per_element(dtype_bytes)
    return {"S = QKᵀ: read Q, K": 2 * n * d * b, "S = QKᵀ: write S": n * n * b,
            "P = softmax(S): read S": n * n * b, "P = softmax(S): write P": n * n * b,
            "O = PV: read P": n * n * b, "O = PV: read V": n * d * b, "O = PV: write O": n * d * b}


def naive_bytes(n: int, d: int, dtype_bytes=2) -> int:
    """HBM bytes of naive attention per (batch, head): (4·n·d + 4·n²) · dtype_bytes, causal or not."""
    return sum(naive_traffic(n, d, dtype_bytes).values())


def naive_flops(n: int, d: int) -> int:
    """Matmul FLOPs of naive attention per (batch, head): 2·n²·d for QKᵀ + 2·n²·d for PV, causal or not."""
    n, d = _positive("n", n), _positive("d", d)
    return 4 * n * n * d


# --- FlashAttention-2 forward ---------------------------------------------------------------------------------

def q_tiles(n: int, br: int) -> int:
    """Programs of the forward pass per (batch, head): Tr = ⌈n / br⌉."""
    return -(-_positive("n", n) // _positive("br", br))


def visited_tiles(n: int, br: int, bc: int, causal: bool = False) -> list[tuple[int, int]]:
    """Every (Q tile i, K/V tile j) the forward pass computes, in the kernel's order."""
    n, br, bc = _positive("n", n), _positive("br", br), _positive("bc", bc)
    tiles = []
    for i in range(q_tiles(n, br)):
        end = min((i + 1) * br, n) if causal else n  # the kernel's loop bound: columns < end
        tiles += [(i, j) for j in range(-(-end // bc))]
    return tiles


def kv_rows_read(n: int, br: int, bc: int, causal: bool = False) -> int:
    """Rows of K (and as many of V) the forward pass loads per (batch, head), summed over its Q tiles: n·⌈n/br⌉
    when not causal; causal, tile i loads min(n, (⌊last_row_i / bc⌋ + 1)·bc) rows (its last tile may be partial)."""
    n, br, bc = _positive("n", n), _positive("br", br), _positive("bc", bc)
    if not causal:
        return n * q_tiles(n, br)
    return sum(min(n, ((min((i + 1) * br, n) - 1) // bc + 1) * bc) for i in range(q_tiles(n, br)))


def flash_traffic(n: int, d: int, br: int, bc: int, dtype_bytes=2, causal: bool = False) -> dict[str, int]:
    """Bytes of the FlashAttention-2 forward per (batch, head), by what moves (see the module's formula)."""
    b = _bytes_per_element(dtype_bytes)
    kv = kv_rows_read(n, br, bc, causal) * _positive("d", d) * b
    return {"read Q (once)": n * d * b, "read K (per Q tile)": kv, "read V (per Q tile)": kv,
            "write O (once)": n * d * b, "write logsumexp (fp32)": n * LSE_BYTES}


def flash_bytes(n: int, d: int, br: int, bc: int, dtype_bytes=2, causal: bool = False) -> int:
    """HBM bytes of the FlashAttention-2 forward per (batch, head), no cache serving a re-read:
    (2·n·d + 2·d·kv_rows_read) · dtype_bytes + 4·n; not causal kv_rows_read = n·⌈n/br⌉."""
    return sum(flash_traffic(n, d, br, bc, dtype_bytes, causal).values())


def compulsory_bytes(n: int, d: int, dtype_bytes=2, lse: bool = True) -> int:
    """The least traffic any exact forward pass can have: Q, K, V read once, O written once (and the logsumexp):
    4·n·d·dtype_bytes (+ 4·n). FlashAttention reaches it when the L2 serves every re-read of K and V."""
    n, d, b = _positive("n", n), _positive("d", d), _bytes_per_element(dtype_bytes)
    return 4 * n * d * b + (n * LSE_BYTES if lse else 0)


def flash_flops(n: int, d: int, br: int, bc: int, causal: bool = False) -> int:
    """Matmul FLOPs the forward's tiles compute per (batch, head): 4·d·rows·columns of every visited tile (masked
    elements inside a visited tile are computed too); not causal, exactly 4·n²·d."""
    n, d = _positive("n", n), _positive("d", d)
    rows = [min((i + 1) * br, n) - i * br for i in range(q_tiles(n, br))]
    return sum(4 * d * rows[i] * (min((j + 1) * bc, n) - j * bc) for i, j in visited_tiles(n, br, bc, causal))


def useful_flops(n: int, d: int, causal: bool = False) -> int:
    """Matmul FLOPs of the scores attention needs: 4·n²·d, causal 4·d·n(n+1)/2 = 2·d·n·(n+1)."""
    n, d = _positive("n", n), _positive("d", d)
    return 2 * d * n * (n + 1) if causal else 4 * n * n * d


def extra_memory_bytes(n: int, dtype_bytes=2, flash: bool = True) -> int:
    """Memory beyond Q, K, V and O per (batch, head): naive keeps S and P (2·n²·dtype_bytes), FlashAttention only
    the logsumexp (4·n): quadratic against linear in n."""
    n, b = _positive("n", n), _bytes_per_element(dtype_bytes)
    return n * LSE_BYTES if flash else 2 * n * n * b


# --- the roofline ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Placement:
    """One kernel's arithmetic intensity against a GPU's ridge point (datasheet figures)."""

    what: str
    flops: int
    bytes: int
    intensity_flop_per_byte: float
    ridge_flop_per_byte: float
    gpu: str

    @property
    def bound(self) -> str:
        return "compute-bound" if self.intensity_flop_per_byte >= self.ridge_flop_per_byte else "memory-bound"

    @property
    def attainable_fraction(self) -> float:
        """The share of peak FLOP/s the roofline allows: min(1, intensity / ridge)."""
        return min(1.0, self.intensity_flop_per_byte / self.ridge_flop_per_byte)


def ridge_point(gpu: str = "NVIDIA H200", precision: str = "fp16") -> float:
    """FLOP per byte where the datasheet's compute roof meets its bandwidth roof: peak FLOP/s ÷ bytes/s."""
    tflops = runtime.datasheet_tflops(gpu).get(precision)
    gbps = runtime.datasheet_bandwidth_gbps(gpu)
    if tflops is None or gbps is None:
        known = sorted(g for g in runtime.DATASHEET_TFLOPS if runtime.datasheet_bandwidth_gbps(g))
        raise InvalidConfig(f"no datasheet {precision} TFLOP/s and bandwidth for {gpu!r}; GPUs with both: "
                            f"{', '.join(known)}")
    return tflops * 1e12 / (gbps * 1e9)


def placements(n: int, d: int, br: int = 64, bc: int = 64, dtype: str = "fp16", causal: bool = False,
               gpu: str = "NVIDIA H200") -> list[Placement]:
    """Naive attention, the FlashAttention-2 forward (no cache) and its compulsory traffic on one GPU's roofline."""
    b = _bytes_per_element(dtype)
    ridge = ridge_point(gpu, dtype)
    rows = [("naive (S and P through HBM)", naive_flops(n, d), naive_bytes(n, d, b)),
            (f"FlashAttention-2, {br}×{bc} tiles, no L2", flash_flops(n, d, br, bc, causal),
             flash_bytes(n, d, br, bc, b, causal)),
            ("FlashAttention-2, K/V re-reads from L2", flash_flops(n, d, br, bc, causal), compulsory_bytes(n, d, b))]
    return [Placement(what, f, by, f / by, ridge, gpu) for what, f, by in rows]


def intensity(flops: int, nbytes: int) -> float:
    """Arithmetic intensity in FLOP per byte."""
    if nbytes <= 0:
        raise InvalidConfig(f"bytes must be positive; got {nbytes}")
    return flops / nbytes


def quadratic_coefficient_ratio(d: int, br: int) -> float:
    """For large n, naive bytes / FlashAttention bytes (no cache) → 4·n² / (2·d·n²/br) = 2·br/d."""
    return 2 * _positive("br", br) / _positive("d", d)


def check_tile(name: str, value, allowed) -> int:
    """A tile size or head dimension from the kernel's list, or one clear line."""
    if isinstance(value, bool) or not isinstance(value, int) or value not in allowed:
        raise InvalidConfig(f"{name} must be one of {', '.join(map(str, allowed))}; got {value!r}")
    return value

