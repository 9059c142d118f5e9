"""Warp intrinsics with the hardware's semantics, for Numba's CUDA simulator.

The simulator has no warps, so ``cuda.shfl_sync`` and friends are missing. Here each intrinsic is
a rendezvous of the lanes named in its mask: when all of them have arrived, the results are
computed at once from every lane's operand, as the hardware does in one instruction.

Semantics (PTX ISA, ``shfl.sync`` / ``vote.sync`` / ``match.sync``; Numba passes width 32):

* ``shfl_sync(mask, v, src)`` reads lane ``src % 32``; ``shfl_up_sync(mask, v, d)`` reads
  ``lane - d`` and keeps its own value below lane ``d``; ``shfl_down_sync`` reads ``lane + d`` and
  keeps its own value when that passes lane 31; ``shfl_xor_sync(mask, v, m)`` reads ``lane ^ m``.
  Reading a lane that is not in ``mask`` is undefined on the hardware: the microscope refuses it.
* ``all_sync``/``any_sync``/``eq_sync`` vote over the lanes in ``mask``; ``ballot_sync`` returns
  the mask of those whose predicate is non-zero; ``match_any_sync`` the mask of lanes holding the
  same bits as the caller; ``match_all_sync`` ``(mask, True)`` when all agree, else ``(0, False)``.
* The caller must be in ``mask``, and every lane in ``mask`` must reach a matching intrinsic
  with the same mask; otherwise the hardware hangs or is undefined and the microscope raises
  ``WarpSyncError``. ``match.sync`` waits only for the non-exited lanes of its mask (PTX ISA), and
  lanes beyond the end of a partial warp count as exited: ``match_any_sync(0xffffffff, v)`` in a
  block of 10 threads compares lanes 0–9, and ``match_all_sync`` then returns ``(0x3ff, True)``.
* ``activemask()`` returns the lanes that reach the same call together: inside an odd/even branch
  each side sees only its own lanes (0x55555555 or 0xaaaaaaaa), in traced and in plain launches.

Masks come back as non-negative Python ints (on a GPU, Numba types ``ballot_sync`` and
``match_*_sync`` as signed int32, so bit 31 makes them negative there).
"""

from __future__ import annotations

import sys
import threading

import numpy as np

from gpucourse.hardware import WARP_SIZE
from gpucourse.microscope.errors import WarpSyncError

FULL_MASK = 0xFFFFFFFF

SHUFFLES = ("shfl_sync", "shfl_up_sync", "shfl_down_sync", "shfl_xor_sync")
VOTES = ("all_sync", "any_sync", "eq_sync", "ballot_sync")
MATCHES = ("match_any_sync", "match_all_sync")
RENDEZVOUS_OPS = SHUFFLES + VOTES + MATCHES + ("syncwarp",)


def lanes_in(mask: int) -> list[int]:
    return [lane for lane in range(WARP_SIZE) if mask >> lane & 1]


def waited_for(op: str, mask: int, lane_count: int) -> int:
    """The lanes of ``mask`` an intrinsic waits for in a warp of ``lane_count`` lanes: match.sync skips
    lanes that do not exist (they count as exited); every other intrinsic names only existing lanes."""
    if op in MATCHES:
        return mask & ((1 << lane_count) - 1)
    return mask


def check_mask(op: str, mask, lane: int) -> int:
    """The mask as a 32-bit int; the calling lane must be in it."""
    try:
        mask = int(mask) & FULL_MASK
    except (TypeError, ValueError):
        raise WarpSyncError(f"{op}: the mask must be an integer such as 0xffffffff; got {mask!r}") from None
    if not mask >> lane & 1:
        raise WarpSyncError(
            f"{op}: lane {lane} called it with mask {mask:#010x}, which does not include lane {lane}; the calling "
            "lane must be in the mask"
        )
    return mask


def shuffle_source(op: str, lane: int, operand: int) -> int:
    """The lane whose value ``lane`` receives (PTX shfl.sync with Numba's clamp values)."""
    b = int(operand) & 31
    if op == "shfl_sync":
        return b
    if op == "shfl_up_sync":
        return lane - b if lane - b >= 0 else lane
    if op == "shfl_down_sync":
        return lane + b if lane + b < WARP_SIZE else lane
    return lane ^ b  # shfl_xor_sync


def _bits(value) -> bytes:
    # match.sync compares bit patterns (so -0.0 differs from 0.0 and a NaN matches itself).
    return np.asarray(value).tobytes()


