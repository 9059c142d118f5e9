"""Simulated memory: allocations with byte addresses, traced arrays, and the memory-system hook.

Addresses follow the hardware: each global allocation starts at a 256-byte-aligned base (as
``cudaMalloc`` guarantees), and an element's address is ``base + byte offset``, where the offset
of a view (slice, stride, row of a 2-D array) is its offset within the allocation it views plus
``sum(index[k] * strides[k])``. Shared arrays live in a per-block address space from 0.

``MemorySystem`` is the hook a memory model plugs into: every load, store and atomic of a
traced kernel goes through it, and it decides the value a load returns. The default is
sequentially consistent (reads see the latest write). A weaker model — per-SM store buffers that
make writes visible to other blocks late unless ``cuda.threadfence`` drains them — subclasses it
and is passed as ``trace(..., memory=MyModel())``.
"""

from __future__ import annotations

import operator
import sys

import numpy as np

ALLOCATION_ALIGN_BYTES = 256
SHARED_ALIGN_BYTES = 16


class MemorySystem:
    """Sees every load, store, atomic, fence and barrier of a traced launch; decides what loads read.

    Arguments: ``thread`` is the simulated thread (``thread.block.linear``, ``thread.block.index``,
    ``thread.tid``, ``thread.lane``, ``thread.warp.index``); ``space`` is ``"global"`` or ``"shared"``;
    ``array`` is the NumPy view the kernel indexed and ``index`` a tuple of ints into it; ``address``
    the simulated byte address (unique per allocation; shared addresses are per block).
    """

    def load(self, thread, space: str, array: np.ndarray, index: tuple, address: int):
        return array[index]

    def store(self, thread, space: str, array: np.ndarray, index: tuple, address: int, value) -> None:
        array[index] = value

    def atomic(self, thread, space: str, array: np.ndarray, index: tuple, address: int, update):
        """Read-modify-write in one step: store ``update(old)`` and return ``old``."""
        old = array[index]
        array[index] = update(old)
        return old

    def fence(self, thread, scope: str) -> None:
        """A fence: scope "block", "device" or "system" (``cuda.threadfence_block/threadfence/_system``)."""

    def barrier(self, block) -> None:
        """All threads of ``block`` passed a ``syncthreads``."""

    def kernel_end(self) -> None:
        """The launch finished: everything must be visible now (a kernel boundary orders all memory)."""


class Allocation:
    """A region of simulated memory: global (one per argument buffer) or shared (one per block array)."""

    __slots__ = ("base", "block", "nbytes", "root", "space", "uid")

    def __init__(self, uid: int, space: str, base: int, nbytes: int, root: np.ndarray, block=None):
        self.uid, self.space, self.base, self.nbytes, self.root, self.block = (
            uid,
            space,
            base,
            nbytes,
            root,
            block,
        )


def data_address(array: np.ndarray) -> int:
    return array.__array_interface__["data"][0]


def root_of(array: np.ndarray) -> np.ndarray:
    """The ndarray that owns the buffer a view looks into (so two views of one buffer share addresses)."""
    root = array
    while isinstance(root.base, np.ndarray):
        root = root.base
    return root


def _poison(shape, dtype) -> np.ndarray:
    # Uninitialised memory is garbage on a GPU; here it is NaN (floats) or 0, the same every run.
    dtype = np.dtype(dtype)
    if dtype.kind in "fc":
        return np.full(shape, np.nan, dtype=dtype)
    return np.zeros(shape, dtype=dtype)


