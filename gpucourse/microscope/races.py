"""Race detection: two threads, one address, at least one write, nothing ordering them.

Happens-before, as the CUDA memory model defines it for what a kernel can express here:

* ``syncthreads`` orders everything before it against everything after it, within a block
  (each thread counts the barriers it passed: different counts = ordered);
* ``syncwarp`` orders the lanes it names (a vector clock over the warp's 32 lanes);
* a fence followed by an atomic releases the fencing thread's earlier accesses to any thread whose
  later atomic on the same address acquires them (the ``threadFenceReduction`` pattern); a block
  fence does so only inside the block;
* two atomics never race with each other.

Anything else between different threads is a data race, reported with both source lines, whatever
order the schedule happened to run them in. Checking follows FastTrack: per address, the last
write and the reads since it.
"""

from __future__ import annotations

from gpucourse.microscope.warp import WARP_SIZE

_VERB = {"load": "read", "store": "write", "atomic": "atomic"}


def scope_of(a, b) -> str:
    if a.block is not b.block:
        return "different blocks"
    return "same warp" if a.warp is b.warp else "same block"


class RaceDetector:
    def __init__(self):
        self.seq = 0  # a global clock over accesses and fences, in execution order
        self._shadow: dict = {}  # allocation uid << 48 | byte offset -> [last write, {thread uid: read}]
        self._releases: dict = {}  # address key -> {thread uid: (block, block fence, device fence)}
        self.found: dict = {}  # (line a, line b, array, kind, scope) -> [count, example]

    @staticmethod
    def _ordered(rec, t) -> bool:
        """Is the earlier access ``rec`` ordered before what thread ``t`` does now?"""
        u = rec[0]
        if u is t:
            return True
        if u.block is t.block:
            if rec[2] != t.bar_epoch:
                return True
            if u.warp is t.warp and t.warp_vc is not None and t.warp_vc[u.lane] > rec[3]:
                return True
        return t.acquired.get(u.uid, -1) > rec[1]

    def _report(self, a, b, space: str, offset: int) -> None:
        kind = f"{_VERB[a[5]]}-{_VERB[b[5]]}"
        scope = scope_of(a[0], b[0])
        key = (a[4], b[4], b[6], kind, scope)
        entry = self.found.get(key)
        if entry is None:
            self.found[key] = [
                1,
                {"space": space, "address": offset, "index": b[7], "thread_a": a[0], "thread_b": b[0]},
            ]
        else:
            entry[0] += 1

    def access(self, t, alloc, offset: int, op: str, line_key, name: str, index) -> None:
        self.seq += 1
        vc = t.warp_vc
        rec = (t, self.seq, t.bar_epoch, 0 if vc is None else vc[t.lane], line_key, op, name, index)
        key = alloc.uid << 48 | offset
        entry = self._shadow.get(key)
        if entry is None:  # first touch: nothing to race with
            self._shadow[key] = [None, {t.uid: rec}] if op == "load" else [rec, None]
            if op == "atomic":
                self._synchronise(t, key)
            return
        last = entry[0]
        if last is not None:
            u = last[0]
            # Same thread, or same block past a barrier: ordered (the common cases, checked inline).
            unordered = u is not t and (u.block is not t.block or last[2] == t.bar_epoch)
            both_atomic = op == "atomic" and last[5] == "atomic"
            if unordered and not both_atomic and not self._ordered(last, t):
                self._report(last, rec, alloc.space, offset)
        if op == "load":
            if entry[1] is None:
                entry[1] = {t.uid: rec}
            else:
                entry[1][t.uid] = rec
            return
        if entry[1]:
            for read in entry[1].values():
                u = read[0]
                if u is not t and (u.block is not t.block or read[2] == t.bar_epoch) and not self._ordered(read, t):
                    self._report(read, rec, alloc.space, offset)
        entry[0], entry[1] = rec, None
        if op == "atomic":
            self._synchronise(t, key)

    def _synchronise(self, t, key) -> None:
        # Acquire what earlier fence+atomic pairs on this address released, then release our own.
        releases = self._releases.get(key)
        if releases:
            for uid, (block, block_fence, device_fence) in releases.items():
                fence = max(block_fence, device_fence) if block is t.block else device_fence
                if uid != t.uid and fence > t.acquired.get(uid, -1):
                    t.acquired[uid] = fence
        if t.fence_device_seq >= 0 or t.fence_block_seq >= 0:
            self._releases.setdefault(key, {})[t.uid] = (t.block, t.fence_block_seq, t.fence_device_seq)

    def fence(self, t, scope: str) -> None:
        self.seq += 1
        if scope == "block":
            t.fence_block_seq = self.seq
        else:
            t.fence_device_seq = self.seq

    @staticmethod
    def syncwarp(lanes) -> None:
        for u in lanes:
            if u.warp_vc is None:
                u.warp_vc = [0] * WARP_SIZE
            u.warp_vc[u.lane] += 1
        joined = [max(column) for column in zip(*(u.warp_vc for u in lanes), strict=True)]
        for u in lanes:
            u.warp_vc = list(joined)
