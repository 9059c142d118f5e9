"""The course's stated minutes (lesson and lab headers, instructor notes, agendas) agree with one rule.

The rule and its constants are in gpucourse/tooling/minutes.py; every check here also runs on planted
wrong values (a header, a section, the instructor table, an agenda, the rule itself) and must fail there.
"""

import shutil

import pytest

from gpucourse.errors import InvalidConfig
from gpucourse.tooling import minutes
from gpucourse.tooling.minutes import ROOT


@pytest.fixture
def course(tmp_path):
    """A scratch copy of what the rule reads: lessons, labs' sources, instructor notes."""
    shutil.copytree(ROOT / "notebooks", tmp_path / "notebooks", ignore=shutil.ignore_patterns("*.ipynb"))
    shutil.copytree(ROOT / "solutions", tmp_path / "solutions", ignore=shutil.ignore_patterns("*.ipynb"))
    shutil.copytree(ROOT / "instructor", tmp_path / "instructor")
    return tmp_path


def plant(path, old, new):
    text = path.read_text()
    assert text.count(old) == 1, f"{old!r} not found once in {path}"
    path.write_text(text.replace(old, new))


def test_every_stated_minute_agrees_with_the_rule():
    assert minutes.problems() == []


def test_every_lesson_and_lab_is_counted():
    units = minutes.all_units()
    assert len([n for n in units if not n.startswith("lab")]) == len(list((ROOT / "notebooks").glob("[0-9]*_*.py")))
    assert {f"lab{p.name[3:].split('_')[0]}" for p in (ROOT / "solutions").glob("lab*")} <= set(units)


def test_the_rule_on_a_small_source():
    source = """# %% [markdown]
# # A lesson
#
# *About 10 minutes.*
#
""" + "# " + "word " * 260 + """
#
# ### Predict
# Guess.

# %%
lesson.thing_explorer()

# %% [markdown]
# ## Extra *(optional, 2 min)*
# one two

# %%
def f():
    ### BEGIN SOLUTION
    return 1
    ### END SOLUTION
"""
    unit = minutes.parse(source, "xx")
    core = unit.counts()
    assert (core.words, core.predicts, core.explorers, core.code_cells) == (267, 1, 1, 1)
    assert unit.core_min == pytest.approx(267 / 130 + 3 + 3 + 1)
    assert unit.optional_min == pytest.approx(6 / 130 + 1 * minutes.SOLUTION_LINE_MIN + minutes.SOLUTION_CELL_MIN)
    assert unit.stated_core_min == 10 and unit.sections[-1].stated_min == 2
    with pytest.raises(InvalidConfig, match="no jupytext cells"):
        minutes.parse("print(1)\n", "bad")


def test_a_lab_without_minutes_fails_with_a_clear_message(course):
    lab = course / "solutions" / "lab01_warps" / "lab01_warps.py"
    plant(lab, "*About 30 minutes.", "*About half an hour.")
    found = minutes.problems(course)
    assert any("lab01_warps.py: its first cell states no minutes; write e.g. '*About 30 minutes.*'" in p for p in found)


def test_a_new_lab_is_counted_without_a_change_to_the_rule(course):
    shutil.copytree(course / "solutions" / "lab01_warps", course / "solutions" / "lab99_new")
    (course / "solutions" / "lab99_new" / "lab01_warps.py").rename(course / "solutions" / "lab99_new" / "lab99_new.py")
    assert "lab99" in minutes.all_units(course)


