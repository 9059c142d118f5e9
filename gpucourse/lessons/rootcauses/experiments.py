"""Lab 11's experiments on a fix: how the lab judges it by what it does, not by how it is spelled.

* ``host_read_error(step, *args)``: run a step where no tensor holds a value (PyTorch's ``meta`` device),
  so that any read of a value on the host fails, however it is spelled and wherever it happens (the
  learner's line, a library call, NumPy): ``.item()``, ``float()``, an ``if`` or ``max()`` on a tensor,
  ``.tolist()``, ``.cpu()``, ``.numpy()``, printing one. Returns None when the step never read a value.
* ``run_step(step, name, seed)``: a step on a mystery's inputs from a seed, as plain data for the grader.
* ``run_kernel(kernel, name, seed)``: a kernel on a mystery's inputs drawn from another seed (other
  values, other sizes): a fix must compute the mystery's output there too, not replay it.
"""

from __future__ import annotations

import contextlib
import copy

from gpucourse.lessons.rootcauses.model import SEED, launch, step_inputs
from gpucourse.microscope import profile

META = "meta"


class HostRead(RuntimeError):
    """A tensor's value was read on the host (here: printed) while the step ran without values."""


@contextlib.contextmanager
def _printing_refused():
    """A meta tensor prints as ``tensor(..., device='meta')`` without reading anything; on a GPU the same
    line reads the values, so printing is refused while the step runs without values."""
    import torch._tensor_str as tensor_str

    original = tensor_str._str

    def refuse(*_args, **_kwargs):
        raise HostRead("a tensor was printed (on a GPU its values are read on the host)")

    tensor_str._str = refuse
    try:
        yield
    finally:
        tensor_str._str = original


def _without_values(args: tuple) -> tuple:
    """The arguments, moved to the meta device: modules copied there, an optimizer rebuilt over the
    copied module's parameters (its class and settings kept), tensors and lists of tensors moved."""
    import torch

    moved, modules = [], []
    for arg in args:
        if isinstance(arg, torch.nn.Module):
            module = copy.deepcopy(arg).to(META)
            modules.append(module)
            moved.append(module)
        elif isinstance(arg, torch.optim.Optimizer):
            if not modules:
                raise ValueError("an optimizer must come after the module whose parameters it updates")
            moved.append(type(arg)(modules[-1].parameters(), **arg.defaults))
        elif isinstance(arg, torch.Tensor):
            moved.append(arg.detach().to(META).requires_grad_(arg.requires_grad))
        elif isinstance(arg, (list, tuple)) and all(isinstance(a, torch.Tensor) for a in arg):
            moved.append(type(arg)(a.detach().to(META) for a in arg))
        else:
            moved.append(arg)
    return tuple(moved)


def host_read_error(step, *args, **kwargs) -> str | None:
    """Run ``step`` on ``args`` moved to the meta device (no tensor holds a value): None when it ran
    without reading a value on the host, else what failed (the read, as PyTorch words it)."""
    meta_args = _without_values(args)
    try:
        with _printing_refused():
            step(*meta_args, **kwargs)
    except Exception as error:  # noqa: BLE001 (any failure is the answer: the step needs a value)
        return f"{type(error).__name__}: {error}"
    return None


def run_kernel(kernel, name: str, seed: int = SEED) -> tuple:
    """Run ``kernel`` on mystery ``name``'s inputs from ``seed`` under the microscope: (its profile, its output)."""
    _, grid, block, args = launch(name, seed)
    return profile(kernel, grid, block, *args), args[0]


def run_step(step, name: str, seed: int = SEED, calls: int = 1, **kwargs) -> tuple[list, list]:
    """For hidden tests, through the grader's ``call`` (a fresh thread, the result frozen): ``calls`` calls of a
    learner's ``step`` on step mystery ``name``'s inputs from ``seed`` (``kwargs`` passed on): (what each call
    returned, the tensors after them — the model's parameters, or the list of tensors — detached)."""
    import torch

    args = step_inputs(name, seed)
    returned = [step(*args, **kwargs) for _ in range(calls)]
    state = args[0].parameters() if isinstance(args[0], torch.nn.Module) else args[0]
    return returned, [tensor.detach() for tensor in state]


def mystery_output(name: str, seed: int = SEED):
    """The mystery kernel's own output on its inputs from ``seed`` (what a fix must give there too)."""
    kernel, grid, block, args = launch(name, seed)
    profile(kernel, grid, block, *args)
    return args[0]


def plain_word(answer) -> str | None:
    """``answer`` when it is exactly a ``str`` (not a subclass, not a lazy object), else None: the grader
    compares only plain data, so no code of the learner's runs while it compares."""
    return answer if type(answer) is str else None


def plain_pair(answer) -> tuple | None:
    """``(metric, value)`` as plain data — exactly a tuple of a ``str`` and a number (int, float, or a
    NumPy scalar, copied to a float) — else None."""
    import numpy as np

    if type(answer) is not tuple or len(answer) != 2 or type(answer[0]) is not str:
        return None
    value = answer[1]
    if type(value) in (int, float) or (type(value).__module__ == "numpy" and isinstance(value, np.number)):
        return answer[0], float(value)
    return None


def fresh_seed() -> int:
    """A seed drawn at random for one grading (never the lab's): the inputs it draws cannot be known in
    advance, so no output can be prepared for them. A right fix passes on every seed."""
    import secrets

    return SEED + 1 + secrets.randbelow(10**6)