def resolve(op: str, mask: int, operands: dict[int, tuple]) -> dict[int, object]:
    """Results of one warp-wide instruction: ``operands[lane] = (value, arg)`` for each lane in mask."""
    lanes = sorted(operands)
    if op in SHUFFLES:
        out = {}
        for lane in lanes:
            src = shuffle_source(op, lane, operands[lane][1])
            if src not in operands:
                raise WarpSyncError(
                    f"{op}: lane {lane} reads lane {src}, which is not in mask {mask:#010x}; the hardware returns "
                    "an undefined value there, so name every lane you read in the mask"
                )
            out[lane] = operands[src][0]
        return out
    if op in VOTES:
        preds = {lane: bool(operands[lane][0]) for lane in lanes}
        if op == "all_sync":
            result = all(preds.values())
        elif op == "any_sync":
            result = any(preds.values())
        elif op == "eq_sync":
            result = len(set(preds.values())) == 1
        else:
            result = sum(1 << lane for lane, p in preds.items() if p)
        return dict.fromkeys(lanes, result)
    if op == "match_any_sync":
        keys = {lane: _bits(operands[lane][0]) for lane in lanes}
        return {lane: sum(1 << other for other in lanes if keys[other] == keys[lane]) for lane in lanes}
    if op == "match_all_sync":
        same = len({_bits(operands[lane][0]) for lane in lanes}) == 1
        taking_part = sum(1 << lane for lane in lanes)  # the mask's non-exited lanes
        return dict.fromkeys(lanes, (taking_part, True) if same else (0, False))
    if op == "syncwarp":
        return dict.fromkeys(lanes)
    raise ValueError(f"unknown warp operation {op!r}")


# ---------------------------------------------------------------------------------------------
# The plain simulator (``kernel[grid, block](...)`` with NUMBA_ENABLE_CUDASIM=1): its threads run
# concurrently as Python threads, so lanes meet under a condition variable.

_POLL_SECONDS = 0.05
_cond = threading.Condition()
_rooms: dict = {}


class _Room:
    def __init__(self):
        self.arrivals: dict[int, tuple] = {}  # lane -> (op, mask, value, arg)
        self.results: dict[int, object] = {}


def _block_threads(manager) -> dict[int, threading.Thread]:
    return {t.thread_id: t for t in threading.enumerate() if getattr(t, "_manager", None) is manager}


def _exited(manager) -> set[int]:
    # Filled by the wrapped BlockThread.run below: a thread that is not alive may not have started yet.
    return manager.__dict__.setdefault("_gpucourse_exited", set())


def _warp_lane_count(manager, warp: int) -> int:
    bx, by, bz = manager._block_dim
    return max(0, min(WARP_SIZE, bx * by * bz - warp * WARP_SIZE))


def _try_complete(room: _Room, mask: int) -> None:
    lanes = lanes_in(mask)
    if not all(lane in room.arrivals for lane in lanes):
        return
    ops = {room.arrivals[lane][0] for lane in lanes}
    masks = {room.arrivals[lane][1] for lane in lanes}
    if len(ops) > 1 or len(masks) > 1:
        raise WarpSyncError(
            f"lanes of mask {mask:#010x} reached different warp intrinsics or masks ({sorted(ops)}); every lane in "
            "the mask must call the same intrinsic with the same mask"
        )
    op = ops.pop()
    operands = {lane: room.arrivals.pop(lane)[2:] for lane in lanes}
    room.results.update(resolve(op, mask, operands))


def _check_missing(op: str, mask: int, manager, warp: int, room: _Room) -> None:
    lane_count = _warp_lane_count(manager, warp)
    threads, exited = _block_threads(manager), _exited(manager)
    for lane in lanes_in(mask):
        if lane in room.arrivals:
            continue
        if lane >= lane_count:
            raise WarpSyncError(
                f"{op}: mask {mask:#010x} names lane {lane}, but warp {warp} has only {lane_count} lanes; name only "
                "lanes that exist"
            )
        t = threads.get(warp * WARP_SIZE + lane)
        if t is not None and t.syncthreads_blocked:
            raise WarpSyncError(
                f"{op}: lane {lane} of mask {mask:#010x} waits in syncthreads instead; every lane in the mask must "
                "reach the intrinsic"
            )
        if warp * WARP_SIZE + lane in exited:
            raise WarpSyncError(
                f"{op}: lane {lane} of mask {mask:#010x} exited without reaching it; every lane in the mask must "
                "reach the intrinsic"
            )


def _plain_rendezvous(op: str, mask, value=None, arg=None):
    t = threading.current_thread()
    manager = getattr(t, "_manager", None)
    if manager is None:
        raise WarpSyncError(f"cuda.{op} can only be called inside a kernel")
    lane, warp = t.thread_id % WARP_SIZE, t.thread_id // WARP_SIZE
    mask = check_mask(op, mask, lane)
    wait_mask = waited_for(op, mask, _warp_lane_count(manager, warp))
    key = (manager, warp)
    with _cond:
        room = _rooms.setdefault(key, _Room())
        room.arrivals[lane] = (op, mask, value, arg)
        _try_complete(room, wait_mask)
        _cond.notify_all()
        while lane not in room.results:
            if getattr(t, "abort", False):
                room.arrivals.pop(lane, None)
                raise RuntimeError("aborted: another simulated thread failed")
            _cond.wait(_POLL_SECONDS)
            if lane not in room.results:
                _check_missing(op, wait_mask, manager, warp, room)
        result = room.results.pop(lane)
        if not room.arrivals and not room.results:
            del _rooms[key]
        return result


