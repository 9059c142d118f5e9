"""The tensor-core lesson with or without Triton: compiled facts and interpreter results, live or recorded.

Triton ships Linux wheels only. Where ``tritonmode.triton_available()`` says yes, ``compiled_facts`` compiles
now (``compiled.compile_for``) and ``interpreted_check`` runs Triton's interpreter now; elsewhere (macOS,
Windows) both read the committed CPU recordings in ``data/compiled/tensorcores/`` (made on a CPU without a GPU
by ``tools/record_tensorcores.py``; provenance: command, Triton version, date), and every result says which
it is (``source``). A recording is never a GPU measurement: nothing here ran on a GPU.

Inputs are checked first, the same way on both paths: an unknown cc, dtype or tile is one clear error before
anything compiles or is looked up; a configuration the recording does not hold says which ones it does.
"""

from __future__ import annotations

import functools
import json
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from gpucourse.errors import InvalidConfig
from gpucourse.lessons.tensorcores import compiled, experiments, kernels
from gpucourse.lessons.tensorcores.compiled import CompiledFacts, check_config
from gpucourse.lessons.tensorcores.model import GENERATIONS, check_operands
from gpucourse.measure import tritonmode

ROOT = Path(__file__).resolve().parents[3]
RECORDING_DIR = ROOT / "data" / "compiled" / "tensorcores"
COMPILED_FILE = "compiled.json"
INTERPRETED_FILE = "interpreted.json"
RECORD_COMMAND = "python tools/record_tensorcores.py"

# What the lesson's widget offers (and so what the recording holds, for every cc, fp16)
WIDGET_TILES = ((64, 64, 32), (128, 128, 64), (128, 256, 64))
WIDGET_STAGES = (1, 2, 3, 4)
WIDGET_WARPS = (4, 8)
DEFAULT_CONFIG = {"tile": kernels.COMPILE_TILE, "num_warps": 4, "num_stages": 3}
# The interpreter runs the lesson shows: uneven sizes, so the masks matter (none a multiple of 32)
INTERPRETED_RUNS = ((100, 72, 64, "float16"), (100, 72, 64, "float32"))
INTERPRET_SEED = 0


@dataclass(frozen=True)
class InterpretedCheck:
    """One matmul by the Triton kernel in Triton's interpreter, checked against NumPy (float64)."""

    m: int
    n: int
    k: int
    dtype: str
    max_abs_error: float  # |C_triton − A·B| over C, A·B in float64 from the same (rounded) inputs
    max_abs_value: float  # the largest |A·B|, for scale
    triton_version: str
    seconds: float = 0.0  # the interpreter's wall time on this CPU (never recorded: it is not GPU performance)
    source: str = ""  # "run now in Triton X's interpreter" or "recording: ..."

    @property
    def matches(self) -> bool:
        """Within fp32 accumulation error: about 1e-6 of the values' size for these K."""
        return self.max_abs_error <= 1e-5 * max(1.0, self.max_abs_value)


def _config_key(cc: int, dtype: str, tile, num_warps: int, num_stages: int) -> str:
    return f"sm_{cc} {dtype} {'x'.join(map(str, tile))} w{num_warps} s{num_stages}"


# --- reading the recordings ---------------------------------------------------------------------------------

def _read(name: str, directory: Path | None = None) -> dict:
    path = (directory or RECORDING_DIR) / name
    if not path.exists():
        raise InvalidConfig(f"no recording {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}: "
                            f"make it on Linux with `{RECORD_COMMAND}`")
    return json.loads(path.read_text())


@functools.cache
def recorded_compiled(directory: Path | None = None) -> tuple[dict, dict[str, CompiledFacts]]:
    """(provenance, key -> CompiledFacts) from the committed compiled recording."""
    data = _read(COMPILED_FILE, directory)
    facts = {}
    for row in data["facts"]:
        row = dict(row, tile=tuple(row["tile"]), mma_opcodes=tuple(row["mma_opcodes"]))
        fact = CompiledFacts(**row)
        facts[_config_key(fact.cc, fact.dtype, fact.tile, fact.num_warps, fact.num_stages)] = fact
    return data["provenance"], facts


@functools.cache
def recorded_interpreted(directory: Path | None = None) -> tuple[dict, dict[tuple, InterpretedCheck]]:
    data = _read(INTERPRETED_FILE, directory)
    runs = {(r["m"], r["n"], r["k"], r["dtype"]): InterpretedCheck(**r) for r in data["runs"]}
    return data["provenance"], runs


def provenance_line(provenance: dict) -> str:
    """How a recording was made, in one line (shown wherever a recording stands in for a run)."""
    return (f"recording (CPU, no GPU): Triton {provenance['triton']}, {provenance['date']}, "
            f"`{provenance['command']}`")


# --- the lesson's two calls, live or recorded ---------------------------------------------------------------

def compiled_facts(cc, dtype: str = "float16", tile=kernels.COMPILE_TILE, num_warps: int = 4,
                   num_stages: int = 3) -> tuple[CompiledFacts, str]:
    """(facts, source): what ``matmul_kernel`` becomes on ``cc``, compiled now where Triton is installed,
    else from the recording (``source`` says which)."""
    cc, dtype, tile, num_warps, num_stages = check_config(cc, dtype, tile, num_warps, num_stages)
    if tritonmode.triton_available():
        facts = compiled.compile_for(cc, dtype, tile, num_warps, num_stages)
        return facts, f"compiled now on this computer's CPU (Triton {facts.triton_version}, no GPU needed)"
    provenance, facts = recorded_compiled()
    key = _config_key(cc, dtype, tile, num_warps, num_stages)
    if key not in facts:
        raise InvalidConfig(f"{key} is not in the recording (without Triton only recorded configurations "
                            f"can be shown): tiles {', '.join('×'.join(map(str, t)) for t in WIDGET_TILES)}, "
                            f"stages {WIDGET_STAGES}, warps {WIDGET_WARPS}, float16; and "
                            f"{'×'.join(map(str, DEFAULT_CONFIG['tile']))} in bfloat16 and float32")
    return facts[key], provenance_line(provenance)


