"""Regenerate data/compiled/attention/interpreter.json: the attention lesson's kernel in Triton's interpreter.

    .venv/bin/python tools/record_attention_interpreter.py          (Linux with Triton, no GPU needed; ~10 s)

The lesson shows this file where Triton cannot be installed (macOS, Windows), labelled as a CPU recording with
its provenance (gpucourse/lessons/attention/recorded.py). Run without a GPU: on a GPU the kernel is compiled,
and the interpreter's byte counter refuses.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gpucourse.lessons.attention import recorded  # noqa: E402
from gpucourse.measure import runtime  # noqa: E402
from gpucourse.measure.tritonmode import triton_or_raise  # noqa: E402


def main() -> int:
    triton_or_raise()
    if runtime.is_gpu():
        print("run this without a GPU (GPUCOURSE_MODE=sim): it records the interpreter", file=sys.stderr)
        return 2
    result = recorded.record()
    recorded.RECORDING.parent.mkdir(parents=True, exist_ok=True)
    recorded.RECORDING.write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n")
    print(f"wrote {recorded.RECORDING} ({len(result['rows'])} cases)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