@pytest.mark.parametrize("path, old, new, expected", [
    ("notebooks/00_measuring.py", "In 20 minutes", "In 30 minutes", "00_measuring.py header: states 30"),
    ("notebooks/08_feeding.py", "16 optional minutes", "5 optional minutes", "header, optional: states 5"),
    ("notebooks/04_shared_memory.py", "(35 min)", "(25 min)", "'Part A · Tiling and barriers (25 min)'"),
    ("notebooks/08_feeding.py", "compute (12 min)", "compute (6 min)", "'2 · Streams"),
    ("notebooks/02_divergence.py", "Teaching 35 min · exercises 10 min", "Teaching 25 min · exercises 20 min",
     "02_divergence.py teaching"),
    ("notebooks/06_races.py", "part B 30 min (teaching", "part B 35 min (teaching", "teaching 27 + exercises 3"),
    ("notebooks/04_shared_memory.py", "then lab 04 (65 min", "then lab 04 (30 min", "says lab 04 takes 30 min"),
    ("notebooks/07_precision.py", "# ## Tensor cores: speed by dtype *(optional, 11 min)*",
     "# ## Tensor cores: speed by dtype", "over 60: split it"),
    ("solutions/lab04_shared_memory/lab04_shared_memory.py", "*About 65 minutes.", "*About 30 minutes.",
     "lab04_shared_memory.py header: states 30"),
    ("instructor/README.md",
     "| 48 min + 3 optional (why the first experiment fooled us 2, other GPUs 1) | lab05_occupancy | 75",
     "| 40 min + 3 optional (why the first experiment fooled us 2, other GPUs 1) | lab05_occupancy | 30",
     "lesson 05 '40 min"),
    ("instructor/05_occupancy.md", "Pacing (48 min + 3 optional)", "Pacing (40 min + 3 optional)",
     "05_occupancy.md: pacing 40 min"),
    ("instructor/08_feeding.md", "core + 16 optional", "core + 11 optional", "08_feeding.md: pacing's optional"),
    ("instructor/05_occupancy.md", "latency hiding and ILP 14 min", "latency hiding and ILP 6 min",
     "05_occupancy.md: the pacing's items add up to 43 min"),
    ("instructor/06_races.md", "key points of B 1 min", "key points of B 6 min",
     "06_races.md: the pacing's items add up to 60"),
    ("instructor/02_divergence.md", "| 14–24 |", "| 15–24 |", "02_divergence.md: the pacing table's minutes"),
    ("instructor/03_coalescing.md", "| 51–55 |", "| 51–50 |", "03_coalescing.md: the pacing table's minutes"),
    ("instructor/08_feeding.md", "capstone, 50 min", "capstone, 40 min", "says lab 08 takes 40 min"),
    ("instructor/agendas.md", "| 1:25 | 55 | 03 Memory coalescing | Lab 03 is homework |",
     "| 1:25 | 30 | 03 Memory coalescing | Lab 03 is homework |", "03 Memory coalescing gets 30 min"),
    ("instructor/agendas.md", "| 0:45 | 10 | Lab 01 exercises 1–2", "| 0:45 | 10 | Lab 01 exercises 1–3",
     "Lab 01 exercises 1–3, in pairs gets 10 min"),
    ("instructor/agendas.md", "| 17:00 | 30 | Buffer |", "| 17:00 | 45 | Buffer |", "after its stated end 17:30"),
    ("instructor/agendas.md", "| 1:25 | 55 | 03 Memory", "| 1:20 | 55 | 03 Memory", "starts at 1:20"),
    ("instructor/agendas.md", "| 15:20 | 65 | Lab 04 |", "| 15:20 | 35 | Lab 04 |", "Lab 04 gets 35 min"),
    ("instructor/agendas.md", "| 2:30 | 35 | 04 part A", "| 2:30 | 35 | 04 part C", "has no part C"),
])
def test_a_planted_wrong_value_is_found(course, path, old, new, expected):
    plant(course / path, old, new)
    found = minutes.problems(course)
    assert any(expected in p for p in found), found


def test_a_changed_rule_is_found(monkeypatch):
    monkeypatch.setattr(minutes, "READING_WORDS_PER_MIN", 260)  # skimming, not reading to learn
    assert len(minutes.problems()) > 10
    monkeypatch.undo()
    monkeypatch.setattr(minutes, "SOLUTION_LINE_MIN", 0.25)
    assert any("lab04_shared_memory.py header" in p for p in minutes.problems())


def test_the_command_prints_the_table(capsys):
    from gpucourse.__main__ import main

    assert main(["minutes"]) == 0
    out = capsys.readouterr().out
    assert "lab04" in out and "total" in out and " NO" not in out
