"""The recording side of a traced launch: source lines, memory accesses, shared arrays, barriers.

A source line is identified by its code object and line number (plus the call site, for lines
inside device functions) and by how many times this thread executed it before: under CPython
3.11 the bytecode offset is not a stable identity, a line number and an occurrence count are.
The k-th execution of a line by the lanes of one warp is one warp-wide instruction.
"""

from __future__ import annotations

import functools
import linecache
import os
import re
import sys
import sysconfig

import numpy as np

from gpucourse.microscope.errors import LaunchConfigError, MicroscopeError, TraceTooLarge
from gpucourse.microscope.limits import check_shared_memory
from gpucourse.microscope.memory import AddressSpace, MemorySystem, TracedArray
from gpucourse.microscope.races import RaceDetector
from gpucourse.microscope.scheduler import Scheduler

_MICROSCOPE_DIR = os.path.dirname(os.path.abspath(__file__))


@functools.cache
def _library_dirs() -> tuple[str, ...]:
    import numba
    import numba.cuda

    dirs = {
        _MICROSCOPE_DIR,
        os.path.dirname(np.__file__),
        os.path.dirname(numba.__file__),
        os.path.dirname(os.path.dirname(numba.cuda.__file__)),
    }
    for key in ("stdlib", "platstdlib"):
        dirs.add(sysconfig.get_paths()[key])
    return tuple(sorted(d + os.sep for d in dirs))


_SHARED_NAME = re.compile(r"(\w+)\s*(?::[^=]*)?=\s*\w+\.shared\.array")


