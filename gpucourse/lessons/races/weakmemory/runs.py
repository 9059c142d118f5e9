"""``run_kernel``: a ``@cuda.jit`` kernel run under the microscope's race scheduler, with one of the weak-memory
package's memories deciding what every load reads (``WeakMemoryHook``); ``RaceReport``: what that run did."""

from __future__ import annotations

import inspect
import linecache
import sys
import types
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from gpucourse import validate
from gpucourse.errors import CourseError, InvalidConfig
from gpucourse.lessons.races.weakmemory.models import (
    MEMORIES,
    MEMORY_CLASSES,
    RandomChooser,
    SequentialMemory,
    StalestChooser,
)
from gpucourse.microscope import MemorySystem as _MicroscopeMemory
from gpucourse.microscope import trace as _microscope_trace

SCHEDULES = ("sequential", "round-robin", "random")
MAX_THREADS = 2048
DEFAULT_MAX_STEPS = 200_000
SHARED_GARBAGE = 12345  # shared memory starts with whatever was there: never with zeros


class TooManySteps(CourseError, RuntimeError):
    """The kernel did not finish within the step limit (usually a spin-wait with no iteration cap)."""


# --------------------------------------------------------------------------------------------
# The race scheduler is the microscope's (gpucourse/microscope/scheduler.py): it runs a kernel's
# Python source, one simulated thread at a time, switching at every memory access. This part plugs
# the package's memories (models.py) into it through the microscope's memory-system hook.


def _python_of(kernel):
    fn = getattr(kernel, "py_func", None)
    if not isinstance(fn, types.FunctionType):
        raise InvalidConfig(f"run_kernel needs a @cuda.jit kernel, got {type(kernel).__name__}")
    return fn


LOST_COLUMNS = ["array", "element", "space", "lost_thread", "lost_step", "lost_value", "thread", "load_step",
                "loaded_value", "store_step", "stored_value", "line"]
EVENT_COLUMNS = ("step", "thread", "block", "tid", "op", "space", "array", "element", "value", "new_value",
                 "version", "newest_version", "line")


def _shared_garbage(dtype: np.dtype):
    """What an uninitialised shared element reads: never zero (a kernel must not rely on zeros)."""
    if dtype.kind in "fc":
        return np.nan
    return True if dtype.kind == "b" else SHARED_GARBAGE if dtype.itemsize > 1 else 123

_ENGINE_FILES = (__file__.removesuffix("c"), )