def interpreted_check(m: int = 100, n: int = 72, k: int = 64, dtype: str = "float16") -> InterpretedCheck:
    """C = A·B for random A (m×k), B (k×n) by the Triton kernel in the interpreter, against NumPy; without
    Triton, the recorded run of the same inputs. Bad input (bf16, too large) is refused first, on both paths."""
    a, b = _operands(m, n, k, dtype)
    check_operands(a, b)  # bf16, empty, too large, ...: one line before anything runs or is looked up
    if not tritonmode.triton_available():
        provenance, runs = recorded_interpreted()
        if (m, n, k, dtype) not in runs:
            raise InvalidConfig(f"{m}×{n}×{k} {dtype} is not in the recording (without Triton only the recorded "
                                f"runs can be shown): {', '.join(f'{r[0]}×{r[1]}×{r[2]} {r[3]}' for r in runs)}")
        return _with_source(runs[(m, n, k, dtype)], provenance_line(provenance))
    import time

    import triton

    start = time.perf_counter()
    c = experiments.run_interpreted(a, b)
    seconds = time.perf_counter() - start
    exact = a.astype(np.float64) @ b.astype(np.float64)
    return InterpretedCheck(m, n, k, dtype, float(np.abs(c - exact).max()), float(np.abs(exact).max()),
                            triton.__version__, round(seconds, 2),
                            f"run now in Triton {triton.__version__}'s interpreter (NumPy on the CPU)")


def _operands(m: int, n: int, k: int, dtype: str) -> tuple[np.ndarray, np.ndarray]:
    if dtype == "bfloat16":  # NumPy has no bfloat16: refuse it here with the interpreter's own words
        from gpucourse.lessons.tensorcores.model import BF16_REFUSAL

        raise InvalidConfig(BF16_REFUSAL)
    try:
        np_dtype = np.dtype(dtype)
    except TypeError as error:
        raise InvalidConfig(f"dtype must be float16 or float32, got {dtype!r}") from error
    rng = np.random.default_rng(INTERPRET_SEED)
    return rng.standard_normal((m, k)).astype(np_dtype), rng.standard_normal((k, n)).astype(np_dtype)


def _with_source(run: InterpretedCheck, source: str) -> InterpretedCheck:
    return InterpretedCheck(**{**asdict(run), "source": source})


# --- writing them (tools/record_tensorcores.py) -------------------------------------------------------------

def widget_configs():
    """Every configuration the widget offers, for every cc (float16)."""
    for cc in GENERATIONS:
        for tile in WIDGET_TILES:
            for num_warps in WIDGET_WARPS:
                for num_stages in WIDGET_STAGES:
                    yield cc, "float16", tile, num_warps, num_stages


def recorded_configs():
    """What the recording must hold: the widget's configurations, and the lesson's default tile in the other
    dtypes its tables show (bfloat16, float32) for every cc."""
    yield from widget_configs()
    for dtype in ("bfloat16", "float32"):
        for cc in GENERATIONS:
            yield cc, dtype, DEFAULT_CONFIG["tile"], DEFAULT_CONFIG["num_warps"], DEFAULT_CONFIG["num_stages"]


def record(directory: Path = RECORDING_DIR, command: str = RECORD_COMMAND, configs=None) -> list[Path]:
    """Compile and interpret now (needs Triton, no GPU) and write both recordings with their provenance."""
    import datetime
    import platform

    triton = kernels.triton_or_raise()
    provenance = {"command": command, "triton": triton.__version__, "python": platform.python_version(),
                  "platform": platform.platform(), "date": datetime.date.today().isoformat(),
                  "what": "CPU recording: compiled and interpreted without a GPU; no timing, not a GPU measurement"}
    directory.mkdir(parents=True, exist_ok=True)
    facts = [asdict(compiled.compile_for(*config)) for config in (configs or recorded_configs())]
    runs = [asdict(interpreted_check(*run)) for run in INTERPRETED_RUNS]
    written = []
    for name, key, rows in ((COMPILED_FILE, "facts", facts), (INTERPRETED_FILE, "runs", runs)):
        for row in rows:  # what varies run to run (compile wall time) or by path (the source line) stays out
            row.pop("source", None)
            row.pop("seconds", None)
        path = directory / name
        path.write_text(json.dumps({"provenance": provenance, key: rows}, indent=1, sort_keys=True) + "\n")
        written.append(path)
    recorded_compiled.cache_clear()
    recorded_interpreted.cache_clear()
    return written


def mode_line() -> str:
    """What this lesson does here: compile and interpret now (Triton installed), or show the recordings."""
    if tritonmode.triton_available():
        from importlib import metadata

        return (f"Triton {metadata.version('triton')} is installed: this lesson compiles and interprets now, on "
                f"this computer's CPU (no GPU needed for either)")
    try:
        recorded = provenance_line(recorded_compiled()[0])
    except InvalidConfig as error:
        recorded = str(error)
    return f"{tritonmode.TRITON_MISSING}. Shown instead: the {recorded}"
