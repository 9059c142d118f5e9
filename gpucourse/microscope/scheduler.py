"""A cooperative scheduler for simulated CUDA threads: one runs at a time, deterministically.

Each simulated thread runs the kernel's Python function in its own greenlet (a coroutine with
its own stack, all in the caller's OS thread); exactly one runs at a time and it hands control
back when it waits (``syncthreads``, a warp intrinsic), ends, or, in the race schedules, at every
memory access. So the order of events is a pure function of the launch and the seed.

Schedules:

* ``"sequential"`` (default): blocks one after another; inside a block, threads in thread-id
  order, each until it waits or ends. Fast; like Numba's simulator, it hides lost updates.
* ``"round-robin"``: all threads of the grid are live at once and control moves to the next
  thread at every global/shared access, fence and atomic: the most adversarial interleaving.
* ``"random"``: as round-robin, but the next thread is drawn at random (``random.Random(seed)``).

Barriers and warp rendezvous keep their meaning in every schedule.
"""

from __future__ import annotations

import random
from collections import deque

from greenlet import getcurrent, greenlet
from numba.cuda.simulator.kernelapi import Dim3

from gpucourse.microscope.errors import BarrierError, MicroscopeError, WarpSyncError
from gpucourse.microscope.warp import WARP_SIZE, check_mask, lanes_in, resolve, waited_for

SCHEDULES = ("sequential", "round-robin", "random")
NEW, READY, BLOCKED, DONE = range(4)


class SimThread:
    """One simulated CUDA thread: its indices, its scheduling state and what the tracer records."""

    __slots__ = (
        "acquired",
        "bar_epoch",
        "block",
        "blockIdx",
        "fence_block_seq",
        "fence_device_seq",
        "glet",
        "lane",
        "lines",
        "occurrences",
        "result",
        "started",
        "state",
        "threadIdx",
        "tid",
        "uid",
        "wait_key",
        "wait_value",
        "warp",
        "warp_vc",
    )

    def __init__(self, uid: int, block: Block, tid: int, thread_idx: tuple[int, int, int]):
        self.uid, self.block, self.tid = uid, block, tid
        self.lane = tid % WARP_SIZE
        self.warp: Warp | None = None
        self.threadIdx = Dim3(*thread_idx)
        self.blockIdx = block.blockIdx
        self.state, self.started, self.glet = NEW, False, None
        self.result = self.wait_key = self.wait_value = None
        self.bar_epoch = 0  # syncthreads passed: accesses in different epochs of a block are ordered
        self.warp_vc = None  # vector clock over the warp's lanes, made by the first syncwarp
        self.fence_block_seq = self.fence_device_seq = -1
        self.acquired: dict[int, int] = {}  # thread uid -> last of its accesses this thread is ordered after
        self.lines: list = []  # executed source lines, in order
        self.occurrences: dict = {}  # (line, array, op) -> times executed so far

    def __repr__(self) -> str:
        return f"thread {tuple(self.threadIdx)} of block {tuple(self.blockIdx)}"


class Warp:
    __slots__ = ("block", "index", "lanes", "uid", "waiting")

    def __init__(self, uid: int, block: Block, index: int):
        self.uid, self.block, self.index = uid, block, index
        self.lanes: list[SimThread] = []
        self.waiting: dict[int, tuple] = {}  # lane -> (op, mask, value, arg, line key)


class Block:
    __slots__ = (
        "arrived",
        "blockIdx",
        "exited",
        "index",
        "linear",
        "shared",
        "shared_bytes",
        "threads",
        "warps",
    )

    def __init__(self, index: tuple[int, int, int], linear: int):
        self.index, self.linear, self.blockIdx = index, linear, Dim3(*index)
        self.threads: list[SimThread] = []
        self.warps: list[Warp] = []
        self.arrived: list[SimThread] = []  # threads waiting in syncthreads
        self.exited = 0
        self.shared: dict = {}  # the tracer's shared allocations of this block
        self.shared_bytes = 0

    def __repr__(self) -> str:
        return f"block {self.index}"