class WeakMemoryHook(_MicroscopeMemory):
    """The microscope's memory-system hook driven by one of this module's memories.

    ``microscope.trace(kernel, grid, block, *args, schedule="random", seed=1, memory=WeakMemoryHook("weak", 2))``
    runs the kernel under the microscope's race scheduler while this model decides every value a
    global load reads (shared memory stays sequentially consistent). It also records each access
    in order (``events``), so a RaceReport can find lost updates and stale reads and draw them.
    ``seed=None`` makes the model's choices the deterministic stalest-first ones."""

    def __init__(self, memory: str = "weak", seed: int | None = None, names: dict | None = None):
        memory = validate.choice("memory", memory, MEMORIES)
        chooser = StalestChooser() if seed is None else RandomChooser(validate.integer("seed", seed, minimum=0))
        self.name = memory
        self.model = MEMORY_CLASSES[memory](chooser, self._initial)
        self.shared = SequentialMemory(None, self._initial)
        self.names = names or {}  # id(the ndarray that owns a buffer) -> parameter name
        self.cells: dict = {}  # location -> (array, index): where its value lives on the host
        self.events: list[tuple] = []
        self.max_steps = DEFAULT_MAX_STEPS

    def _initial(self, loc):
        array, index = self.cells[loc]
        return _shared_garbage(array.dtype) if loc[0] == "shared" else array[index]

    def _where(self, thread, space, array, index, address):
        loc = (space, thread.block.linear if space == "shared" else None, address)
        if loc not in self.cells:
            self.cells[loc] = (array, index)
        root = array
        while isinstance(root.base, np.ndarray):
            root = root.base
        name = self.names.get(id(root), "shared" if space == "shared" else f"global@{address}")
        flat = int(np.ravel_multi_index(index, array.shape)) if array.ndim > 1 else int(index[0])
        return loc, name, flat

    @staticmethod
    def _line() -> int:
        frame = sys._getframe(2)
        while frame is not None and (frame.f_code.co_filename in _ENGINE_FILES
                                     or "microscope" in frame.f_code.co_filename):
            frame = frame.f_back
        return frame.f_lineno if frame is not None else -1

    def _log(self, thread, *rest) -> None:
        if len(self.events) >= self.max_steps:
            raise TooManySteps(_too_many_steps("the kernel", self.max_steps))
        self.events.append((len(self.events) + 1, thread.uid, thread.block.linear, thread.tid, *rest, self._line()))

    def load(self, thread, space, array, index, address):
        loc, name, flat = self._where(thread, space, array, index, address)
        memory = self.model if space == "global" else self.shared
        value, version, newest = memory.load(thread.block.linear, loc)
        value = array.dtype.type(value)
        self._log(thread, "load", space, name, flat, value, None, version, newest)
        return value

    def store(self, thread, space, array, index, address, value) -> None:
        loc, name, flat = self._where(thread, space, array, index, address)
        value = array.dtype.type(value)
        memory = self.model if space == "global" else self.shared
        version = memory.store(thread.block.linear, loc, value)
        if space == "shared":
            array[index] = value
        self._log(thread, "store", space, name, flat, value, None, version, version)

    def atomic(self, thread, space, array, index, address, update):
        loc, name, flat = self._where(thread, space, array, index, address)
        cast = array.dtype.type
        memory = self.model if space == "global" else self.shared
        new = []

        def fn(old):
            new.append(cast(update(cast(old))))
            return new[-1]

        old, version = memory.rmw(thread.block.linear, loc, fn)
        if space == "shared":
            array[index] = new[-1]
        self._log(thread, "atomic", space, name, flat, cast(old), new[-1], version, version)
        return cast(old)

    def fence(self, thread, scope) -> None:
        scope = "gpu" if scope == "device" else scope
        self.model.fence(thread.block.linear, scope)
        self._log(thread, "fence." + scope, "", "", -1, None, None, -1, -1)

    def barrier(self, block) -> None:
        pass  # block scope: nothing changes for other blocks

    def kernel_end(self) -> None:
        for memory in (self.model, self.shared):
            for loc, value in memory.final().items():
                array, index = self.cells[loc]
                array[index] = value


def _too_many_steps(kernel_name: str, max_steps: int) -> str:
    return (f"{kernel_name} did not finish within {max_steps} memory operations under the race scheduler: a thread "
            f"waiting for another that never runs (or never writes) spins forever. Cap every spin-wait with an "
            f"iteration limit")


@dataclass
class RaceReport:
    """What one run under the race scheduler did: every memory operation, in the order it happened."""

    kernel: str
    griddim: tuple
    blockdim: tuple
    schedule: str
    seed: int
    memory: str
    steps: int
    events: pd.DataFrame
    source: dict = field(default_factory=dict)  # line number -> source text
    microscope: object = None  # the microscope's own Report of the launch (races(), memory()…)

    @property
    def caption(self) -> str:
        memory = {"weak": "weak-memory MODEL", "weak-acqrel": "weak-memory MODEL, fences release/acquire only"}.get(
            self.memory, "sequentially consistent memory")
        return f"{self.kernel}, race scheduler ({self.schedule}, seed {self.seed}), {memory}"

    def lost_updates(self) -> pd.DataFrame:
        """Read-modify-writes whose effect is gone from memory: one row per lost update.

        A write W (a load-then-store by one thread, or an atomic) is lost when the final value of
        its location does not build on it (following each write back to the version its thread
        had read) and another thread's load-then-store overwrote it without having seen it. For a
        counter, the number of rows is exactly the number of increments missing."""
        rows, last_load, writes = [], {}, {}
        for e in self.events.itertuples(index=False):
            key = (e.space, e.array, e.element, e.block if e.space == "shared" else None)
            if e.op == "load":
                last_load[(e.thread, key)] = e
            elif e.op == "store":
                seen = last_load.pop((e.thread, key), None)
                writes.setdefault(key, []).append((e, None if seen is None else seen.version, seen))
            elif e.op == "atomic" and e.new_value is not None:
                writes.setdefault(key, []).append((e, e.version - 1, None))
        for chain in writes.values():
            by_version = {w.version: (w, parent) for w, parent, _ in chain}
            alive, version = set(), max(by_version)
            while version in by_version:  # walk back from the final value
                alive.add(version)
                parent = by_version[version][1]
                version = -1 if parent is None else parent
            ordered = sorted(chain, key=lambda item: item[0].version)
            for i, (w, _, _) in enumerate(ordered):
                if w.version in alive:
                    continue
                for s, parent, seen in ordered[i + 1:]:
                    if s.op == "store" and parent is not None and parent < w.version and s.thread != w.thread:
                        rows.append({
                            "array": w.array, "element": w.element, "space": w.space, "lost_thread": w.thread,
                            "lost_step": w.step, "lost_value": w.value if w.op == "store" else w.new_value,
                            "thread": s.thread, "load_step": seen.step, "loaded_value": seen.value,
                            "store_step": s.step, "stored_value": s.value, "line": s.line,
                        })
                        break
        return pd.DataFrame(rows, columns=LOST_COLUMNS).sort_values("store_step", ignore_index=True)

    def stale_reads(self) -> pd.DataFrame:
        """Loads of global memory that returned an older value than the newest one already written."""
        ev = self.events
        stale = ev[(ev.op == "load") & (ev.version < ev.newest_version)]
        return stale[["step", "thread", "block", "array", "element", "value", "version", "newest_version", "line"]]

    def races(self) -> pd.DataFrame:
        """Lost updates and stale reads, one row each, with a ``kind`` column."""
        lost = self.lost_updates().assign(kind="lost update")
        stale = self.stale_reads().rename(columns={"step": "load_step"}).assign(kind="stale read")
        return pd.concat([lost, stale], ignore_index=True)


