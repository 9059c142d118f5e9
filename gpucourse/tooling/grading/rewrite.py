"""Source rewrites of a test cell: each hidden block becomes one call of ``hidden.run_hidden_tests``
(for grading), or is cut out (for feedback). Pure functions of the cell's text."""

from __future__ import annotations

import textwrap

BEGIN_HIDDEN, END_HIDDEN = "BEGIN HIDDEN TESTS", "END HIDDEN TESTS"
# How a rewritten block reaches run_hidden_tests: through the module's entry in sys.modules (import_module
# returns it), not through package attributes such as ``gpucourse.tooling.grading``, which a notebook can
# replace with a stand-in that skips the tests.
RUN_HIDDEN_TESTS = "__import__('importlib').import_module('gpucourse.tooling.grading.hidden').run_hidden_tests"


def guard_hidden_tests(source: str) -> str:
    """Rewrite each ``### BEGIN HIDDEN TESTS`` … ``### END HIDDEN TESTS`` block into one call of
    ``run_hidden_tests`` (markers kept, so feedback can still strip the block)."""
    out: list[str] = []
    block: list[str] | None = None
    indent = ""
    for line in source.split("\n"):
        if BEGIN_HIDDEN in line and block is None:
            block, indent = [], line[: len(line) - len(line.lstrip())]
            out.append(line)
        elif END_HIDDEN in line and block is not None:
            out.append(_hidden_call(block, indent))
            out.append(line)
            block = None
        elif block is not None:
            block.append(line)
        else:
            out.append(line)
    if block is not None:  # an unterminated block: everything after the marker is hidden
        out.append(_hidden_call(block, indent))
    return "\n".join(out)


def _hidden_call(block: list[str], indent: str) -> str:
    code = textwrap.dedent("\n".join(block))
    return f"{indent}{RUN_HIDDEN_TESTS}({code!r}, globals(), locals())"


def strip_hidden_tests(source: str) -> str:
    """The source without its hidden-test blocks (markers included)."""
    out, hidden = [], False
    for line in source.split("\n"):
        if BEGIN_HIDDEN in line:
            hidden = True
        elif END_HIDDEN in line:
            hidden = False
        elif not hidden:
            out.append(line)
    return "\n".join(out).rstrip("\n")