def make_grid(grid_dim, block_dim) -> list[Block]:
    """Blocks and their threads in launch order (x fastest), threads grouped into warps of 32."""
    blocks, uid = [], 0
    gx, gy, gz = grid_dim
    bx, by, bz = block_dim
    for linear in range(gx * gy * gz):
        block = Block((linear % gx, linear // gx % gy, linear // (gx * gy)), linear)
        for tid in range(bx * by * bz):
            t = SimThread(uid, block, tid, (tid % bx, tid // bx % by, tid // (bx * by)))
            if t.lane == 0:
                block.warps.append(Warp(len(blocks) * 64 + len(block.warps), block, len(block.warps)))
            t.warp = block.warps[-1]
            t.warp.lanes.append(t)
            block.threads.append(t)
            uid += 1
        blocks.append(block)
    return blocks


class _Abort(BaseException):
    """Unwinds a suspended simulated thread when the launch has failed (not an Exception on purpose)."""


class Scheduler:
    """Runs ``body(thread)`` for every simulated thread of ``blocks`` under one schedule.

    Each simulated thread is a greenlet whose parent is the hub (the caller of ``run()``). A thread
    that waits, is preempted or ends switches back to the hub, which picks the next one. Switching
    costs about a microsecond and never involves the OS scheduler, so a trace is as deterministic
    and as fast on a busy machine as on an idle one.
    """

    def __init__(
        self,
        blocks,
        body,
        schedule="sequential",
        seed=0,
        on_barrier=None,
        on_syncwarp=None,
        describe_line=str,
        resident_blocks=None,
    ):
        self.blocks, self.body, self.schedule = blocks, body, schedule
        # race schedules: how many blocks run at once (a GPU holds only so many; the rest start as blocks end)
        self.resident_blocks = len(blocks) if resident_blocks is None else max(1, min(resident_blocks, len(blocks)))
        self.threads = [t for b in blocks for t in b.threads]
        self.preemptive = schedule != "sequential"
        self.rng = random.Random(seed)
        self.on_barrier, self.on_syncwarp, self.describe_line = on_barrier, on_syncwarp, describe_line
        self.ready = deque() if schedule != "random" else []
        self.current: SimThread | None = None
        self.done_count, self._next_block = 0, 0
        self._hub = None
        self._next_up: SimThread | None = None  # chosen by a preempted thread for the hub to run
        self._aborting = False

    def run(self) -> None:
        """Run every thread to its end; raise the first error (the kernel's, or a MicroscopeError)."""
        if self.preemptive:
            for block in self.blocks[: self.resident_blocks]:
                self.ready.extend(block.threads)
            self._next_block = self.resident_blocks
        self._hub = getcurrent()
        try:
            self._loop()
        finally:
            self._unwind()

    def _loop(self) -> None:
        while True:
            t, self._next_up = self._next_up or self._pop_next(), None
            if t is None:
                if self.done_count == len(self.threads):
                    return
                raise self._deadlock_error()
            self.current = t
            if t.glet is None:
                t.glet = greenlet(self._thread_main, parent=self._hub)
                t.started = True
                t.glet.switch(t)
            else:
                t.glet.switch()
            if t.glet.dead:  # it ended (an exception in it has propagated to here already)
                t.state, t.glet = DONE, None
                self._thread_done(t)

    def _thread_main(self, t: SimThread) -> None:
        try:
            self.body(t)
        except _Abort:
            pass

    def _unwind(self) -> None:
        # After a failure, let suspended threads run their `finally` blocks (e.g. the simulator's
        # swapped-module bookkeeping) by raising _Abort where they wait.
        self._aborting = True
        for t in self.threads:
            if t.glet is not None and not t.glet.dead:
                try:
                    t.glet.throw(_Abort)
                except BaseException:  # noqa: BLE001 - an error while unwinding must not hide the first one
                    pass
            t.glet = None

    # -- choosing the next thread ---------------------------------------------------------------

    def _pop_next(self) -> SimThread | None:
        ready = self.ready
        if not ready and self._next_block < len(self.blocks):
            block = self.blocks[self._next_block - 1] if self._next_block else None
            if block is None or block.exited == len(block.threads):  # sequential: next block when done
                ready.extend(self.blocks[self._next_block].threads)
                self._next_block += 1
        if not ready:
            return None
        if self.schedule == "random":
            i = self.rng.randrange(len(ready))
            ready[i], ready[-1] = ready[-1], ready[i]
            return ready.pop()
        return ready.popleft()

    def _make_ready(self, t: SimThread) -> None:
        t.state = READY
        if t is not self.current:  # the current thread simply goes on running
            self.ready.append(t)

    def _to_hub(self) -> None:
        self._hub.switch()
        if self._aborting:
            raise _Abort

    def preempt(self) -> None:
        """A scheduling point (race schedules only): maybe let another thread run first."""
        t = self.current
        self.ready.append(t)
        nxt = self._pop_next()
        if nxt is not t:
            self._next_up = nxt
            self._to_hub()

    def _block_current(self) -> None:
        self.current.state = BLOCKED
        self._to_hub()

    # -- barriers --------------------------------------------------------------------------------------

    def barrier(self, line_key, value=None, kind="syncthreads"):
        """``syncthreads`` (and ``syncthreads_count/and/or``) for the current thread."""
        t = self.current
        block = t.block
        if block.exited:
            raise BarrierError(
                f"{kind} at {self.describe_line(line_key)} was reached by {t}, but {block.exited} thread(s) of that "
                "block had already exited: every thread of a block must reach each syncthreads"
            )
        t.wait_key, t.wait_value = ("syncthreads", line_key), value
        block.arrived.append(t)
        t.state = BLOCKED
        if len(block.arrived) < len(block.threads):
            self._check_activemask(t.warp)
            self._block_current()
            return t.result
        arrived = sorted(block.arrived, key=lambda u: u.tid)
        block.arrived = []
        keys = {u.wait_key for u in arrived}
        if len(keys) > 1:
            lines = ", ".join(sorted(self.describe_line(k[1]) for k in keys))
            raise BarrierError(
                f"threads of {block} reached syncthreads at different places ({lines}): every thread of a block "
                "must reach the same syncthreads"
            )
        values = [u.wait_value for u in arrived]
        if kind == "syncthreads_count":
            result = sum(1 for v in values if v)
        elif kind == "syncthreads_and":
            result = int(all(values))
        elif kind == "syncthreads_or":
            result = int(any(values))
        else:
            result = None
        if self.on_barrier is not None:
            self.on_barrier(block)
        for u in arrived:
            u.result, u.wait_key = result, None
            u.bar_epoch += 1
            self._make_ready(u)
        return result

    # -- warp rendezvous ------------------------------------------------------------------------------------

    def warp_op(self, op, mask, value=None, arg=None, line_key=None):
        """A warp intrinsic for the current thread: wait for the lanes in ``mask``, then all get results."""
        t = self.current
        warp = t.warp
        if op == "activemask":
            warp.waiting[t.lane] = (op, None, None, None, line_key)
        else:
            mask = check_mask(op, mask, t.lane)
            warp.waiting[t.lane] = (op, mask, value, arg, line_key)
            missing = False
            wait_mask = waited_for(op, mask, len(warp.lanes))  # match.sync: absent lanes count as exited
            for lane in lanes_in(wait_mask):
                if lane >= len(warp.lanes):
                    del warp.waiting[t.lane]
                    raise WarpSyncError(
                        f"{op} at {self.describe_line(line_key)}: mask {mask:#010x} names lane {lane}, but warp "
                        f"{warp.index} of {warp.block} has only {len(warp.lanes)} lanes; name only lanes that exist"
                    )
                if lane not in warp.waiting or warp.waiting[lane][0] == "activemask":
                    if warp.lanes[lane].state == DONE:
                        raise self._exited_lane_error(warp, lane)
                    missing = True
            if not missing:
                self._complete(warp, op, wait_mask)
        t.state = BLOCKED if t.lane in warp.waiting else READY
        self._check_activemask(warp)
        if t.state == BLOCKED:
            t.wait_key = (op, line_key)
            self._block_current()
        t.wait_key = None
        return t.result

    def _complete(self, warp: Warp, op: str, mask: int) -> None:
        lanes = lanes_in(mask)
        arrivals = [warp.waiting[lane] for lane in lanes]
        if len({a[0] for a in arrivals}) > 1 or len({a[1] for a in arrivals}) > 1:
            seen = sorted({a[0] if a[1] is None else f"{a[0]} with mask {a[1]:#010x}" for a in arrivals})
            raise WarpSyncError(
                f"lanes of warp {warp.index} in {warp.block} met in different warp intrinsics ({'; '.join(seen)}): "
                "every lane in the mask must call the same intrinsic with the same mask"
            )
        results = resolve(op, mask, {lane: warp.waiting[lane][2:4] for lane in lanes})
        for lane in lanes:
            del warp.waiting[lane]
            u = warp.lanes[lane]
            u.result = results[lane]
            if u is not self.current:
                self._make_ready(u)
        if op == "syncwarp" and self.on_syncwarp is not None:
            self.on_syncwarp([warp.lanes[lane] for lane in lanes])

    def _check_activemask(self, warp: Warp) -> None:
        # activemask() answers once the warp is quiescent: every lane waits somewhere or has exited.
        # The lanes waiting in the same activemask call are the ones that were active together.
        waiting = [lane for lane, a in warp.waiting.items() if a[0] == "activemask"]
        if not waiting or any(u.state not in (BLOCKED, DONE) for u in warp.lanes):
            return
        groups: dict = {}
        for lane in waiting:
            groups.setdefault(warp.waiting.pop(lane)[4], []).append(lane)
        for lanes in groups.values():
            mask = sum(1 << lane for lane in lanes)
            for lane in lanes:
                u = warp.lanes[lane]
                u.result = mask
                if u is self.current:
                    u.state = READY
                else:
                    self._make_ready(u)

    # -- ends and deadlocks -----------------------------------------------------------------------

    def _thread_done(self, t: SimThread) -> None:
        block = t.block
        block.exited += 1
        self.done_count += 1
        if self.preemptive and block.exited == len(block.threads) and self._next_block < len(self.blocks):
            self.ready.extend(self.blocks[self._next_block].threads)  # a resident block ended: the next one starts
            self._next_block += 1
        if block.arrived:
            where = self.describe_line(block.arrived[0].wait_key[1])
            raise BarrierError(
                f"{t} exited while {len(block.arrived)} of the block's {len(block.threads)} threads wait in "
                f"syncthreads at {where}: every thread of a block must reach each syncthreads"
            )
        for lane, arrival in t.warp.waiting.items():
            if arrival[1] is not None and arrival[1] >> t.lane & 1:
                raise self._exited_lane_error(t.warp, t.lane, lane)
        self._check_activemask(t.warp)

    def _exited_lane_error(self, warp: Warp, lane: int, waiter: int | None = None) -> WarpSyncError:
        if waiter is None:
            waiter = next(iter(warp.waiting))
        op, mask, _, _, key = warp.waiting[waiter]
        return WarpSyncError(
            f"lane {lane} of warp {warp.index} in {warp.block} exited, but lane {waiter} waits for it in {op} at "
            f"{self.describe_line(key)} (mask {mask:#010x}): every lane in the mask must reach the intrinsic"
        )

    def _deadlock_error(self) -> MicroscopeError:
        waits: dict = {}
        for t in self.threads:
            if t.state == BLOCKED and t.wait_key is not None:
                op, key = t.wait_key
                waits.setdefault((t.block.linear, op, self.describe_line(key)), []).append(t)
        parts = [
            f"{len(ts)} thread(s) of {ts[0].block} wait in {op} at {where}" for (_, op, where), ts in waits.items()
        ]
        cls = BarrierError if any(op == "syncthreads" for _, op, _ in waits) else WarpSyncError
        return cls(
            "deadlock: " + "; ".join(parts[:4]) + " and none can go on: every thread must reach the same barriers "
            "and every lane named in a mask the same warp intrinsic"
        )