def run_kernel(kernel, griddim, blockdim, *args, schedule: str = "random", seed: int = 0, memory: str = "sc",
               resident_blocks: int | None = None, max_steps: int = DEFAULT_MAX_STEPS) -> RaceReport:
    """Run one launch of ``kernel`` under the race scheduler; NumPy arrays are updated in place.

    The microscope's race scheduler runs the kernel, with this module's memory (``memory``) as its
    memory-system hook: the hook decides what every load reads and records every access in order.
    Checks its input first: a schedule, memory or seed that is not allowed raises ``InvalidConfig``
    with one line saying what is, before anything runs. A barrier that not every thread of a block
    reaches raises the microscope's ``BarrierError``."""
    schedule = validate.choice("schedule", schedule, SCHEDULES)
    memory = validate.choice("memory", memory, MEMORIES)
    seed = validate.integer("seed", seed, minimum=0)
    max_steps = validate.integer("max_steps", max_steps, minimum=1)
    grid, block = validate.grid(griddim), validate.block(blockdim)
    threads = grid[0] * grid[1] * grid[2] * block[0] * block[1] * block[2]
    if threads > MAX_THREADS:
        raise InvalidConfig(f"the race scheduler runs at most {MAX_THREADS} threads per launch; this launch has "
                            f"{threads}: make the grid or the block smaller")
    if resident_blocks is not None:
        resident_blocks = validate.integer("resident_blocks", resident_blocks, minimum=1)
    fn = _python_of(kernel)
    params = list(inspect.signature(fn).parameters)
    if len(params) != len(args):
        raise InvalidConfig(f"{getattr(kernel, '__name__', fn.__name__)} takes {len(params)} argument(s) "
                            f"({', '.join(params)}); got {len(args)}")
    names = {}
    for name, arg in zip(params, args, strict=True):
        if isinstance(arg, np.ndarray):
            root = arg
            while isinstance(root.base, np.ndarray):
                root = root.base
            names[id(root)] = name
    hook = WeakMemoryHook(memory, seed + 1 if schedule == "random" else None, names)
    hook.max_steps = max_steps
    scope = _microscope_trace(kernel, griddim, blockdim, *args, schedule=schedule, seed=seed, memory=hook,
                              max_threads=MAX_THREADS, resident_blocks=resident_blocks)
    raw = hook.events
    events = pd.DataFrame(raw, columns=list(EVENT_COLUMNS))
    for column in ("value", "new_value"):  # keep each value's own type (an int32 count stays an integer)
        position = EVENT_COLUMNS.index(column)
        events[column] = pd.Series([e[position] for e in raw], dtype=object)
    filename = fn.__code__.co_filename
    lines = sorted(set(events.line)) if len(events) else []
    source = {int(n): linecache.getline(filename, int(n)).strip() for n in lines if n > 0}
    name = getattr(kernel, "__name__", fn.__name__)
    return RaceReport(name, grid, block, schedule, seed, memory, len(raw), events, source, scope)
