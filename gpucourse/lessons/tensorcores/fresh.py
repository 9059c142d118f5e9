"""``compile_for`` in a fresh Python process: what a grader reads when a learner's notebook must not be able to
change the answer (a patched ``compile_for``, a planted cache entry). The child compiles each request and prints
the facts as JSON; the parent gets plain dicts back. Cached per process (one child per distinct batch).

    facts_in_fresh_process([(90, "float16", (64, 64, 64), 4, 3)])  # -> [{"registers": ..., "shared_bytes": ...}]
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

FRESH_COMPILE_TIMEOUT_S = 300  # a compile takes seconds; the child also imports Triton with an empty cache
_MARK = "GPUCOURSE-FACTS "


def _request(cc, dtype, tile, num_warps, num_stages) -> tuple:
    from gpucourse.lessons.tensorcores.compiled import check_config

    cc, dtype, tile, num_warps, num_stages = check_config(cc, dtype, tile, num_warps, num_stages)
    return cc, str(dtype), tile, int(num_warps), int(num_stages)


def facts_in_fresh_process(requests, timeout_s: float = FRESH_COMPILE_TIMEOUT_S) -> list[dict]:
    """The ``CompiledFacts`` (as plain dicts) of each ``(cc, dtype, tile, num_warps, num_stages)``, compiled in one
    child process. ``TritonMissing`` without Triton, ``TimeoutError`` past ``timeout_s``."""
    from gpucourse.lessons.tensorcores.kernels import triton_or_raise

    triton_or_raise()
    return [dict(f) for f in _facts(tuple(_request(*r) for r in requests), float(timeout_s))]


@functools.cache
def _facts(requests: tuple, timeout_s: float) -> tuple:
    # Nothing the notebook can change reaches the child: isolated mode (-I: no PYTHON* variables, no current
    # folder on sys.path, no user site), a new empty folder as its working folder and Triton cache, and an
    # environment of its own (no TRITON_* knobs, the system PATH: no other cuobjdump)
    package_parent = str(Path(__file__).absolute().parents[3])  # as imported (the grader links the package)
    code = (f"import sys; sys.path.insert(0, {package_parent!r}); "
            "from gpucourse.lessons.tensorcores.fresh import _main; _main(sys.argv[1])")
    with tempfile.TemporaryDirectory(prefix="gpucourse-fresh-") as tmp:
        env = {"PATH": os.defpath, "HOME": tmp, "TMPDIR": tmp, "TRITON_CACHE_DIR": str(Path(tmp) / "triton"),
               "LANG": "C.UTF-8"}
        try:
            done = subprocess.run([sys.executable, "-I", "-c", code, json.dumps(requests)], capture_output=True,
                                  text=True, timeout=timeout_s, env=env, cwd=tmp)
        except subprocess.TimeoutExpired as error:
            raise TimeoutError(f"compiling {len(requests)} configurations took over {timeout_s:.0f} s") from error
    lines = [line for line in done.stdout.splitlines() if line.startswith(_MARK)]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"the compile in a fresh process failed: {done.stderr.strip()[-500:]}")
    return tuple(tuple(sorted(f.items())) for f in json.loads(lines[-1][len(_MARK):]))


def _main(argument: str) -> None:
    from gpucourse.lessons.tensorcores.compiled import compile_for

    facts = [dataclasses.asdict(compile_for(cc, dtype, tuple(tile), warps, stages))
             for cc, dtype, tile, warps, stages in json.loads(argument)]
    print(_MARK + json.dumps(facts), flush=True)
