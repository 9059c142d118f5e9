"""The attention lesson's interpreter results without Triton: a committed CPU recording, labelled as one.

Triton ships Linux wheels only, so on macOS and Windows the lesson cannot run its kernel in the interpreter. It
shows instead what ``tools/record_attention_interpreter.py`` recorded on a Linux CPU: each case of ``CASES``
through ``experiments.compare_with_sdpa`` (errors against SDPA, the interpreter's seconds) and
``experiments.traffic_in_interpreter`` (the bytes the loads and stores moved), with its provenance (command,
Triton and torch versions, date, machine). These are CPU recordings of Triton's interpreter, never a GPU's
numbers: they live in ``data/compiled/attention/``, not ``data/reference/`` (only what a real GPU measured).

``interpreter_results()`` runs the cases live where Triton is here, and reads the recording where it is not.
"""

from __future__ import annotations

import json
import platform
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd

from gpucourse.errors import InvalidConfig
from gpucourse.measure import runtime, tritonmode

RECORDING = Path(__file__).resolve().parents[3] / "data" / "compiled" / "attention" / "interpreter.json"
COMMAND = "python tools/record_attention_interpreter.py"
# (batch, heads, n, d, dtype, causal, block_m, block_n): the lesson's cases, each a second or two in the interpreter.
# n = 200 is not a multiple of 32: the last tiles are partial, masked.
CASES = ((1, 1, 256, 64, "float16", False, 32, 32), (1, 1, 256, 64, "float16", True, 32, 32),
         (1, 1, 200, 64, "float32", True, 32, 32), (1, 2, 128, 128, "float32", False, 64, 32))
COLUMNS = ("batch", "heads", "n", "d", "dtype", "causal", "block_m", "block_n", "max_abs_error_o",
           "max_abs_error_lse", "close", "bytes read", "bytes written", "seconds")
MISSING = (f"no recording of the interpreter's results at {RECORDING.name}: on Linux with Triton, regenerate it "
           f"with `{COMMAND}`")


def run_case(batch, heads, n, d, dtype, causal, block_m, block_n) -> dict:
    """One case now, in Triton's interpreter: the comparison with SDPA and the bytes moved."""
    from gpucourse.lessons.attention import experiments

    row = experiments.compare_with_sdpa(batch, heads, n, d, dtype, causal, block_m, block_n)
    row.update(experiments.traffic_in_interpreter(batch, heads, n, d, dtype, causal, block_m, block_n))
    return {key: row[key] for key in COLUMNS}


def record(cases=CASES) -> dict:
    """Every case run now, with its provenance: what ``tools/record_attention_interpreter.py`` writes."""
    import torch
    import triton

    return {"what": "Triton's interpreter on a CPU (no GPU): the attention lesson's FlashAttention forward "
                    "against torch SDPA, and the bytes its loads and stores moved",
            "provenance": {"command": COMMAND, "triton": triton.__version__, "torch": torch.__version__,
                           "python": platform.python_version(), "machine": f"{platform.system()} "
                           f"{platform.machine()}", "date": datetime.now(UTC).isoformat(timespec="seconds")},
            "rows": [run_case(*case) for case in cases]}


def load(path: Path | None = None) -> dict:
    """The committed recording, or InvalidConfig saying how to make it."""
    path = RECORDING if path is None else Path(path)
    if not path.exists():
        raise InvalidConfig(MISSING)
    return json.loads(path.read_text())


def caption(recording: dict) -> str:
    """What a reader must know about recorded rows: where, with what, when; never a GPU."""
    p = recording["provenance"]
    return (f"Recorded on a CPU by Triton {p['triton']}'s interpreter (torch {p['torch']}, {p['machine']}, "
            f"{p['date'][:10]}; `{p['command']}`): a recording, not run here, and not a GPU's numbers")


def _key(row) -> tuple:
    return tuple(row[c] for c in COLUMNS[:8])


def interpreter_results(cases=CASES) -> tuple[pd.DataFrame, str]:
    """(table, where it came from): the cases run now in the interpreter where Triton is installed, else the
    committed recording, labelled as such. On a GPU the kernel is compiled, not interpreted: the errors against
    SDPA are measured now on the GPU and the bytes (which only the interpreter counts) come from the recording."""
    if not tritonmode.triton_available():  # the module's attribute: a test may patch it False
        recording = load()
        return pd.DataFrame(recording["rows"], columns=COLUMNS), caption(recording)
    if not runtime.is_gpu():
        rows = [run_case(*case) for case in cases]
        return pd.DataFrame(rows, columns=COLUMNS), "Run now in Triton's interpreter on this CPU"
    from gpucourse.lessons.attention import experiments

    recording = load()
    counted = {_key(row): row for row in recording["rows"]}
    rows = []
    for case in cases:
        row = experiments.compare_with_sdpa(*case)
        recorded_row = counted.get(tuple(case), {})
        rows.append({**{c: row.get(c) for c in COLUMNS}, "bytes read": recorded_row.get("bytes read"),
                     "bytes written": recorded_row.get("bytes written")})
    return pd.DataFrame(rows, columns=COLUMNS), (f"Errors and seconds: compiled and run now on "
                                                 f"{runtime.device().name}; bytes: {caption(recording)}")
