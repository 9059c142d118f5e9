"""A lesson's words as tests read them back (the lesson-text tests share these two helpers)."""

from __future__ import annotations

import re

from gpucourse.tooling.build import ROOT


def lesson_text(name: str) -> str:
    """The lines of ``notebooks/<name>`` joined by spaces, comment markers stripped (code lines kept)."""
    return " ".join(line.lstrip("# ") for line in (ROOT / "notebooks" / name).read_text().splitlines())


def number(pattern: str, text: str) -> float:
    """The number in ``pattern``'s first group, where it first matches ``text`` (thousands commas dropped)."""
    found = re.search(pattern, text)
    assert found, pattern
    return float(found.group(1).replace(",", ""))
