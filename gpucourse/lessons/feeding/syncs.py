"""Host synchronisations, counted in both modes: what a loop's own code asks for, and what a GPU
profile records.

Three ways to see a sync, because no single one sees them all:

* ``aten::_local_scalar_dense`` (torch.profiler, CPU and GPU): ``.item()``, ``float(t)``, ``bool(t)``
  (an ``if``), ``print(t)``. ``.tolist()`` and ``.cpu()`` do not go through it: on a GPU they are a
  device-to-host ``aten::_to_copy``, on the CPU nothing at all.
* the runtime's own calls in a GPU profile (``RUNTIME_SYNC_EVENTS``): ``cudaStreamSynchronize``
  (PyTorch's blocking copies: ``memcpy_and_sync`` = ``cudaMemcpyAsync`` + ``cudaStreamSynchronize``),
  ``cudaDeviceSynchronize`` (``torch.cuda.synchronize()``) …
* ``spy()``: while it is active, the tensor methods that make the host wait on a GPU are wrapped
  and every call *from code outside torch* is counted under a ``host sync: …`` name — also on the
  CPU, where the same line costs nothing but would cost a sync on a GPU. A copy to the device is
  counted unless it asks for ``non_blocking=True`` (a blocking copy waits for the stream); without a
  GPU ``torch.cuda.synchronize()`` is counted and skipped.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections import Counter

SYNC_OPS = ("aten::_local_scalar_dense",)  # what .item(), float(t), print(t) and `if t:` call underneath
RUNTIME_SYNC_EVENTS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaMemcpy")
SPY_PREFIX = "host sync: "
BLOCKING_COPY = SPY_PREFIX + "copy to or from the device without non_blocking=True"

# method name → what the spy calls it (each of these reads a device value on the host)
_READS = {"item": "tensor.item()", "tolist": "tensor.tolist()", "cpu": "tensor.cpu()", "numpy": "tensor.numpy()",
          "__bool__": "bool(tensor) or an if", "__float__": "float(tensor)", "__int__": "int(tensor)",
          "__array__": "np.asarray(tensor)", "__repr__": "print(tensor) or repr", "__format__": "f-string of a tensor"}


def _torch_dir() -> str:
    import torch

    return os.path.dirname(torch.__file__) + os.sep


def _from_user_code(torch_dir: str) -> bool:
    """The wrapped method was called by code outside torch (torch's own internals are not counted)."""
    caller = sys._getframe(2).f_code.co_filename
    return not caller.startswith(torch_dir)


def _to_is_blocking_copy(tensor, args, kwargs) -> bool:
    import torch

    device, _dtype, non_blocking, _fmt = torch._C._nn._parse_to(*args, **kwargs)
    if device is None or non_blocking:
        return False
    # host → device, device → host, or (without a GPU) the host → "DEVICE" copy a GPU would make
    return tensor.device.type == "cpu" or device.type == "cpu"


@contextlib.contextmanager
def spy():
    """Count the host syncs that code outside torch asks for while the block runs (a Counter)."""
    import torch

    counts: Counter = Counter()
    torch_dir = _torch_dir()
    patched = []

    def patch(owner, name, make):
        had = name in owner.__dict__
        original = owner.__dict__[name] if had else getattr(owner, name)
        patched.append((owner, name, had, original))
        setattr(owner, name, make(original))

    def reads(label):
        def make(original):
            def wrapper(self, *args, **kwargs):
                if _from_user_code(torch_dir):
                    counts[SPY_PREFIX + label] += 1
                return original(self, *args, **kwargs)
            return wrapper
        return make

    def copies(method):
        def make(original):
            def wrapper(self, *args, **kwargs):
                blocking = (_to_is_blocking_copy(self, args, kwargs) if method == "to"
                            else not kwargs.get("non_blocking", args[1] if len(args) > 1 else False))
                if blocking and _from_user_code(torch_dir):
                    counts[BLOCKING_COPY] += 1
                return original(self, *args, **kwargs)
            return wrapper
        return make

    def synchronize(label):
        def make(original):
            def wrapper(*args, **kwargs):
                counts[SPY_PREFIX + label] += 1
                if torch.cuda.is_available():
                    return original(*args, **kwargs)
                return None  # no GPU: counted, and there is nothing to wait for
            return wrapper
        return make

    try:
        for name, label in _READS.items():
            patch(torch.Tensor, name, reads(label))
        patch(torch.Tensor, "to", copies("to"))
        patch(torch.Tensor, "cuda", copies("cuda"))
        patch(torch.cuda, "synchronize", synchronize("torch.cuda.synchronize()"))
        patch(torch.cuda.Stream, "synchronize", synchronize("stream.synchronize()"))
        patch(torch.cuda.Event, "synchronize", synchronize("event.synchronize()"))
        yield counts
    finally:
        for owner, name, had, original in reversed(patched):
            if had:
                setattr(owner, name, original)
            else:
                delattr(owner, name)


def host_syncs(counts) -> dict:
    """The entries of a profile's counts that are host synchronisations (those that are not zero)."""
    return {name: n for name, n in counts.items()
            if n and (name in SYNC_OPS or name in RUNTIME_SYNC_EVENTS or name.startswith(SPY_PREFIX))}


def code_line(text: str) -> str:
    """A line of code as lab 08 compares it: a trailing ``# comment`` and surrounding spaces dropped,
    runs of spaces made one."""
    text = str(text)
    if "#" in text:
        text = text[:text.index("#")]
    return " ".join(text.split())


def code_lines(*fns) -> set[str]:
    """Every line of these functions' source, as ``code_line`` writes it."""
    import inspect

    return {code_line(line) for fn in fns for line in inspect.getsource(fn).splitlines()} - {""}
