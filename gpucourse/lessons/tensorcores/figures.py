"""The tensor-core lesson's tables: one kernel, three generations, side by side (no charts yet)."""

from __future__ import annotations

import pandas as pd

from gpucourse.lessons.tensorcores.compiled import compile_for
from gpucourse.lessons.tensorcores.model import GENERATIONS


def generations_table(dtype: str = "float16", ccs=tuple(GENERATIONS)) -> pd.DataFrame:
    """One row per compute capability: who issues the mma, its PTX and SASS, registers, shared memory."""
    rows = []
    for cc in ccs:
        facts = compile_for(cc, dtype)
        rows.append({"GPU": facts.generation, "issued by": GENERATIONS[facts.cc].issued_by,
                     "PTX": ", ".join(f"{k} ×{v}" for k, v in facts.ptx.items()),
                     "SASS": ", ".join(f"{k} ×{v}" for k, v in facts.sass.items()),
                     "mma opcodes": ", ".join(facts.mma_opcodes), "registers": facts.registers,
                     "stack B": facts.stack_bytes, "shared B": facts.shared_bytes})
    return pd.DataFrame(rows)
