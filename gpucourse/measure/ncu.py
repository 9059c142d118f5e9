"""Nsight Compute (``ncu``) on a real GPU, beside the microscope's count of the same launch.

    from gpucourse.measure import ncu
    ncu.availability()              # None where ncu and a GPU are here, else one line saying what is missing
    both = ncu.side_by_side(kernel, grid, block, *args)   # the microscope's profile and ncu's, metric by metric
    both                            # a table (notebook) or text; without ncu or a GPU, the profile and one line why
    kernels = ncu.parse_csv(text)   # ncu --csv output (raw or details page) -> one NcuKernel per profiled launch

The launch runs in a child process under ``ncu --csv --page raw --print-units base --metrics <the
report's metrics> --launch-count 1`` (``ncu_command``): the child rebuilds the kernel (importing
its module, calling its factory, or, for a kernel written in a notebook, compiling its source) and
the arguments (saved beforehand, since a trace writes its results into them), launches it once and
exits. ncu's output starts with its own ``==PROF==`` lines and whatever the program prints; numbers
carry thousands separators ("131,072"); ``parse_csv`` copes with both.
"""

from __future__ import annotations

import csv
import importlib.util
import inspect
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from gpucourse.errors import CourseError
from gpucourse.measure import runtime

NCU_ENV = "GPUCOURSE_NCU"  # a path to ncu, used instead of the one on the PATH
NCU_TIMEOUT_S = 300.0  # ncu replays the kernel once per pass of counters; the child compiles it first
PERMISSION_ERROR = "ERR_NVGPUCTRPERM"
PERMISSION_HELP = (
    "ncu may not read this GPU's performance counters (ERR_NVGPUCTRPERM: the driver keeps them for "
    "administrators): run ncu as root or with sudo, or have an administrator add `options nvidia "
    "NVreg_RestrictProfilingToAdminUsers=0` to /etc/modprobe.d and reboot (a container needs "
    "--cap-add=SYS_ADMIN); https://developer.nvidia.com/ERR_NVGPUCTRPERM"
)
_CHILD_DONE = "@@GPUCOURSE-NCU-CHILD-DONE@@"
_NUMBER = re.compile(r"-?(\d{1,3}(,\d{3})+|\d+)(\.\d+)?([eE][-+]?\d+)?")


class NcuError(CourseError, RuntimeError):
    """ncu could not profile the launch; the message says why in one line."""


@dataclass
class NcuKernel:
    """One profiled launch from ncu's CSV: its name, launch shape, and metric -> value (units beside)."""

    id: int
    name: str
    grid: str
    block: str
    metrics: dict = field(default_factory=dict)
    units: dict = field(default_factory=dict)

    @property
    def blocks(self) -> int | None:
        """Blocks in the launch, from the raw page's launch__grid_size."""
        value = self.metrics.get("launch__grid_size")
        return int(value) if isinstance(value, (int, float)) else None


# -- reading ncu's CSV ----------------------------------------------------------------------------------


def number(text: str):
    """ncu's cell as a number where it is one ("131,072" -> 131072, "18.16" -> 18.16), None where empty
    or "n/a", else the text as it is."""
    text = text.strip()
    if text in ("", "n/a", "N/A"):
        return None
    if _NUMBER.fullmatch(text):
        plain = text.replace(",", "")
        return float(plain) if any(c in plain for c in ".eE") else int(plain)
    return text


