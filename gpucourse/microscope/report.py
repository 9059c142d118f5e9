"""What one traced launch did, as tables (pandas), numbers and pictures (plotly)."""

from __future__ import annotations

import pandas as pd

from gpucourse.microscope import analysis, pictures
from gpucourse.microscope.errors import MicroscopeError


class Report:
    """The microscope's account of one launch. Tables: ``memory()``, ``banks()``, ``branches()``,
    ``races()``, ``requests()``, ``warps()``; numbers: ``sectors_per_request()``, ``efficiency()``,
    ``simt_efficiency()``, ``paths()``, ``max_bank_ways()``, ``mean_bank_ways()``; in Nsight Compute's
    words: ``profile()``; pictures:
    ``picture_sectors()``, ``picture_banks()``, ``picture_lanes()``, ``picture_threads()``; per thread:
    ``thread_accesses()``, ``per_thread_max()``.

    ``line`` arguments take the line number the kernel's source shows, or a piece of that line's
    text (``line="a[i]"``); ``None`` means every line.
    """

    def __init__(self, tracer, *, kernel_name: str, grid_dim, block_dim, schedule: str, seed, cc):
        self.kernel_name, self.grid_dim, self.block_dim = kernel_name, tuple(grid_dim), tuple(block_dim)
        self.schedule, self.seed, self.cc = schedule, seed, tuple(cc)
        self.threads = len(tracer.sched.threads)
        self.lines_executed = tracer.lines_executed
        # Shared memory per block: the static arrays as laid out (16-byte aligned), and the launch's dynamic bytes.
        self.static_shared_bytes = max((block.shared_bytes for block in tracer.blocks), default=0)
        self.dynamic_shared_bytes = tracer.dynamic_shared_bytes
        self._line_info: dict = {}  # line key -> (function, line, source, via); see _lines
        self._requests = [self._request(tracer, rk, entry) for rk, entry in tracer.requests.items()]
        # The warp issues (every line each lane ran, grouped per warp) are the costly part and many
        # callers never read them (the race scheduler's runs): they are worked out on first use.
        self._tracer = tracer
        self._analysed: tuple[list[dict], list[dict]] | None = None
        self._races = []
        for (key_a, key_b, array, kind, scope), (count, example) in tracer.races.found.items():
            # A racing access is also a warp request: its line is already known, in the same order.
            self._line(tracer, key_a)
            self._line(tracer, key_b)
            self._races.append(
                {
                    "key_a": key_a,
                    "key_b": key_b,
                    "array": array,
                    "kind": kind,
                    "scope": scope,
                    "count": count,
                    **example,
                }
            )

    def _analyse(self) -> tuple[list[dict], list[dict]]:
        """(issues, warps), worked out once; it adds the issued lines to ``_lines`` after the requests'."""
        if self._analysed is None:
            tracer, all_issues, warps = self._tracer, [], []
            for block in tracer.blocks:
                for warp in block.warps:
                    issues, paths = analysis.warp_issues({t.lane: t.lines for t in warp.lanes})
                    for issue in issues:
                        self._line(tracer, issue["key"])
                        issue.update(block=block.index, warp=warp.index)
                    all_issues.extend(issues)
                    warps.append(
                        {
                            "block": block.index,
                            "warp": warp.index,
                            "lanes": len(warp.lanes),
                            "issues": issues,
                            "paths": paths,
                        }
                    )
            self._analysed, self._tracer = (all_issues, warps), None  # the tracer is not needed any more
        return self._analysed

    @property
    def _issues(self) -> list[dict]:
        return self._analyse()[0]

    @property
    def _warps(self) -> list[dict]:
        return self._analyse()[1]

    @property
    def _lines(self) -> dict:
        """Every traced line's (function, line, source, via): the requests' lines, then the issued ones."""
        self._analyse()
        return self._line_info

    def _line(self, tracer, key):
        if key not in self._line_info:
            function, lineno, source = tracer.where(key)
            via = " > ".join(str(tracer.where(key[: i + 1])[1]) for i in range(len(key) - 1))
            self._line_info[key] = (function, lineno, source, via)
        return self._line_info[key]

    def _request(self, tracer, rk, entry) -> dict:
        (key, array, op), k = rk[1], rk[2]
        arr, warp, lanes, offsets = entry
        alloc = arr._alloc
        self._line(tracer, key)
        addresses = [alloc.base + offset for offset in offsets]
        request = {
            "space": alloc.space,
            "key": key,
            "array": array,
            "op": op,
            "block": warp.block.index,
            "warp": warp.index,
            "k": k,
            "lanes": tuple(lanes),
            "addresses": tuple(addresses),
            "itemsize": arr.itemsize,
            "base": alloc.base,
        }
        if alloc.space == "global":
            request["sectors"] = tuple(analysis.sectors(addresses, arr.itemsize))
            request["bytes_requested"] = analysis.distinct_bytes(addresses, arr.itemsize)
        else:
            request["ways"] = analysis.bank_ways(lanes, addresses, arr.itemsize)
        return request

    # -- selecting ------------------------------------------------------------------------------------

    def _keys(self, line) -> set:
        if line is None:
            return set(self._lines)
        if isinstance(line, str):
            keys = {key for key, info in self._lines.items() if line in info[2]}
        elif isinstance(line, int) and not isinstance(line, bool):
            keys = {key for key, info in self._lines.items() if info[1] == line}
        else:
            raise MicroscopeError(f"line must be a line number, a piece of the line's source, or None; got {line!r}")
        if not keys:
            shown = ", ".join(f"{info[1]}: {info[2]}" for info in sorted(self._lines.values(), key=lambda i: i[1]))
            raise MicroscopeError(f"no traced line matches line={line!r}; traced lines are {shown}")
        return keys

    def _selected_requests(self, space, line=None, array=None, op=None, block=None, warp=None) -> list[dict]:
        keys = self._keys(line)
        chosen = [
            r
            for r in self._requests
            if r["space"] == space
            and r["key"] in keys
            and (array is None or r["array"] == array)
            and (op is None or r["op"] == op)
            and (block is None or r["block"] == _block_index(block, self.grid_dim))
            and (warp is None or r["warp"] == warp)
        ]
        if not chosen:
            what = "global-memory" if space == "global" else "shared-memory"
            raise MicroscopeError(
                f"no {what} access matches line={line!r}, array={array!r}, op={op!r}, block={block!r}, "
                f"warp={warp!r}; arrays seen: "
                f"{sorted({r['array'] for r in self._requests if r['space'] == space}) or 'none'}"
            )
        return chosen

    def _where(self, key) -> dict:
        function, lineno, source, via = self._lines[key]
        return {"function": function, "line": lineno, "source": source, "via": via}

    # -- tables ---------------------------------------------------------------------------------------------

    def requests(self, space: str = "global") -> pd.DataFrame:
        """One row per warp-wide request: where, which warp, how many lanes, sectors or bank ways."""
        rows = []
        for r in self._requests:
            if r["space"] != space:
                continue
            row = {
                **self._where(r["key"]),
                "op": r["op"],
                "array": r["array"],
                "block": r["block"],
                "warp": r["warp"],
                "occurrence": r["k"],
                "lanes": len(r["lanes"]),
            }
            if space == "global":
                row.update(
                    sectors=len(r["sectors"]),
                    bytes_requested=r["bytes_requested"],
                    bytes_fetched=len(r["sectors"]) * analysis.SECTOR_BYTES,
                )
            else:
                row["ways"] = r["ways"]
            rows.append(row)
        columns = ["function", "line", "source", "via", "op", "array", "block", "warp", "occurrence", "lanes"]
        columns += ["sectors", "bytes_requested", "bytes_fetched"] if space == "global" else ["ways"]
        return pd.DataFrame(rows, columns=columns)

    def _grouped(self, space: str) -> list[tuple[tuple, list[dict]]]:
        groups: dict = {}
        for r in self._requests:
            if r["space"] == space:
                groups.setdefault((r["key"], r["array"], r["op"]), []).append(r)
        return sorted(groups.items(), key=lambda item: (item[0][0], item[0][1], item[0][2]))

    def memory(self) -> pd.DataFrame:
        """Global memory per source line, array and op: requests, sectors per request, bytes, efficiency."""
        rows = []
        for (key, array, op), reqs in self._grouped("global"):
            sector_count = sum(len(r["sectors"]) for r in reqs)
            requested = sum(r["bytes_requested"] for r in reqs)
            fetched = sector_count * analysis.SECTOR_BYTES
            rows.append(
                {
                    **self._where(key),
                    "op": op,
                    "array": array,
                    "requests": len(reqs),
                    "sectors": sector_count,
                    "sectors_per_request": sector_count / len(reqs),
                    "bytes_requested": requested,
                    "bytes_fetched": fetched,
                    "efficiency": requested / fetched,
                }
            )
        columns = [
            "function",
            "line",
            "source",
            "via",
            "op",
            "array",
            "requests",
            "sectors",
            "sectors_per_request",
            "bytes_requested",
            "bytes_fetched",
            "efficiency",
        ]
        return pd.DataFrame(rows, columns=columns)

    def banks(self) -> pd.DataFrame:
        """Shared memory per source line, array and op: requests and bank-conflict ways (mean, max)."""
        rows = []
        for (key, array, op), reqs in self._grouped("shared"):
            ways = [r["ways"] for r in reqs]
            rows.append(
                {
                    **self._where(key),
                    "op": op,
                    "array": array,
                    "requests": len(reqs),
                    "mean_ways": sum(ways) / len(ways),
                    "max_ways": max(ways),
                }
            )
        columns = ["function", "line", "source", "via", "op", "array", "requests", "mean_ways", "max_ways"]
        return pd.DataFrame(rows, columns=columns)

    def branches(self) -> pd.DataFrame:
        """Per executed source line: warp issues, mean active lanes, SIMT efficiency, paths leaving it."""
        per_key: dict = {}
        for issue in self._issues:
            stats = per_key.setdefault(issue["key"], [0, 0, 1])
            stats[0] += 1
            stats[1] += analysis.popcount(issue["mask"])
            stats[2] = max(stats[2], issue["successors"])
        rows = []
        for key in sorted(per_key):
            issues, active, paths = per_key[key]
            rows.append(
                {
                    **self._where(key),
                    "issues": issues,
                    "active_lanes_mean": active / issues,
                    "simt_efficiency": active / issues / analysis.WARP_SIZE,
                    "paths": paths,
                }
            )
        columns = [
            "function",
            "line",
            "source",
            "via",
            "issues",
            "active_lanes_mean",
            "simt_efficiency",
            "paths",
        ]
        return pd.DataFrame(rows, columns=columns)

    def warps(self) -> pd.DataFrame:
        """Per warp: lanes, line issues, SIMT efficiency and the number of distinct paths its lanes took."""
        rows = []
        for w in self._warps:
            active = sum(analysis.popcount(i["mask"]) for i in w["issues"])
            issues = len(w["issues"])
            rows.append(
                {
                    "block": w["block"],
                    "warp": w["warp"],
                    "lanes": w["lanes"],
                    "issues": issues,
                    "active_lanes_mean": active / issues if issues else 0.0,
                    "simt_efficiency": active / issues / analysis.WARP_SIZE if issues else 0.0,
                    "paths": w["paths"],
                }
            )
        columns = ["block", "warp", "lanes", "issues", "active_lanes_mean", "simt_efficiency", "paths"]
        return pd.DataFrame(rows, columns=columns)

    def races(self) -> pd.DataFrame:
        """Conflicting accesses: two threads, one address, at least one write, nothing ordering them."""
        rows = []
        for r in sorted(self._races, key=lambda r: (r["key_a"], r["key_b"], r["array"], r["kind"], r["scope"])):
            a, b = self._line_info[r["key_a"]], self._line_info[r["key_b"]]
            rows.append(
                {
                    "line_a": a[1],
                    "source_a": a[2],
                    "line_b": b[1],
                    "source_b": b[2],
                    "array": r["array"],
                    "space": r["space"],
                    "kind": r["kind"],
                    "scope": r["scope"],
                    "count": r["count"],
                    "address": r["address"],
                    "index": r["index"],
                    "thread_a": repr(r["thread_a"]),
                    "thread_b": repr(r["thread_b"]),
                }
            )
        columns = [
            "line_a",
            "source_a",
            "line_b",
            "source_b",
            "array",
            "space",
            "kind",
            "scope",
            "count",
            "address",
            "index",
            "thread_a",
            "thread_b",
        ]
        return pd.DataFrame(rows, columns=columns)

    def _global_thread(self, block: tuple, warp: int, lane: int) -> int:
        gx, gy, _ = self.grid_dim
        per_block = self.block_dim[0] * self.block_dim[1] * self.block_dim[2]
        linear_block = block[0] + gx * (block[1] + gy * block[2])
        return linear_block * per_block + warp * analysis.WARP_SIZE + lane

    def thread_accesses(self, space: str = "global") -> pd.DataFrame:
        """Per thread, array and op: how many elements that thread loaded, stored or updated atomically.
        ``thread`` is the thread's global linear index (blockIdx·threads per block + thread's index in
        its block, x fastest); threads that made no access of this space have no row."""
        counts: dict = {}
        for r in self._requests:
            if r["space"] != space:
                continue
            for lane in r["lanes"]:
                key = (self._global_thread(r["block"], r["warp"], lane), r["block"], r["array"], r["op"])
                counts[key] = counts.get(key, 0) + 1
        rows = [{"thread": t, "block": b, "array": a, "op": op, "count": n}
                for (t, b, a, op), n in sorted(counts.items(), key=lambda kv: (kv[0][0], kv[0][2], kv[0][3]))]
        return pd.DataFrame(rows, columns=["thread", "block", "array", "op", "count"])

    def per_thread_max(self, op: str = "load", array=None, space: str = "global") -> int:
        """The most elements one thread accessed with ``op`` (``"load"``, ``"store"``, ``"atomic"``), in
        ``array`` or all arrays together; 0 when no thread did."""
        table = self.thread_accesses(space)
        table = table[(table.op == op) & ((table.array == array) if array is not None else True)]
        if table.empty:
            return 0
        return int(table.groupby("thread")["count"].sum().max())

    # -- numbers --------------------------------------------------------------------------------------------

    def sectors_per_request(self, line=None, array=None, op=None) -> float:
        """Mean 32-byte sectors per warp request of the matching global accesses (4 = ideal for float32)."""
        reqs = self._selected_requests("global", line, array, op)
        return sum(len(r["sectors"]) for r in reqs) / len(reqs)

    def efficiency(self, line=None, array=None, op=None) -> float:
        """Bytes the lanes asked for ÷ bytes the sectors fetched, for the matching global accesses."""
        reqs = self._selected_requests("global", line, array, op)
        return sum(r["bytes_requested"] for r in reqs) / (sum(len(r["sectors"]) for r in reqs) * analysis.SECTOR_BYTES)

    def max_bank_ways(self, line=None, array=None, op=None) -> int:
        """The worst bank-conflict degree among the matching shared accesses (1 = conflict-free)."""
        return max(r["ways"] for r in self._selected_requests("shared", line, array, op))

    def mean_bank_ways(self, line=None, array=None, op=None) -> float:
        reqs = self._selected_requests("shared", line, array, op)
        return sum(r["ways"] for r in reqs) / len(reqs)

    def simt_efficiency(self, line=None) -> float:
        """Mean active lanes per warp-issued line ÷ 32 (over the whole kernel, or the matching lines)."""
        keys = self._keys(line)
        issues = [i for i in self._issues if i["key"] in keys]
        if not issues:
            raise MicroscopeError(f"no executed line matches line={line!r}")
        return sum(analysis.popcount(i["mask"]) for i in issues) / (len(issues) * analysis.WARP_SIZE)

    def paths(self, line=None) -> int:
        """Without ``line``: the most distinct paths the lanes of one warp took. With it: the most
        different next lines the lanes of one warp went to from that line (2 = the warp splits there)."""
        if line is None:
            return max(w["paths"] for w in self._warps)
        keys = self._keys(line)
        successors = [i["successors"] for i in self._issues if i["key"] in keys]
        if not successors:
            raise MicroscopeError(f"no executed line matches line={line!r}")
        return max(successors)

    def race_count(self) -> int:
        """How many conflicting access pairs were seen (0 = no data race found)."""
        return sum(r["count"] for r in self._races)

    def profile(self, registers_per_thread=None):
        """This launch in Nsight Compute's words (``gpucourse.microscope.nsight``): ncu's metric names,
        the microscope's values, and how exact each one is."""
        from gpucourse.microscope.nsight import Profile

        return Profile(self, registers_per_thread=registers_per_thread)

    # -- pictures -------------------------------------------------------------------------------------

    def picture_sectors(self, line=None, warp: int = 0, block=0, array=None, op=None, occurrence: int = 0):
        """Lanes × 32-byte sectors of one warp request (plotly Figure)."""
        reqs = self._selected_requests("global", line, array, op, block, warp)
        request = _pick_occurrence(reqs, occurrence)
        return pictures.sectors_figure(request, self._lines[request["key"]])

    def picture_banks(self, line=None, warp: int = 0, block=0, array=None, op=None, occurrence: int = 0):
        """Lanes × shared-memory banks of one warp request, with the conflict degree (plotly Figure)."""
        reqs = self._selected_requests("shared", line, array, op, block, warp)
        request = _pick_occurrence(reqs, occurrence)
        return pictures.banks_figure(request, self._lines[request["key"]])

    def picture_lanes(self, warp: int = 0, block=0):
        """Active-lane masks of one warp along the executed code (plotly Figure)."""
        index = _block_index(block, self.grid_dim)
        for w in self._warps:
            if w["block"] == index and w["warp"] == warp:
                return pictures.lanes_figure(w, self._lines)
        raise MicroscopeError(f"no warp {warp} in block {block}: the launch has {len(self._warps)} warps")

    def picture_threads(self, array=None, op=None):
        """Which thread touched which element of a global array: one marker per access (plotly Figure)."""
        reqs = self._selected_requests("global", None, array, op)
        name = reqs[0]["array"] if array is None else array
        points = []
        for r in reqs:
            if r["array"] != name:
                continue
            for lane, address in zip(r["lanes"], r["addresses"], strict=True):
                element = (address - r["base"]) // r["itemsize"]
                points.append((element, self._global_thread(r["block"], r["warp"], lane), r["op"], r["block"]))
        return pictures.threads_figure(name, points, self.block_dim, self.threads)

    def __repr__(self) -> str:
        head = f"microscope: {self.kernel_name}[{self.grid_dim}, {self.block_dim}], {self.threads} threads"
        parts = [f"{head}, schedule {self.schedule}"]
        glob = [r for r in self._requests if r["space"] == "global"]
        if glob:
            spr = sum(len(r["sectors"]) for r in glob) / len(glob)
            parts.append(f"{len(glob)} global requests, {spr:.2f} sectors/request")
        if any(r["space"] == "shared" for r in self._requests):
            parts.append(f"shared max {self.max_bank_ways()}-way")
        if self._issues:
            parts.append(f"SIMT efficiency {self.simt_efficiency():.0%}")
        parts.append(f"{self.race_count()} racing access pairs")
        return "; ".join(parts)


def _block_index(block, grid_dim) -> tuple:
    if isinstance(block, int) and not isinstance(block, bool):
        gx, gy, _ = grid_dim
        return (block % gx, block // gx % gy, block // (gx * gy))
    parts = tuple(block) + (0,) * (3 - len(tuple(block)))
    return parts


def _pick_occurrence(reqs: list[dict], occurrence: int) -> dict:
    for r in reqs:
        if r["k"] == occurrence:
            return r
    raise MicroscopeError(f"occurrence={occurrence} not found; this line ran {1 + max(r['k'] for r in reqs)} time(s)")
