"""tooling/plainrun.py: a lesson's code cells as plain Python, for validation hosts without Jupyter."""

from __future__ import annotations

from gpucourse.tooling import plainrun

SOURCE = '''# ---
# jupyter:
#   jupytext: {}
# ---

# %% [markdown]
# # Title
# x = 1 (markdown, not code)

# %%
value = 20
# %time value += 1

# %% tags=["solution"]
%matplotlib inline
value += 1
display("value", value)

# %% [markdown]
# done
'''


def test_code_cells_skip_markdown_and_comment_out_ipython_magics():
    cells = plainrun.code_cells(SOURCE)
    assert len(cells) == 2 and "Title" not in "".join(cells)
    assert "# (IPython only) %matplotlib inline" in cells[1]


def test_a_source_runs_cell_by_cell_and_a_failure_names_its_cell(tmp_path):
    good = tmp_path / "good.py"
    good.write_text(SOURCE)
    done = plainrun.run(good, timeout_s=120)
    assert done.ok and done.detail == "2 cells", done.detail
    bad = tmp_path / "bad.py"
    bad.write_text(SOURCE + "\n# %%\nraise ValueError('the third cell fails')\n")
    failed = plainrun.run(bad, timeout_s=120)
    assert not failed.ok and failed.detail == "cell 3 of 3: ValueError: the third cell fails"


def test_every_lesson_and_lab_solution_is_listed():
    names = [p.stem for p in plainrun.sources()]
    assert names[0] == "00_measuring" and "08_feeding" in names and "lab08_feeding" in names
    assert len(names) == 21  # 11 lessons, 10 labs