def parse_csv(text: str) -> list[NcuKernel]:
    """Every profiled launch in ncu's ``--csv`` output, raw page (one row per launch, a units row under the
    header with ``--print-units base``) or details page (one row per section metric)."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID",')), None)
    if start is None:
        raise NcuError("no CSV table in ncu's output" + _first_error(text, ": "))
    # ncu's own messages (==PROF==, ==WARNING==) can follow the table too; they are never CSV rows.
    rows = list(csv.reader(line for line in lines[start:] if not line.startswith("==")))
    header, body = rows[0], [row for row in rows[1:] if row]
    if "Metric Name" in header and "Metric Value" in header:
        return _parse_details(header, body)
    units = {}
    if body and body[0][0] == "":  # --print-units base: the units row
        units = dict(zip(header, body[0], strict=True))
        body = body[1:]
    kernels = []
    for row in body:
        cells = dict(zip(header, row, strict=True))
        kernels.append(NcuKernel(
            id=int(number(cells["ID"])), name=cells.get("Kernel Name", ""), grid=cells.get("Grid Size", ""),
            block=cells.get("Block Size", ""),
            metrics={name: number(value) for name, value in cells.items()},
            units={name: unit for name, unit in units.items() if unit},
        ))
    return kernels


def _parse_details(header, body) -> list[NcuKernel]:
    kernels: dict[int, NcuKernel] = {}
    for row in body:
        cells = dict(zip(header, row, strict=False))  # a metric's row stops before the rule columns
        launch = int(number(cells["ID"]))
        kernel = kernels.setdefault(launch, NcuKernel(
            id=launch, name=cells.get("Kernel Name", ""), grid=cells.get("Grid Size", ""),
            block=cells.get("Block Size", "")))
        if cells.get("Metric Name"):
            key = f"{cells['Section Name']}: {cells['Metric Name']}"
            kernel.metrics[key] = number(cells["Metric Value"])
            if cells.get("Metric Unit"):
                kernel.units[key] = cells["Metric Unit"]
    return list(kernels.values())


def explain_failure(output: str) -> str | None:
    """One line for what went wrong in ncu's output (the permission error with its fix), or None."""
    if PERMISSION_ERROR in output:
        return PERMISSION_HELP
    error = _first_error(output, "")
    return f"ncu failed: {error}" if error else None


def _first_error(output: str, prefix: str) -> str:
    for line in output.splitlines():
        if line.startswith("==ERROR=="):
            return prefix + line.removeprefix("==ERROR==").strip()
    return ""


# -- is ncu here? ---------------------------------------------------------------------------------------


def find_ncu() -> str | None:
    """ncu's path: $GPUCOURSE_NCU, the PATH, or the CUDA toolkit's usual place."""
    chosen = os.environ.get(NCU_ENV)
    if chosen:
        return chosen if Path(chosen).exists() else None
    found = shutil.which("ncu")
    if found:
        return found
    usual = Path("/usr/local/cuda/bin/ncu")
    return str(usual) if usual.exists() else None


def availability() -> str | None:
    """None when a kernel can be profiled here; otherwise one line saying what is missing."""
    if find_ncu() is None:
        return ("Nsight Compute (ncu) is not on the PATH: only the microscope's count is shown (ncu comes with the "
                f"CUDA toolkit; {NCU_ENV}=/path/to/ncu points the course at one)")
    if not runtime.is_gpu():
        return "no GPU here (simulator mode): ncu needs one, so only the microscope's count is shown"
    return None


def ncu_version(path: str | None = None) -> str | None:
    path = path or find_ncu()
    if path is None:
        return None
    try:
        done = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = re.search(r"Version (\S+)", done.stdout)
    return match.group(1) if match else None


# -- the child process ----------------------------------------------------------------------------------


def kernel_reference(kernel, factory_call: str | None = None) -> dict:
    """How a child process finds ``kernel`` again: its module and name, its factory call, or its source."""
    fn = getattr(kernel, "py_func", None) or getattr(kernel, "fn", None)
    if not callable(fn):
        raise CourseError(f"expected a @cuda.jit kernel; got {type(kernel).__name__}")
    module, name = fn.__module__ or "__main__", fn.__name__
    if factory_call is not None:
        return {"module": module, "factory_call": factory_call, "name": name}
    if module != "__main__" and getattr(sys.modules.get(module), name, None) is kernel and \
            importlib.util.find_spec(module) is not None:
        return {"module": module, "name": name}
    if "<locals>" in fn.__qualname__:
        factory = fn.__qualname__.split(".<locals>")[0]
        raise CourseError(f"{name} is built inside {factory}(): pass factory_call=\"{factory}(...)\" with the "
                          "arguments that built it, so that the profiled process can build it again")
    try:
        source = textwrap.dedent(inspect.getsource(fn))
    except (OSError, TypeError) as exc:
        raise CourseError(f"cannot read the source of {name} to run it under ncu: {exc}") from exc
    constants = {n: fn.__globals__[n] for n in fn.__code__.co_names
                 if isinstance(fn.__globals__.get(n), (int, float, bool)) and not isinstance(fn.__globals__[n], type)}
    return {"source": source, "name": name, "constants": constants}


