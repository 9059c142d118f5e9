"""The hardware's counting rules, as pure functions of one warp-wide access or one warp's lines.

Global memory (cc ≥ 6.0): a warp's request is served in 32-byte sectors; sector number =
address // 32, where an allocation's base address is 256-byte aligned. Four sectors make a
128-byte cache line.

Shared memory: 32 banks of 4-byte words; word w is in bank w % 32. Lanes reading the same word
get it by broadcast; distinct words in one bank are served one after another: the largest
number of distinct words any bank must deliver is the conflict degree ("n-way"). Accesses wider
than 4 bytes are served in phases of 128 bytes each (half-warps for 8-byte elements, quarter-warps
for 16-byte ones), and the degree is that of the worst phase, so a contiguous float64 read is
conflict-free (1-way) although each element spans two banks.

Control flow: the lanes of a warp that execute the k-th occurrence of a line together form one
issue of that line; its active mask has one bit per such lane.
"""

from __future__ import annotations

from gpucourse.hardware import WARP_SIZE

SECTOR_BYTES = 32
CACHE_LINE_BYTES = 128
BANKS = 32
BANK_WORD_BYTES = 4
EXIT = "exit"


def sectors(addresses, itemsize: int) -> list[int]:
    """Sorted distinct 32-byte sectors touched by elements of ``itemsize`` bytes at ``addresses``."""
    touched = set()
    for address in addresses:
        touched.update(range(address // SECTOR_BYTES, (address + itemsize - 1) // SECTOR_BYTES + 1))
    return sorted(touched)


def distinct_bytes(addresses, itemsize: int) -> int:
    """Bytes the lanes asked for, each byte counted once (a broadcast read counts its bytes once)."""
    total, end = 0, None
    for start in sorted(set(addresses)):
        stop = start + itemsize
        if end is None or start >= end:
            total += itemsize
        elif stop > end:
            total += stop - end
        end = stop if end is None else max(end, stop)
    return total


def bank_of(word: int) -> int:
    """The bank of a 4-byte word: consecutive words sit in consecutive banks, 32 of them."""
    return word % BANKS


def lanes_per_phase(itemsize: int) -> int:
    return WARP_SIZE if itemsize <= BANK_WORD_BYTES else max(1, BANKS * BANK_WORD_BYTES // itemsize)


def bank_words(lanes, addresses, itemsize: int) -> dict[int, dict[int, set[int]]]:
    """phase -> bank -> distinct 4-byte words requested from that bank in that phase."""
    per_phase = lanes_per_phase(itemsize)
    phases: dict[int, dict[int, set[int]]] = {}
    for lane, address in zip(lanes, addresses, strict=True):
        banks = phases.setdefault(lane // per_phase, {})
        for word in range(address // BANK_WORD_BYTES, (address + itemsize - 1) // BANK_WORD_BYTES + 1):
            banks.setdefault(bank_of(word), set()).add(word)
    return phases


def bank_ways(lanes, addresses, itemsize: int) -> int:
    """Conflict degree of one shared-memory request: 1 = conflict-free, 32 = fully serialised."""
    if itemsize <= BANK_WORD_BYTES and all(a % itemsize == 0 for a in addresses):
        # Aligned elements of ≤ 4 bytes sit in one word each: count distinct words per bank.
        per_bank = [0] * BANKS
        for word in {a // BANK_WORD_BYTES for a in addresses}:
            per_bank[bank_of(word)] += 1
        return max(per_bank)
    phases = bank_words(lanes, addresses, itemsize)
    return max((len(words) for banks in phases.values() for words in banks.values()), default=0)


def bank_wavefronts(lanes, addresses, itemsize: int) -> tuple[int, int]:
    """(wavefronts, ideal wavefronts) of one shared-memory request, as Nsight Compute counts them:
    each phase of the request takes as many wavefronts as its busiest bank has distinct words, and
    ideally one; the difference is ncu's bank conflicts."""
    if itemsize <= BANK_WORD_BYTES and all(a % itemsize == 0 for a in addresses):
        return bank_ways(lanes, addresses, itemsize), 1
    phases = bank_words(lanes, addresses, itemsize)
    busiest = [max((len(words) for words in banks.values()), default=0) for banks in phases.values()]
    return sum(busiest), len(busiest)


def ideal_sectors(bytes_requested: int) -> int:
    """The fewest 32-byte sectors that hold ``bytes_requested`` bytes (ncu's "ideal" sectors)."""
    return -(-bytes_requested // SECTOR_BYTES)


def popcount(mask: int) -> int:
    return mask.bit_count()


def warp_issues(lane_lines: dict[int, list]) -> tuple[list[dict], int]:
    """The line issues of one warp, in code order, and how many distinct paths its lanes took.

    ``lane_lines[lane]`` is the list of line keys that lane executed. An issue is the k-th
    occurrence of a line: its mask holds the lanes that got there; ``next`` holds the different
    lines (or the exit) its lanes went to next and ``successors`` how many: 2 or more means the
    warp split there.
    """
    groups: dict = {}  # (key, k) -> [mask, first position, set of next keys]
    for lane, lines in lane_lines.items():
        seen: dict = {}
        previous = None
        bit = 1 << lane
        for position, key in enumerate(lines):
            k = seen.get(key, 0)
            seen[key] = k + 1
            group = groups.get((key, k))
            if group is None:
                group = groups[(key, k)] = [0, position, set()]
            group[0] |= bit
            if position < group[1]:
                group[1] = position
            if previous is not None:
                previous[2].add(key)
            previous = group
        if previous is not None:
            previous[2].add(EXIT)
    issues = [
        {"key": key, "k": k, "mask": g[0], "position": g[1], "successors": len(g[2]), "next": frozenset(g[2])}
        for (key, k), g in groups.items()
    ]
    issues.sort(key=lambda i: (i["position"], i["key"], i["k"]))
    paths = len({tuple(lines) for lines in lane_lines.values()})
    return issues, paths