class _ActiveMaskRoom:
    def __init__(self):
        self.waiting: dict[int, tuple] = {}  # lane -> call site (code, line)
        self.results: dict[int, int] = {}


_activemask_rooms: dict = {}


def _quiescent(manager, warp: int, room: _ActiveMaskRoom) -> bool:
    """Every lane of the warp waits in activemask, in another warp intrinsic or in syncthreads, or has
    exited: the lanes that are in activemask now are the ones that reached it together."""
    threads, exited = _block_threads(manager), _exited(manager)
    rendezvous = _rooms.get((manager, warp))
    for lane in range(_warp_lane_count(manager, warp)):
        tid = warp * WARP_SIZE + lane
        if lane in room.waiting or tid in exited or (rendezvous is not None and lane in rendezvous.arrivals):
            continue
        t = threads.get(tid)
        if t is None or not t.syncthreads_blocked:
            return False  # still running (or not started yet)
    return True


def _plain_activemask(self):
    # As the hardware (and trace()) does: the lanes that execute this call together. A plain launch
    # runs its threads freely, so the caller waits until its warp is quiescent, then the lanes that
    # wait at the same call site form the mask (each side of a divergent branch has its own).
    t = threading.current_thread()
    manager = getattr(t, "_manager", None)
    if manager is None:
        raise WarpSyncError("cuda.activemask can only be called inside a kernel")
    lane, warp = t.thread_id % WARP_SIZE, t.thread_id // WARP_SIZE
    caller = sys._getframe(1)
    site = (caller.f_code, caller.f_lineno)
    key = (manager, warp)
    with _cond:
        room = _activemask_rooms.setdefault(key, _ActiveMaskRoom())
        room.waiting[lane] = site
        _cond.notify_all()
        while lane not in room.results:
            if getattr(t, "abort", False):
                room.waiting.pop(lane, None)
                raise RuntimeError("aborted: another simulated thread failed")
            if _quiescent(manager, warp, room):
                groups: dict = {}
                for other, where in room.waiting.items():
                    groups.setdefault(where, []).append(other)
                for lanes in groups.values():
                    room.results.update(dict.fromkeys(lanes, sum(1 << other for other in lanes)))
                room.waiting.clear()
                _cond.notify_all()
                break
            _cond.wait(_POLL_SECONDS)
        result = room.results.pop(lane)
        if not room.waiting and not room.results:
            del _activemask_rooms[key]
        return result


def _plain_lanemask_lt(self):
    return (1 << (threading.current_thread().thread_id % WARP_SIZE)) - 1


def _make_plain(op: str, two_operands: bool):
    if two_operands:

        def method(self, mask, value, arg):
            return _plain_rendezvous(op, mask, value, arg)

    else:

        def method(self, mask, value):
            return _plain_rendezvous(op, mask, value)

    method.__name__ = op
    return method


def _plain_syncwarp(self, mask=FULL_MASK):
    _plain_rendezvous("syncwarp", mask)


def install_warp_intrinsics() -> None:
    """Add the warp intrinsics to the simulator's fake ``cuda`` module (idempotent).

    After this, a plain ``kernel[grid, block](...)`` launch in simulator mode can call
    ``cuda.shfl_sync`` & co. ``trace()`` does not need it: it always provides them.
    """
    from numba.cuda.simulator.kernel import BlockThread
    from numba.cuda.simulator.kernelapi import FakeCUDAModule

    if getattr(FakeCUDAModule, "_gpucourse_warp_intrinsics", False):
        return
    original_run = BlockThread.run

    def run(self):  # record exits, so that a lane waiting for an exited lane fails at once
        try:
            original_run(self)
        finally:
            with _cond:
                _exited(self._manager).add(self.thread_id)
                _cond.notify_all()

    BlockThread.run = run

    from numba.cuda.simulator.kernel import BlockManager

    original_block_run = BlockManager.run

    def block_run(self, grid_point, *args):  # one manager runs every block: forget the last block's exits
        with _cond:
            _exited(self).clear()
        return original_block_run(self, grid_point, *args)

    BlockManager.run = block_run
    for op in SHUFFLES:
        setattr(FakeCUDAModule, op, _make_plain(op, two_operands=True))
    for op in VOTES + MATCHES:
        setattr(FakeCUDAModule, op, _make_plain(op, two_operands=False))
    FakeCUDAModule.syncwarp = _plain_syncwarp
    FakeCUDAModule.activemask = _plain_activemask
    FakeCUDAModule.lanemask_lt = _plain_lanemask_lt
    FakeCUDAModule._gpucourse_warp_intrinsics = True