def _host(value):
    if isinstance(value, np.ndarray):
        return value
    if hasattr(value, "copy_to_host"):
        return value.copy_to_host()
    if hasattr(value, "get") and hasattr(value, "__cuda_array_interface__"):  # CuPy
        return value.get()
    return None


def save_job(directory: Path, kernel, griddim, blockdim, args, factory_call: str | None = None) -> Path:
    """The kernel's reference, the launch and the arguments, written where the child reads them."""
    arrays, scalars = {}, []
    for index, value in enumerate(args):
        host = _host(value)
        if host is not None:
            arrays[f"a{index}"] = host
            scalars.append({"array": f"a{index}"})
        elif isinstance(value, (bool, int, float, np.generic)):
            scalars.append({"value": value.item() if isinstance(value, np.generic) else value,
                            "dtype": np.asarray(value).dtype.name if isinstance(value, np.generic) else None})
        else:
            raise CourseError(f"argument {index} is a {type(value).__name__}: under ncu a kernel takes arrays "
                              "and numbers")
    np.savez(directory / "arrays.npz", **arrays)
    job = {"kernel": kernel_reference(kernel, factory_call), "grid": _dims(griddim), "block": _dims(blockdim),
           "args": scalars}
    (directory / "job.json").write_text(json.dumps(job))
    return directory


def _dims(dims) -> list[int]:
    return [int(d) for d in dims] if isinstance(dims, (tuple, list)) else [int(dims)]


# The profiled process: decide the mode (a GPU), rebuild the kernel and its arguments, launch once.
CHILD = r"""
import ast, importlib, json, math, os, sys
from pathlib import Path
import numpy as np
import gpucourse  # noqa: F401  (decides the mode before numba is imported)
import numba
from numba import cuda

folder = Path(sys.argv[1])
job = json.loads((folder / "job.json").read_text())
ref = job["kernel"]
if "factory_call" in ref:
    kernel = eval(ref["factory_call"], vars(importlib.import_module(ref["module"])))  # the caller's own call
elif "source" in ref:
    tree = ast.parse(ref["source"])
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            node.decorator_list = []
    names = {"cuda": cuda, "numba": numba, "np": np, "numpy": np, "math": math, **ref["constants"]}
    for type_name in ("float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "uint32"):
        if hasattr(numba, type_name):
            names.setdefault(type_name, getattr(numba, type_name))
    exec(compile(tree, "<kernel>", "exec"), names)
    kernel = cuda.jit(names[ref["name"]])
else:
    kernel = getattr(importlib.import_module(ref["module"]), ref["name"])
arrays = np.load(folder / "arrays.npz")
args = []
for arg in job["args"]:
    if "array" in arg:
        args.append(cuda.to_device(arrays[arg["array"]]))
    else:
        args.append(np.dtype(arg["dtype"]).type(arg["value"]) if arg["dtype"] else arg["value"])
kernel[tuple(job["grid"]), tuple(job["block"])](*args)
cuda.synchronize()
results = os.environ.get("GPUCOURSE_NCU_CHILD_RESULTS")  # where a test reads what the launch computed
if results:
    np.savez(results, *[a.copy_to_host() for a in args if hasattr(a, "copy_to_host")])
print("@@GPUCOURSE-NCU-CHILD-DONE@@", file=sys.stderr)
"""


def ncu_command(ncu: str, folder: Path, kernel_name: str, metrics: list[str]) -> list[str]:
    """The command that profiles the child's one launch, collecting exactly ``metrics``."""
    return [
        ncu, "--csv", "--page", "raw", "--print-units", "base", "--clock-control", "none",
        "--kernel-name", f"regex:{re.escape(kernel_name)}", "--launch-count", "1",
        "--metrics", ",".join(metrics),
        sys.executable, "-c", CHILD, str(folder),
    ]