class Tracer:
    """Everything one traced launch records; ``run()`` executes it under the scheduler."""

    def __init__(
        self,
        fn,
        args_for,
        blocks,
        *,
        schedule,
        seed,
        memory,
        arch_cc,
        dynamic_shared_bytes,
        shared_opt_in,
        max_lines,
        resident_blocks=None,
    ):
        self.fn, self.kernel_code = fn, fn.__code__
        self.args_for = args_for  # builds the kernel's arguments once the tracer exists
        self.args = ()
        self.blocks = blocks
        self.memory = memory if memory is not None else MemorySystem()
        self._direct = type(self.memory) is MemorySystem
        self.space = AddressSpace()
        self.races = RaceDetector()
        self.cc, self.dynamic_shared_bytes, self.shared_opt_in = arch_cc, dynamic_shared_bytes, shared_opt_in
        self.max_lines, self.lines_executed = max_lines, 0
        self.sched = Scheduler(
            blocks,
            self._body,
            schedule,
            seed,
            on_barrier=self._on_barrier,
            on_syncwarp=self.races.syncwarp,
            describe_line=self.describe_line,
            resident_blocks=resident_blocks,
        )
        # (warp uid, (line, array, op), k) -> (TracedArray, warp, lanes, byte offsets)
        self.requests: dict = {}
        self.codes: list = [fn.__code__]  # code index -> code object (index 0: the kernel)
        self._code_index = {id(fn.__code__): 0}
        self._user_code = {id(fn.__code__): True}
        self._kernel_keys: dict = {}
        self._library = _library_dirs()
        self._local = self._local_trace
        self._kernel_local = self._make_kernel_trace()

    # -- source lines -------------------------------------------------------------------------------

    def _is_user(self, code) -> bool:
        verdict = self._user_code.get(id(code))
        if verdict is None:
            name = code.co_filename
            verdict = not name.startswith((*self._library, "<frozen"))
            self._user_code[id(code)] = verdict
            if verdict:
                self._code_index[id(code)] = len(self.codes)
                self.codes.append(code)
        return verdict

    def line_key(self, frame) -> tuple:
        """((code index, line), ...) from the kernel's line down to the executing line."""
        code = frame.f_code
        if code is self.kernel_code:
            lineno = frame.f_lineno
            key = self._kernel_keys.get(lineno)
            if key is None:
                key = self._kernel_keys[lineno] = ((0, lineno),)
            return key
        parts = []
        while frame is not None:
            code = frame.f_code
            if code is self.kernel_code:
                parts.append((0, frame.f_lineno))
                break
            if self._is_user(code):
                parts.append((self._code_index[id(code)], frame.f_lineno))
            frame = frame.f_back
        return tuple(reversed(parts))

    def where(self, key) -> tuple[str, int, str]:
        """(function name, line number, source text) of the innermost line of ``key``."""
        code_index, lineno = key[-1]
        code = self.codes[code_index]
        return code.co_name, lineno, linecache.getline(code.co_filename, lineno).strip()

    def describe_line(self, key) -> str:
        if not key:
            return "an unknown line"
        name, lineno, source = self.where(key)
        return f"line {lineno} ({source})" if source else f"line {lineno} of {name}"

    def _make_kernel_trace(self):
        # The per-line hook of the kernel's own frames: the hottest code of a trace, kept minimal.
        kernel_keys, sched, check = self._kernel_keys, self.sched, self._check_line_budget

        def kernel_trace(frame, event, arg):
            if event == "line":
                lineno = frame.f_lineno
                key = kernel_keys.get(lineno)
                if key is None:
                    key = kernel_keys[lineno] = ((0, lineno),)
                lines = sched.current.lines
                lines.append(key)
                if not len(lines) & 0x3FF:
                    check()
            return kernel_trace

        return kernel_trace

    def _global_trace(self, frame, event, arg):
        code = frame.f_code
        if code is self.kernel_code:
            return self._kernel_local
        return self._local if self._is_user(code) else None

    def _local_trace(self, frame, event, arg):
        if event == "line":
            lines = self.sched.current.lines
            lines.append(self.line_key(frame))
            if not len(lines) & 0x3FF:
                self._check_line_budget()
        return self._local

    def _check_line_budget(self) -> None:
        self.lines_executed = sum(len(t.lines) for t in self.sched.threads)
        if self.lines_executed > self.max_lines:
            raise TraceTooLarge(
                f"the traced launch executed more than {self.max_lines:,} source lines; trace fewer threads or a "
                "smaller problem (or raise max_lines=)"
            )

    # -- running --------------------------------------------------------------------------------------

    def run(self) -> None:
        self.args = self.args_for(self)
        previous = sys.gettrace()  # e.g. a coverage tool's tracer: put it back afterwards
        try:
            self.sched.run()
        finally:
            sys.settrace(previous)
        self.lines_executed = sum(len(t.lines) for t in self.sched.threads)
        self.memory.kernel_end()

    def _body(self, t) -> None:
        # Every greenlet needs tracing switched on for itself; the trace function is shared.
        sys.settrace(self._global_trace)
        try:
            self.fn(*self.args)
        except Exception as exc:
            if not isinstance(exc, MicroscopeError):
                _say_where(exc, f"{t}, {self.describe_line(t.lines[-1]) if t.lines else 'its first line'}")
            raise

    def _on_barrier(self, block) -> None:
        sys.settrace(None)  # as in access(): the memory system's lines are not the kernel's
        try:
            self.memory.barrier(block)
        finally:
            sys.settrace(self._global_trace)

    # -- memory ---------------------------------------------------------------------------------------

    def access(self, arr: TracedArray, index: tuple, offset: int, op: str, frame, value=None):
        """One load, store or atomic (``value`` = the update function) of one lane: schedule it,
        count it into its warp request, check it for races, and let the memory system do it."""
        sched = self.sched
        if sched.preemptive:
            sched.preempt()
        t = sched.current
        if frame.f_code is self.kernel_code:
            key = self._kernel_keys.get(frame.f_lineno) or self.line_key(frame)
        else:
            key = self.line_key(frame)
        what = (key, arr.name, op)
        occurrences = t.occurrences
        k = occurrences.get(what, 0)
        occurrences[what] = k + 1
        rk = (t.warp.uid, what, k)
        entry = self.requests.get(rk)
        if entry is None:
            entry = self.requests[rk] = (arr, t.warp, [], [])
        entry[2].append(t.lane)
        entry[3].append(offset)
        alloc = arr._alloc
        self.races.access(t, alloc, offset, op, key, arr.name, index)
        if self._direct:  # the default memory system, without the call
            if op == "load":
                return arr._array[index]
            if op == "store":
                arr._array[index] = value
                return None
        # The memory system's own Python lines are not the kernel's: no line events while it runs.
        sys.settrace(None)
        try:
            if op == "load":
                return self.memory.load(t, alloc.space, arr._array, index, alloc.base + offset)
            if op == "store":
                return self.memory.store(t, alloc.space, arr._array, index, alloc.base + offset, value)
            return self.memory.atomic(t, alloc.space, arr._array, index, alloc.base + offset, value)
        finally:
            sys.settrace(self._global_trace)

    def atomic(self, arr, index, update, frame):
        if not isinstance(arr, TracedArray):  # a local array: private to the thread
            old = arr[index]
            arr[index] = update(old)
            return old
        index, offset = arr.element(index)
        return self.access(arr, index, offset, "atomic", frame, update)

    def fence(self, scope: str) -> None:
        sched = self.sched
        if sched.preemptive:
            sched.preempt()
        self.races.fence(sched.current, scope)
        sys.settrace(None)  # as in access(): the memory system's lines are not the kernel's
        try:
            self.memory.fence(sched.current, scope)
        finally:
            sys.settrace(self._global_trace)

    def shared_array(self, shape, dtype, frame) -> TracedArray:
        t = self.sched.current
        block = t.block
        key = self.line_key(frame)
        what = ("shared.array", key)
        k = t.occurrences.get(what, 0)
        t.occurrences[what] = k + 1
        arr = block.shared.get((key, k))
        if arr is not None:
            return arr
        dtype = _as_dtype(dtype)
        match = _SHARED_NAME.search(self.where(key)[2])
        name = match.group(1) if match else f"shared@{key[-1][1]}"
        if isinstance(shape, int) and shape == 0:
            if not self.dynamic_shared_bytes:
                raise LaunchConfigError(
                    f"{self.describe_line(key)} uses dynamic shared memory (cuda.shared.array(0, ...)) but the "
                    "launch gives it 0 bytes: pass dynamic_shared_bytes=<bytes per block> to trace()"
                )
            arr = self.space.shared_array(block, None, dtype, self, name, dynamic_bytes=self.dynamic_shared_bytes)
        else:
            arr = self.space.shared_array(block, shape, dtype, self, name)
            check_shared_memory(block.shared_bytes, self.dynamic_shared_bytes, self.cc, self.shared_opt_in)
        block.shared[(key, k)] = arr
        return arr

    # -- barriers and warps -------------------------------------------------------------------------------

    def barrier(self, kind: str, value, frame):
        return self.sched.barrier(self.line_key(frame), value, kind)

    def warp_op(self, op: str, mask, value, arg, frame):
        return self.sched.warp_op(op, mask, value, arg, self.line_key(frame))


def _as_dtype(dtype) -> np.dtype:
    try:
        return np.dtype(dtype)
    except TypeError:
        try:
            from numba.cuda.np import numpy_support  # numba-cuda
        except ImportError:  # numba's own CUDA simulator (no CUDA package installed)
            from numba.np import numpy_support

        try:
            return numpy_support.as_dtype(dtype)
        except (TypeError, ValueError, NotImplementedError, KeyError):
            raise MicroscopeError(f"cannot make a shared array of dtype {dtype!r}") from None


def _say_where(exc: Exception, where: str) -> None:
    """Prefix the kernel's own error with the simulated thread and line, keeping its type."""
    if exc.args and isinstance(exc.args[0], str):
        exc.args = (f"{where}: {exc.args[0]}",) + exc.args[1:]
    else:
        exc.add_note(f"raised by {where}")
