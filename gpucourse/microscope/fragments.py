"""Tensor-core fragments: which lane holds which element of A, B and C for ``mma.sync``, and how
``ldmatrix`` fetches them from shared memory (with its bank conflicts, swizzled or not).

A warp-wide ``mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 d, a, b, c`` computes D = A·B + C for a
16×16 A, a 16×8 B and 16×8 C/D, but no lane holds a whole matrix: each of the 32 lanes holds a few
elements (its *fragment*) in numbered register slots (a0…a7, b0…b3, c0…c3). The PTX ISA fixes the
mapping; with ``groupID = laneid >> 2`` and ``threadID_in_group = laneid % 4`` (PTX ISA 9.7.14.5.8,
"Matrix Fragments for mma.m16n8k16 with floating point type", and 9.7.14.5.7, "Matrix Fragments for
mma.m16n8k8"; https://docs.nvidia.com/cuda/parallel-thread-execution/index.html#warp-level-matrix-fragment-mma-16816-float
and #warp-level-matrix-fragment-mma-1688):

m16n8k16, .f16/.bf16 (A row-major, B column-major; C/D .f32)::

    A  a0..a7  row = groupID       for ai, 0 <= i < 2 or 4 <= i < 6;  groupID + 8 otherwise
               col = threadID_in_group*2 + (i & 1)  for i < 4;  the same + 8 for i >= 4
    B  b0..b3  row = threadID_in_group*2 + (i & 1)  for i < 2;  the same + 8 for i >= 2
               col = groupID
    C  c0..c3  row = groupID for i < 2;  groupID + 8 for i >= 2
               col = threadID_in_group*2 + (i & 1)

m16n8k8, .tf32 (C/D as above)::

    A  a0..a3  row = groupID for a0, a2;  groupID + 8 for a1, a3
               col = threadID_in_group for a0, a1;  threadID_in_group + 4 for a2, a3
    B  b0, b1  row = threadID_in_group for b0;  threadID_in_group + 4 for b1
               col = groupID

``ldmatrix.sync.aligned.m8n8.x{1,2,4}[.trans].shared.b16`` (PTX ISA 9.7.14.5.15,
#warp-level-matrix-instructions-ldmatrix) loads 1, 2 or 4 8×8 matrices of 16-bit elements: lanes
0–7 give the addresses of matrix 0's eight rows, lanes 8–15 matrix 1's, 16–23 matrix 2's, 24–31
matrix 3's (each row 16 contiguous bytes, 16-byte aligned); lanes past 8·num give none. Each lane
then receives, in destination register j, the two elements of matrix j at row ``laneid >> 2``,
columns ``(laneid % 4)*2`` and ``+1`` (``.trans``: the transposed element of the stored matrix).
That is exactly an mma fragment's pair of slots, which is why the two instructions go together.

Bank conflicts of ``ldmatrix`` use the microscope's one bank model (``analysis``): each lane's
16-byte row is a 16-byte element, served in 128-byte phases of 8 lanes, i.e. one 8×8 matrix per phase.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpucourse.errors import InvalidConfig
from gpucourse.hardware import WARP_SIZE
from gpucourse.microscope import analysis

PTX_ISA_URL = "https://docs.nvidia.com/cuda/parallel-thread-execution/index.html"
FRAGMENT_SOURCES = {
    "m16n8k16": f"{PTX_ISA_URL}#warp-level-matrix-fragment-mma-16816-float",
    "m16n8k8": f"{PTX_ISA_URL}#warp-level-matrix-fragment-mma-1688",
    "ldmatrix": f"{PTX_ISA_URL}#warp-level-matrix-instructions-ldmatrix",
}
OPERANDS = ("a", "b", "c")
LDMATRIX_ROW_BYTES = 16  # one row of an 8×8 matrix of 16-bit elements
LDMATRIX_ROWS = 8
SWIZZLE_CHUNKS = 8  # the 128-byte swizzle permutes the eight 16-byte chunks of each 128-byte row
B16 = 2  # bytes of an fp16/bf16 element


@dataclass(frozen=True)
class MmaShape:
    """One ``mma.sync`` shape and input type: its sizes and where every fragment slot lives."""

    name: str  # e.g. "m16n8k16"
    dtype: str  # the A/B type: "f16", "bf16" or "tf32"
    m: int
    n: int
    k: int

    def operand_shape(self, operand: str) -> tuple[int, int]:
        """(rows, columns) of A (m×k), B (k×n) or C/D (m×n)."""
        return {"a": (self.m, self.k), "b": (self.k, self.n), "c": (self.m, self.n)}[_operand(operand)]

    def slots(self, operand: str) -> int:
        """Register slots per lane for an operand: elements / 32 (8, 4, 4 for m16n8k16)."""
        rows, cols = self.operand_shape(operand)
        return rows * cols // WARP_SIZE

    def position(self, operand: str, lane: int, slot: int) -> tuple[int, int]:
        """(row, column) of the element that ``lane`` holds in register slot ``slot`` (the ISA's table)."""
        operand = _operand(operand)
        lane = _check_index("lane", lane, WARP_SIZE)
        slot = _check_index("slot", slot, self.slots(operand))
        group, thread = lane >> 2, lane % 4  # groupID, threadID_in_group
        if operand == "c":  # the same for every shape here: m16n8, fp32 accumulators
            return group + 8 * (slot >= 2), thread * 2 + (slot & 1)
        if self.dtype == "tf32":  # m16n8k8: one 32-bit element per register
            if operand == "a":
                return group + 8 * (slot & 1), thread + 4 * (slot >= 2)
            return thread + 4 * slot, group
        if operand == "a":  # m16n8k16 f16/bf16: two 16-bit elements per register, slots in pairs
            return group + 8 * (slot in (2, 3, 6, 7)), thread * 2 + (slot & 1) + 8 * (slot >= 4)
        return thread * 2 + (slot & 1) + 8 * (slot >= 2), group

    def layout(self, operand: str) -> np.ndarray:
        """lane × slot × (row, column): the whole table for one operand."""
        operand = _operand(operand)
        return np.array([[self.position(operand, lane, slot) for slot in range(self.slots(operand))]
                         for lane in range(WARP_SIZE)], dtype=np.int64)

    def owners(self, operand: str) -> np.ndarray:
        """row × column × (lane, slot): who holds each element (every element exactly once, or this raises)."""
        operand = _operand(operand)
        rows, cols = self.operand_shape(operand)
        owner = np.full((rows, cols, 2), -1, dtype=np.int64)
        for lane, per_lane in enumerate(self.layout(operand)):
            for slot, (row, col) in enumerate(per_lane):
                if owner[row, col, 0] >= 0:
                    raise AssertionError(f"{self.name} {operand.upper()}[{row},{col}] held twice")
                owner[row, col] = lane, slot
        if (owner < 0).any():
            raise AssertionError(f"{self.name} {operand.upper()}: some element is held by no lane")
        return owner


MMA_SHAPES = {
    ("m16n8k16", "f16"): MmaShape("m16n8k16", "f16", 16, 8, 16),
    ("m16n8k16", "bf16"): MmaShape("m16n8k16", "bf16", 16, 8, 16),
    ("m16n8k8", "tf32"): MmaShape("m16n8k8", "tf32", 16, 8, 8),
}


def mma_shape(shape: str = "m16n8k16", dtype: str = "f16") -> MmaShape:
    """The fragment tables of ``mma.sync.aligned.<shape>.row.col.f32.<dtype>.<dtype>.f32``."""
    key = (shape, dtype)
    if key not in MMA_SHAPES:
        known = ", ".join(f"{s} {d}" for s, d in MMA_SHAPES)
        raise InvalidConfig(f"mma shape and type must be one of: {known}; got {shape} {dtype}")
    return MMA_SHAPES[key]


def owner_labels(shape: MmaShape, operand: str) -> np.ndarray:
    """rows × columns of labels "T<lane> <slot>" (e.g. "T5 a2"): the ISA's figure of a fragment layout as a table."""
    operand = _operand(operand)
    owner = shape.owners(operand)
    return np.vectorize(lambda lane, slot: f"T{lane} {operand}{slot}")(owner[..., 0], owner[..., 1])


def gather(shape: MmaShape, operand: str, matrix) -> np.ndarray:
    """lane × slot: each lane's fragment of ``matrix`` (what its registers hold before ``mma.sync``)."""
    matrix = _check_matrix(shape, operand, matrix)
    where = shape.layout(operand)
    return matrix[where[..., 0], where[..., 1]]


def scatter(shape: MmaShape, operand: str, fragments) -> np.ndarray:
    """The matrix that the lanes' fragments (lane × slot) make up: the inverse of ``gather``."""
    fragments = np.asarray(fragments)
    expected = (WARP_SIZE, shape.slots(operand))
    if fragments.shape != expected:
        raise InvalidConfig(f"{operand.upper()} fragments must be lane × slot {expected}, got {fragments.shape}")
    out = np.zeros(shape.operand_shape(operand), dtype=fragments.dtype)
    where = shape.layout(operand)
    out[where[..., 0], where[..., 1]] = fragments
    return out


def mma_fragments(shape: MmaShape, a_frag, b_frag, c_frag) -> np.ndarray:
    """D's fragments (lane × slot, float64) from A's, B's and C's fragments alone, as the warp computes
    them: for each lane's slot of D at (row, col), the sum over k of A[row, k]·B[k, col] read from the
    registers of whichever lanes hold them (the tensor core gathers across the warp), plus the lane's own C.
    No whole matrix is ever formed; a wrong table sends a product to the wrong lane and slot."""
    a_frag, b_frag, c_frag = (np.asarray(f, dtype=np.float64) for f in (a_frag, b_frag, c_frag))
    for name, frag in zip(OPERANDS, (a_frag, b_frag, c_frag), strict=True):
        if frag.shape != (WARP_SIZE, shape.slots(name)):
            raise InvalidConfig(f"{name.upper()} fragments must be lane × slot "
                                f"{(WARP_SIZE, shape.slots(name))}, got {frag.shape}")
    a_owner, b_owner = shape.owners("a"), shape.owners("b")
    d_frag = np.empty_like(c_frag)
    for lane in range(WARP_SIZE):
        for slot in range(shape.slots("c")):
            row, col = shape.position("c", lane, slot)
            total = c_frag[lane, slot]
            for k in range(shape.k):
                a_lane, a_slot = a_owner[row, k]
                b_lane, b_slot = b_owner[k, col]
                total += a_frag[a_lane, a_slot] * b_frag[b_lane, b_slot]
            d_frag[lane, slot] = total
    return d_frag


# --- ldmatrix: who gives which row address, who receives what, and the banks it touches ---------------

def ldmatrix_lanes(num: int) -> list[int]:
    """Lanes whose addresses ``ldmatrix .x<num>`` uses: 0–7 (x1), 0–15 (x2), all 32 (x4)."""
    return list(range(LDMATRIX_ROWS * _check_num(num)))


def ldmatrix(shared, row_addresses, num: int = 4, trans: bool = False) -> np.ndarray:
    """What ``ldmatrix.sync.aligned.m8n8.x<num>[.trans].shared.b16`` leaves in each lane: lane × register
    j (matrix j) × 2 elements, from ``shared`` (a 1-D array of 16-bit elements, byte 0 = element 0) and
    each lane's row address in bytes (lane 8·j + r gives row r of matrix j; lanes past 8·num are unused)."""
    num = _check_num(num)
    shared = np.asarray(shared)
    if shared.ndim != 1 or shared.itemsize != B16:
        raise InvalidConfig(f"shared must be a 1-D array of 16-bit elements, got {shared.dtype} {shared.shape}")
    rows = np.empty((num, LDMATRIX_ROWS, LDMATRIX_ROWS), dtype=shared.dtype)  # matrix, row, column
    for lane, address in zip(ldmatrix_lanes(num), _check_addresses(row_addresses, num), strict=False):
        if address + LDMATRIX_ROW_BYTES > shared.size * B16:
            raise InvalidConfig(f"lane {lane}'s row at byte {address} runs past the {shared.size * B16} bytes")
        start = address // B16
        rows[lane // LDMATRIX_ROWS, lane % LDMATRIX_ROWS] = shared[start:start + LDMATRIX_ROWS]
    out = np.empty((WARP_SIZE, num, 2), dtype=shared.dtype)
    for lane in range(WARP_SIZE):
        row, col = lane >> 2, (lane % 4) * 2
        for j in range(num):
            out[lane, j] = rows[j, col:col + 2, row] if trans else rows[j, row, col:col + 2]
    return out


def ldmatrix_request(row_addresses, num: int = 4) -> tuple[list[int], list[int]]:
    """(lanes, byte addresses) of the 16-byte rows one ``ldmatrix .x<num>`` reads: a shared-memory request
    of 16-byte elements, as the bank model counts it."""
    num = _check_num(num)
    return ldmatrix_lanes(num), _check_addresses(row_addresses, num)


def ldmatrix_bank_ways(row_addresses, num: int = 4) -> int:
    """Conflict degree of one ``ldmatrix``: the worst 8-lane phase (one 8×8 matrix), by ``analysis.bank_ways``."""
    lanes, addresses = ldmatrix_request(row_addresses, num)
    return analysis.bank_ways(lanes, addresses, LDMATRIX_ROW_BYTES)


def ldmatrix_wavefronts(row_addresses, num: int = 4) -> tuple[int, int]:
    """(wavefronts, ideal wavefronts) of one ``ldmatrix``, Nsight Compute's count (``analysis.bank_wavefronts``)."""
    lanes, addresses = ldmatrix_request(row_addresses, num)
    return analysis.bank_wavefronts(lanes, addresses, LDMATRIX_ROW_BYTES)


def tile_offset(row: int, col: int, row_elements: int, swizzle: bool = False, element_bytes: int = B16) -> int:
    """Byte offset of element (row, col) in a row-major shared tile ``row_elements`` wide.

    ``swizzle=True`` is the 128-byte XOR swizzle (CUTLASS's ``Swizzle<3,4,3>``, TMA's
    ``SWIZZLE_128B`` on a 128-byte row): the 16-byte chunk ``c`` of row ``r`` is stored at chunk
    ``c ^ (r % 8)``, so the same column of eight consecutive rows lands in eight different chunks.
    It needs rows of exactly 128 bytes."""
    row_bytes = row_elements * element_bytes
    byte = col * element_bytes
    if swizzle:
        if row_bytes != SWIZZLE_CHUNKS * LDMATRIX_ROW_BYTES:
            raise InvalidConfig(f"the 128-byte swizzle needs rows of 128 bytes; these are {row_bytes}")
        chunk = (byte // LDMATRIX_ROW_BYTES) ^ (row % SWIZZLE_CHUNKS)
        byte = chunk * LDMATRIX_ROW_BYTES + byte % LDMATRIX_ROW_BYTES
    return row * row_bytes + byte


def a_tile_addresses(row_elements: int, row0: int = 0, col0: int = 0, swizzle: bool = False) -> list[int]:
    """Row addresses (bytes) that the 32 lanes give ``ldmatrix.x4`` to load the 16×16 A block at
    (row0, col0) of a row-major fp16 tile ``row_elements`` wide, matrices ordered so that register j is
    A's slot pair (2j, 2j+1) of ``mma.m16n8k16``: rows 0–7/cols 0–7, rows 8–15/cols 0–7, rows 0–7/cols 8–15,
    rows 8–15/cols 8–15. Lane l gives row ``l % 8 + 8·((l // 8) % 2)``, column ``8·(l // 16)``."""
    return [tile_offset(row0 + lane % 8 + 8 * ((lane // 8) % 2), col0 + 8 * (lane // 16), row_elements, swizzle)
            for lane in range(WARP_SIZE)]


def swizzled_tile(matrix, swizzle: bool = True) -> np.ndarray:
    """A row-major fp16 matrix stored as a flat shared tile, each element at ``tile_offset`` (what a
    swizzled copy into shared memory writes)."""
    matrix = np.asarray(matrix)
    if matrix.ndim != 2 or matrix.itemsize != B16:
        raise InvalidConfig(f"matrix must be 2-D with 16-bit elements, got {matrix.dtype} {matrix.shape}")
    rows, cols = matrix.shape
    flat = np.zeros(rows * cols, dtype=matrix.dtype)
    for r in range(rows):
        for c in range(cols):
            flat[tile_offset(r, c, cols, swizzle) // B16] = matrix[r, c]
    return flat


# --- checks ---------------------------------------------------------------------------------------------

def _operand(operand) -> str:
    name = str(operand).lower()
    if name == "d":
        name = "c"  # D has C's layout
    if name not in OPERANDS:
        raise InvalidConfig(f"operand must be one of 'a', 'b', 'c' (or 'd'), got {operand!r}")
    return name


def _check_index(name: str, value, size: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not 0 <= value < size:
        raise InvalidConfig(f"{name} must be an integer from 0 to {size - 1}, got {value!r}")
    return int(value)


def _check_matrix(shape: MmaShape, operand: str, matrix) -> np.ndarray:
    matrix = np.asarray(matrix)
    expected = shape.operand_shape(operand)
    if matrix.shape != expected:
        raise InvalidConfig(f"{shape.name} {operand.upper()} must be {expected[0]}×{expected[1]}, "
                            f"got shape {matrix.shape}")
    return matrix


def _check_num(num) -> int:
    if num not in (1, 2, 4) or isinstance(num, bool):
        raise InvalidConfig(f"ldmatrix loads 1, 2 or 4 matrices (.x1, .x2, .x4), got {num!r}")
    return int(num)


def _check_addresses(row_addresses, num: int) -> list[int]:
    addresses = [int(a) for a in row_addresses]
    needed = LDMATRIX_ROWS * num
    if len(addresses) < needed:
        raise InvalidConfig(f"ldmatrix .x{num} needs row addresses from lanes 0–{needed - 1}, got {len(addresses)}")
    addresses = addresses[:needed]  # higher lanes' addresses are not used
    bad = [a for a in addresses if a < 0 or a % LDMATRIX_ROW_BYTES]
    if bad:
        raise InvalidConfig(f"ldmatrix row addresses must be non-negative multiples of 16 bytes, got {bad[:4]}")
    return addresses