def child_env() -> dict:
    """The environment of a profiled process: this checkout of gpucourse first on its path."""
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def run_job(folder: Path, kernel_name: str, metrics: list[str] | None = None, ncu: str | None = None,
            timeout_s: float = NCU_TIMEOUT_S) -> NcuKernel:
    """Profile the launch saved in ``folder`` (``save_job``) under ncu; ncu's row for it."""
    from gpucourse.microscope.ncu_metrics import ncu_metric_names

    ncu = ncu or find_ncu()
    if ncu is None:
        raise NcuError(availability() or "ncu is not here")
    command = ncu_command(ncu, folder, kernel_name, metrics or ncu_metric_names())
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, env=child_env())
    except subprocess.TimeoutExpired:
        raise NcuError(f"ncu took longer than {timeout_s:.0f} s; profile a smaller launch") from None
    output = done.stdout + "\n" + done.stderr
    if PERMISSION_ERROR in output:
        raise NcuError(PERMISSION_HELP)
    if _CHILD_DONE not in done.stderr:
        last = [line for line in done.stderr.splitlines() if line.strip() and not line.startswith("==")]
        why = explain_failure(output) or (f"the profiled process failed: {last[-1][:300]}" if last else
                                          f"ncu exited with {done.returncode} and said nothing")
        raise NcuError(why)
    kernels = parse_csv(done.stdout)
    if not kernels:
        raise NcuError(explain_failure(output) or f"ncu profiled no kernel named like {kernel_name}")
    return kernels[0]


def profile_with_ncu(kernel, griddim, blockdim, *args, factory_call: str | None = None,
                     metrics: list[str] | None = None, timeout_s: float = NCU_TIMEOUT_S) -> NcuKernel:
    """Run ``kernel[griddim, blockdim](*args)`` once under ncu in a child process; ncu's row for it."""
    reason = availability()
    if reason:
        raise NcuError(reason)
    with tempfile.TemporaryDirectory(prefix="gpucourse-ncu-") as folder:
        save_job(Path(folder), kernel, griddim, blockdim, args, factory_call)
        return run_job(Path(folder), kernel_reference(kernel, factory_call)["name"], metrics, timeout_s=timeout_s)


# -- side by side ---------------------------------------------------------------------------------------


class SideBySide:
    """The microscope's profile of a launch next to ncu's (or alone, with the one line that says why)."""

    def __init__(self, profile, ncu: NcuKernel | None, status: str):
        self.profile, self.ncu, self.status = profile, ncu, status

    def table(self):
        import pandas as pd

        from gpucourse.microscope.ncu_agreement import compare

        if self.ncu is None:
            table = self.profile.table()
            return table[["section", "metric", "label", "microscope", "unit", "exactness", "note"]]
        rows = compare(self.profile, self.ncu.metrics, ncu_blocks=self.profile.blocks, kernel=self.profile.kernel_name)
        return pd.DataFrame(rows).drop(columns=["kernel", "scale"])

    def __repr__(self) -> str:
        from gpucourse.microscope.nsight import format_value

        if self.ncu is None:
            return f"{self.status}\n{self.profile!r}"
        lines = [self.status]
        for row in self.table().itertuples():
            verdict = {True: "agrees", False: "DIFFERS", None: ""}[row.agrees]
            lines.append(f"  {row.metric[:70]:<70} {format_value(row.microscope):>12} {format_value(row.ncu):>12}  "
                         f"{row.relation} {verdict}")
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        import html

        table = self.table()
        return f"<p>{html.escape(self.status)}</p>" + table.to_html(index=False, na_rep="n/a")


def side_by_side(kernel, griddim, blockdim, *args, registers_per_thread=None, factory_call: str | None = None,
                 timeout_s: float = NCU_TIMEOUT_S, **trace_options) -> SideBySide:
    """The microscope's profile of ``kernel[griddim, blockdim](*args)`` and, where ncu and a GPU are here, ncu's
    profile of the same launch, metric by metric. Without them: the microscope's alone, and one line why."""
    from gpucourse.microscope import Profile, profile

    reason = availability()
    if reason:
        return SideBySide(profile(kernel, griddim, blockdim, *args, registers_per_thread=registers_per_thread,
                                  **trace_options), None, reason)
    trace_options.setdefault("cc", runtime.device().compute_capability)
    with tempfile.TemporaryDirectory(prefix="gpucourse-ncu-") as folder:
        # Saved before tracing: the trace writes the kernel's results into the arguments.
        save_job(Path(folder), kernel, griddim, blockdim, args, factory_call)
        mine = profile(kernel, griddim, blockdim, *args, registers_per_thread=registers_per_thread, **trace_options)
        try:
            measured = run_job(Path(folder), kernel_reference(kernel, factory_call)["name"], timeout_s=timeout_s)
        except NcuError as exc:
            return SideBySide(mine, None, str(exc))
    raw = measured.metrics
    registers = registers_per_thread if registers_per_thread is not None else raw.get("launch__registers_per_thread")
    mine = Profile(mine.report, registers_per_thread=_int_or_none(registers),
                   shared_config_bytes=_int_or_none(raw.get("launch__shared_mem_config_size")))
    device = runtime.device().name
    status = (f"Nsight Compute {ncu_version() or ''} on {device}, measured now, beside the microscope's count of the "
              "same launch (registers and carve-out as ncu saw them)")
    return SideBySide(mine, measured, status)


