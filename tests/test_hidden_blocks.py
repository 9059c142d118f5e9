"""Every lab's hidden blocks read the learner's answers only through the grader's gates (issue 46).

A hidden block that calls a learner's function, indexes a learner's dict, iterates a learner's list or
compares a learner's object runs the learner's code where the expected values live (the block's frame):
a lazy mapping, an ``__eq__``, a frame walk can read them or decide the comparison. The gates
(``gpucourse/tooling/grading/frozen.py``, ``traced.py``) freeze answers to plain data and run learner
code on a fresh thread. This test reads each lab's solution source (no nbgrader, no kernel): the names
its exercise cells define (functions, kernels, classes, answer variables) may appear in a hidden block
only as an argument of ``freeze``/``call``/``call_each``/``launch``/``observe``/``trace_launch`` — directly, inside a
tuple or list built there, or through ``functools.partial`` — never called, subscripted, iterated,
compared, read for an attribute or rebound.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# run_hidden_tests binds them
GATES = {"freeze", "call", "call_each", "launch", "trace_launch", "observe"}
WRAPPERS = {"partial"}  # builds a callable around the learner's function without calling it
CONTAINERS = (ast.Tuple, ast.List, ast.keyword)  # building these runs no learner code (no starred: it iterates)
COMPREHENSIONS = (ast.ListComp,)  # its element built per case (a tuple of arguments): no learner code runs
# Labs whose hidden blocks still call learner code outside the gates (each with what is left): none now.
STILL_OUTSIDE: dict[str, str] = {}
CELL = re.compile(r"^# %%(?P<header>.*)$", re.M)
HIDDEN = re.compile(r"^### BEGIN HIDDEN TESTS\n(?P<body>.*?)^### END HIDDEN TESTS$", re.M | re.S)


def lab_sources() -> dict[str, str]:
    return {d.name: (d / f"{d.name}.py").read_text() for d in sorted((ROOT / "solutions").iterdir())
            if (d / f"{d.name}.py").is_file()}


def cells(source: str) -> list[tuple[str, str]]:
    """(header line, code) of each cell of a jupytext percent source."""
    marks = list(CELL.finditer(source))
    return [(m["header"], source[m.end():marks[i + 1].start() if i + 1 < len(marks) else len(source)])
            for i, m in enumerate(marks)]


def learner_names(source: str) -> set[str]:
    """What the exercise cells (``"solution": true``) bind at their top level."""
    names: set[str] = set()
    for header, code in cells(source):
        if '"solution": true' not in header or "[markdown]" in header:
            continue
        for node in ast.parse(code).body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names.add(node.name)
            elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                names |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    return names


def hidden_blocks(source: str) -> list[str]:
    return [m["body"] for m in HIDDEN.finditer(source)]


def _gate_name(node: ast.AST) -> str | None:
    return node.func.id if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) else None


def misuses(block: str, names: set[str]) -> list[str]:
    """Each use of a learner's name in ``block`` that is not an argument of a gate (with its line)."""
    tree = ast.parse(block)
    parents: dict[int, ast.AST] = {}
    for node in ast.walk(tree):
        for child in ast.iter_child_nodes(node):
            parents[id(child)] = node
    found = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Name) and node.id in names):
            continue
        line = block.splitlines()[node.lineno - 1].strip()
        if not isinstance(node.ctx, ast.Load):
            found.append(f"rebinds {node.id}: {line}")
            continue
        child, parent = node, parents.get(id(node))
        while parent is not None:
            gate = _gate_name(parent)
            if gate in GATES or gate in WRAPPERS:
                if child is parent.func:
                    break  # a learner's name as the function called
                if gate in GATES:
                    child = None  # an argument of a gate: fine
                    break
            elif isinstance(parent, COMPREHENSIONS):
                if child is not parent.elt:
                    break  # iterated (or filtered on): that runs the learner's __iter__
            elif not isinstance(parent, CONTAINERS):
                break
            child, parent = parent, parents.get(id(parent))
        if child is not None:
            found.append(f"{node.id} used outside the grader's gates: {line}")
    return found


SOURCES = lab_sources()


def _params():
    for lab in SOURCES:
        marks = []
        if lab in STILL_OUTSIDE:
            marks = [pytest.mark.xfail(strict=True, reason=STILL_OUTSIDE[lab])]
        yield pytest.param(lab, marks=marks, id=lab)


@pytest.mark.parametrize("lab", _params())
def test_hidden_blocks_read_answers_only_through_the_gates(lab):
    source = SOURCES[lab]
    names = learner_names(source)
    assert names, f"{lab}: no names found in its exercise cells"
    blocks = hidden_blocks(source)
    assert blocks, f"{lab}: no hidden blocks"
    problems = [p for block in blocks for p in misuses(block, names)]
    assert not problems, f"{lab}: " + "\n".join(problems)


def test_the_check_finds_each_kind_of_misuse():
    names = {"f", "answers", "kernel"}
    bad = {"f(1)": "call", "answers['a'] == 1": "subscript", "for x in answers: pass": "iteration",
           "answers == {}": "comparison", "answers.get('a')": "attribute", "call(f, f(2))": "call in a gate",
           "check(lambda: f(1) == 2)": "a lambda", "call(g, *answers)": "starred",
           "answers = freeze(answers)": "rebind",
           "launch(kernel[1], 1, 1)": "subscript in a gate", "f2 = partial(f, 1)(3)": "call of a partial",
           "call_each(g, [(x,) for x in answers])": "iterated in a comprehension",
           "call_each(g, [(x,) for x in cases if answers])": "read in a comprehension's filter",
           "got = [f(x) for x in cases]": "called in a comprehension"}
    for code, what in bad.items():
        assert misuses(code, names), what
    good = ["got = call(f, 1)", "a = freeze(answers, 'answers')", "launch(kernel, 1, 32, out)",
            "call_each(f, [(1,), (2,)])", "call(run, partial(f, bf16=False), kernel)",
            "trace_launch(kernel, 1, 1, key='a')", "call_each(judge, [(f, 'op', o) for o in cases])"]
    for code in good:
        assert not misuses(code, names), code
