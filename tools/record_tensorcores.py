"""Record what the tensor-core lesson shows without Triton (macOS, Windows): its CPU recordings.

    python tools/record_tensorcores.py [--out data/compiled/tensorcores]

Needs Triton (Linux) and no GPU: compiles ``matmul_kernel`` for sm_80, sm_90 and sm_100 in every
configuration the lesson's widget offers, runs the interpreter checks, and writes ``compiled.json`` and
``interpreted.json`` with their provenance (command, Triton and Python versions, platform, date). These are
CPU recordings, never GPU measurements: they go in data/compiled/, not data/reference/.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gpucourse.lessons.tensorcores import recordings  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=recordings.RECORDING_DIR)
    args = parser.parse_args(argv)
    for path in recordings.record(args.out):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