def _int_or_none(value) -> int | None:
    return int(value) if isinstance(value, (int, float)) else None


# -- the course's own recordings: ncu on a real GPU, read back -----------------------------------------

REFERENCE_ROOT = Path(__file__).resolve().parents[2] / "data" / "reference"
RECORDED_METRICS = "catalogue-metrics.csv"
RECORDED_LAUNCHES = "catalogue-launches.json"

@dataclass(frozen=True)
class Recording:
    """One course kernel as Nsight Compute measured it on a real GPU (data/reference/<gpu>/ncu/), with the
    device, date and file it came from. It is a recording: never the learner's GPU."""

    label: str
    gpu: str  # the folder under data/reference/
    device: str
    date: str  # YYYY-MM-DD
    ncu_version: str | None
    file: str  # relative to the course's root
    grid: object
    block: object
    metrics: dict

    @property
    def warps(self) -> int | None:
        threads = self.metrics.get("launch__thread_count")
        return int(threads) // 32 if isinstance(threads, (int, float)) else None

    def value(self, metric: str):
        """ncu's recorded value of one of the report's metrics (by ncu's name); None where not recorded."""
        from gpucourse.microscope.ncu_metrics import BY_NAME

        if metric not in BY_NAME:
            raise CourseError(f"no metric {metric!r} in the report; its metrics are: {', '.join(BY_NAME)}")
        return BY_NAME[metric].ncu_value(self.metrics)

    def per_warp(self, metric: str):
        """A count divided by the recorded launch's warps (ratios and launch properties as they are)."""
        value = self.value(metric)
        if value is None or not _is_count(metric) or not self.warps:
            return value
        return value / self.warps

    @property
    def heading(self) -> str:
        return f"Nsight Compute on {self.device}, recorded {self.date}"

    def caption(self) -> str:
        version = (self.ncu_version or "?").removeprefix("Nsight Compute ").split(" (")[0]
        return (f"{self.heading}: {self.label}, grid {self.grid}, block {self.block} "
                f"({self.file}; ncu {version}). A recording made on that GPU, not this machine.")


def _is_count(metric: str) -> bool:
    from gpucourse.microscope.ncu_agreement import is_count
    from gpucourse.microscope.ncu_metrics import BY_NAME

    return is_count(BY_NAME[metric])


def _recorded_folders(root: Path) -> list[Path]:
    return sorted(p.parent for p in Path(root).glob(f"*/ncu/{RECORDED_METRICS}"))


def _read_folder(folder: Path) -> dict[str, Recording]:
    provenance = json.loads((folder / "provenance.json").read_text())
    stack = provenance.get("device", {})
    date = str(provenance.get("date") or stack.get("date") or "")[:10]
    by_id = {k.id: k for k in parse_csv((folder / RECORDED_METRICS).read_text())}
    try:
        relative = str((folder / RECORDED_METRICS).relative_to(REFERENCE_ROOT.parents[1]))
    except ValueError:
        relative = str(folder / RECORDED_METRICS)
    out = {}
    for launch in json.loads((folder / RECORDED_LAUNCHES).read_text()):
        kernel = by_id.get(launch["launch"])
        if kernel is None:
            continue
        out[launch["label"]] = Recording(
            label=launch["label"], gpu=folder.parent.name, device=stack.get("device", folder.parent.name),
            date=date, ncu_version=(provenance.get("ncu_version") or None), file=relative,
            grid=launch.get("grid"), block=launch.get("block"), metrics=kernel.metrics)
    return out