class TracedArray:
    """What a kernel sees instead of an array: indexing it goes through the tracer.

    Element access records a load or store (with its byte address) and asks the memory system for
    the value; indexing that leaves a sub-array gives another TracedArray (a view, same allocation).
    """

    __slots__ = (
        "__weakref__",
        "_alloc",
        "_array",
        "_ndim",
        "_offset_bytes",
        "_shape",
        "_strides",
        "_tracer",
        "itemsize",
        "name",
    )

    def __init__(self, array: np.ndarray, alloc: Allocation, tracer, name: str, offset_bytes: int):
        self._array, self._alloc, self._tracer, self.name = array, alloc, tracer, name
        self._offset_bytes = offset_bytes
        self._strides, self._shape, self._ndim = array.strides, array.shape, array.ndim
        self.itemsize = array.itemsize

    # Attributes a kernel may read.
    shape = property(lambda self: self._shape)
    ndim = property(lambda self: self._ndim)
    size = property(lambda self: self._array.size)
    dtype = property(lambda self: self._array.dtype)
    strides = property(lambda self: self._strides)
    space = property(lambda self: self._alloc.space)

    def __len__(self):
        return self._shape[0]

    def __repr__(self):
        return f"<traced {self._alloc.space} array {self.name} {self._array.dtype}{list(self._shape)}>"

    def _element(self, idx):
        """(index tuple, byte offset in the allocation) of an element, or None for a sub-array."""
        if type(idx) is not tuple:
            idx = (idx,)
        if len(idx) != self._ndim:
            return None
        offset = self._offset_bytes
        out = []
        for axis, (i, n, stride) in enumerate(zip(idx, self._shape, self._strides, strict=True)):
            if type(i) is not int:
                if isinstance(i, (slice, type(Ellipsis))) or i is None:
                    return None
                try:
                    i = operator.index(i)
                except TypeError:
                    raise IndexError(f"only integers and slices index {self.name} in a kernel; got {i!r}") from None
            if i < 0:
                i += n  # Numba wraps negative indices like Python
            if not 0 <= i < n:
                raise IndexError(f"index {idx[axis]} is out of bounds for axis {axis} of {self.name} with size {n}")
            offset += i * stride
            out.append(i)
        return tuple(out), offset

    def _view(self, idx) -> TracedArray:
        view = self._array[idx]
        if not isinstance(view, np.ndarray) or view.ndim == 0:
            raise IndexError(f"unsupported index {idx!r} on {self.name}")
        if not np.may_share_memory(view, self._alloc.root):
            raise IndexError(f"fancy indexing copies data and is not available in a CUDA kernel: {self.name}[{idx!r}]")
        offset = data_address(view) - data_address(self._alloc.root)
        return TracedArray(view, self._alloc, self._tracer, self.name, offset)

    # Element access is the hottest path of a trace: the 1-D and 2-D integer cases are inlined so
    # that a load costs two Python calls (this one and the tracer's), not six.

    def __getitem__(self, idx):
        if type(idx) is int and self._ndim == 1:
            n = self._shape[0]
            if idx < 0:
                idx += n
            if 0 <= idx < n:
                return self._tracer.access(
                    self, (idx,), self._offset_bytes + idx * self._strides[0], "load", sys._getframe(1)
                )
        elif type(idx) is tuple and self._ndim == 2 and len(idx) == 2:
            i, j = idx
            if type(i) is int and type(j) is int:
                n, m = self._shape
                if i < 0:
                    i += n
                if j < 0:
                    j += m
                if 0 <= i < n and 0 <= j < m:
                    s0, s1 = self._strides
                    return self._tracer.access(
                        self, (i, j), self._offset_bytes + i * s0 + j * s1, "load", sys._getframe(1)
                    )
        element = self._element(idx)
        if element is None:
            return self._view(idx)
        return self._tracer.access(self, element[0], element[1], "load", sys._getframe(1))

    def __setitem__(self, idx, value):
        if type(idx) is int and self._ndim == 1:
            n = self._shape[0]
            if idx < 0:
                idx += n
            if 0 <= idx < n:
                self._tracer.access(
                    self,
                    (idx,),
                    self._offset_bytes + idx * self._strides[0],
                    "store",
                    sys._getframe(1),
                    value,
                )
                return
        elif type(idx) is tuple and self._ndim == 2 and len(idx) == 2:
            i, j = idx
            if type(i) is int and type(j) is int:
                n, m = self._shape
                if i < 0:
                    i += n
                if j < 0:
                    j += m
                if 0 <= i < n and 0 <= j < m:
                    s0, s1 = self._strides
                    self._tracer.access(
                        self, (i, j), self._offset_bytes + i * s0 + j * s1, "store", sys._getframe(1), value
                    )
                    return
        element = self._element(idx)
        if element is None:
            raise IndexError(f"assign to one element at a time in a kernel: {self.name}[{idx!r}] is a sub-array")
        self._tracer.access(self, element[0], element[1], "store", sys._getframe(1), value)

    def element(self, idx):
        """(index tuple, byte offset) of one element, for atomics."""
        element = self._element(idx)
        if element is None:
            raise IndexError(f"an atomic needs one element of {self.name}, got index {idx!r}")
        return element


class AddressSpace:
    """Hands out allocations: global ones at 256-byte-aligned bases, shared ones per block."""

    def __init__(self):
        self.allocations: list[Allocation] = []
        self._next_global_base = 0
        self._roots: dict[int, Allocation] = {}

    def _new(self, space, base, nbytes, root, block=None) -> Allocation:
        alloc = Allocation(len(self.allocations), space, base, nbytes, root, block)
        self.allocations.append(alloc)
        return alloc

    def global_array(self, array: np.ndarray, tracer, name: str) -> TracedArray:
        root = root_of(array)
        alloc = self._roots.get(id(root))
        if alloc is None:
            base = self._next_global_base
            nbytes = max(root.nbytes, 1)
            self._next_global_base = -(-(base + nbytes) // ALLOCATION_ALIGN_BYTES) * ALLOCATION_ALIGN_BYTES
            alloc = self._roots[id(root)] = self._new("global", base, nbytes, root)
        return TracedArray(array, alloc, tracer, name, data_address(array) - data_address(root))

    def shared_array(self, block, shape, dtype, tracer, name: str, dynamic_bytes: int = 0) -> TracedArray:
        if dynamic_bytes:  # every dynamic shared array of a block aliases the same bytes, after the static ones
            alloc = block.shared.get("dynamic")
            if alloc is None:
                root = np.zeros(dynamic_bytes, dtype=np.uint8)
                alloc = block.shared["dynamic"] = self._new("shared", 0, dynamic_bytes, root, block)
            count = alloc.nbytes // np.dtype(dtype).itemsize
            view = np.frombuffer(alloc.root.data, dtype=dtype, count=count)
            return TracedArray(view, alloc, tracer, name, 0)
        root = _poison(shape, dtype)
        base = -(-block.shared_bytes // SHARED_ALIGN_BYTES) * SHARED_ALIGN_BYTES
        block.shared_bytes = base + root.nbytes
        alloc = self._new("shared", base, root.nbytes, root, block)
        return TracedArray(root, alloc, tracer, name, 0)


def poison_local(shape, dtype) -> np.ndarray:
    return _poison(shape, dtype)