_FOLDERS: dict = {}


def _folder(folder: Path) -> dict[str, Recording]:
    key = str(folder)
    if key not in _FOLDERS:
        _FOLDERS[key] = _read_folder(folder)
    return _FOLDERS[key]


def recordings(label: str, root: Path | None = None) -> list[Recording]:
    """Every recording of the course kernel ``label`` (a catalogue label, e.g. "copy_columns"), one per GPU
    that has one, in folder order; [] where none exists."""
    found = []
    for folder in _recorded_folders(root or REFERENCE_ROOT):
        recording = _folder(folder).get(label)
        if recording is not None:
            found.append(recording)
    return found


def recorded(label: str, gpu: str | None = None, root: Path | None = None) -> Recording | None:
    """The recording of ``label`` on ``gpu`` (a folder name under data/reference/; None: the first GPU that has
    one), or None where none exists."""
    for recording in recordings(label, root):
        if gpu is None or recording.gpu == gpu:
            return recording
    return None


class Beside:
    """A lesson's few rows of a profile under ncu's names, with the course's recordings of the same kernel
    beside them (counts per warp, so that launches of different sizes compare)."""

    def __init__(self, profile, label: str, rows, recordings_: list[Recording]):
        from gpucourse.microscope.nsight import chosen_rows

        self.profile, self.label, self.recordings = profile, label, recordings_
        self.rows = chosen_rows(rows)

    def table(self):
        import pandas as pd

        full = self.profile.table(self.rows).set_index("metric")
        data = []
        for metric in self.rows:
            row = {"metric": metric, "label": full.at[metric, "label"], "unit": full.at[metric, "unit"],
                   "scale": "per warp" if _is_count(metric) else "as is",
                   "microscope (this launch)": self.profile.per_warp(metric)}
            for recording in self.recordings:
                row[recording.heading] = recording.per_warp(metric)
            row["exactness"] = full.at[metric, "exactness"]
            data.append(row)
        table = pd.DataFrame(data, dtype=object)  # None stays None: "not recorded", not NaN
        table.attrs["source"] = self.source()
        return table

    def value(self, metric: str, column: str = "microscope (this launch)"):
        """One cell of the table (the microscope's value, or a recording's heading)."""
        table = self.table().set_index("metric")
        return table.at[metric, column]

    def source(self) -> str:
        mine = (f"Microscope: {self.profile.kernel_name}, counted in the simulator on this machine "
                f"({self.profile.warps} warps).")
        if not self.recordings:
            return mine + f" No Nsight Compute recording of {self.label} exists in data/reference/ yet."
        return " ".join([mine, *(r.caption() for r in self.recordings)])

    def __repr__(self) -> str:
        from gpucourse.microscope.nsight import format_value

        table = self.table()
        columns = [c for c in table.columns if c not in ("label", "unit", "scale", "exactness", "metric")]
        lines = [f"{'metric':<70} " + " ".join(f"{f'[{i + 1}]':>12}" for i in range(len(columns)))]
        for row in table.to_dict("records"):
            cells = " ".join(f"{format_value(row[c]):>12}" for c in columns)
            lines.append(f"{row['metric'][:70]:<70} {cells}  {row['unit']} {row['scale']}")
        lines += [f"[{i + 1}] {c}" for i, c in enumerate(columns)]
        return "\n".join([*lines, self.source()])

    def _repr_html_(self) -> str:
        import html

        from gpucourse.microscope.nsight import format_value

        table = self.table()
        shown = table.copy()
        for column in shown.columns:
            if column.startswith(("microscope", "Nsight")):
                shown[column] = [format_value(v) for v in shown[column]]
        shown["metric"] = [f"<code>{html.escape(m)}</code>" for m in shown["metric"]]
        return (shown.to_html(index=False, escape=False) +
                f"<p><small>{html.escape(self.source())}</small></p>")


def beside_recorded(profile, label: str, rows="global", root: Path | None = None) -> Beside:
    """``profile``'s ``rows`` (a topic of ``ncu_metrics.TOPICS`` or metric names) beside every recording of the course
    kernel ``label``, each headed "Nsight Compute on <GPU>, recorded <date>" and captioned with its file."""
    return Beside(profile, label, rows, recordings(label, root))
