"""Measure how long `make grade` takes for many submissions of one lab (not part of `make test`).

    python tools/time_grading.py                      # 50 submissions of lab 01, 1 and 2 workers
    python tools/time_grading.py --students 50 --jobs 2 --stock

Submissions cycle through the solution, the untouched lab and two known-wrong versions. `--stock`
also times plain `nbgrader autograde LAB` (one process, one student after another, same
configuration) for comparison. Prints one line per run: wall seconds, seconds per submission, CPUs.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import nbformat

from gpucourse.tooling.build import ROOT, nbgrader, to_notebook
from gpucourse.tooling.grading import grade_all, nbgrader_api, read_scores


def _variants(lab: str) -> list[nbformat.NotebookNode]:
    solution = to_notebook(ROOT / "solutions" / lab / f"{lab}.py")
    untouched = nbformat.read(ROOT / "labs" / lab / f"{lab}.ipynb", as_version=4)
    wrong = []
    for index in (1, 2):  # blank out one answer cell: a partly right submission
        nb = nbformat.from_dict(solution)
        answers = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("solution")]
        answers[min(index, len(answers) - 1)].source = "raise NotImplementedError()"
        wrong.append(nb)
    return [solution, untouched, *wrong]


def course(tmp: Path, lab: str, students: int) -> Path:
    root = tmp / "course"
    (root / "solutions").mkdir(parents=True)
    shutil.copy(ROOT / "nbgrader_config.py", root)
    shutil.copytree(ROOT / "solutions" / lab, root / "solutions" / lab, ignore=shutil.ignore_patterns("*.ipynb"))
    nbformat.write(to_notebook(root / "solutions" / lab / f"{lab}.py"), root / "solutions" / lab / f"{lab}.ipynb")
    os.chdir(root)
    assert nbgrader_api(root).generate_assignment(lab, force=True)["success"]
    variants = _variants(lab)
    for i in range(students):
        folder = root / "submitted" / f"student{i:03d}" / lab
        folder.mkdir(parents=True)
        nbformat.write(variants[i % len(variants)], folder / f"{lab}.ipynb")
    return root


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lab", default="lab01_warps")
    parser.add_argument("--students", type=int, default=50)
    parser.add_argument("--jobs", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--stock", action="store_true", help="also time plain `nbgrader autograde`")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        root = course(Path(scratch), args.lab, args.students)
        print(f"{args.students} submissions of {args.lab}; {os.cpu_count()} CPUs; "
              f"load average {os.getloadavg()[0]:.1f}", flush=True)
        runs = [("stock", None)] if args.stock else []
        runs += [("make grade", jobs) for jobs in args.jobs]
        for name, jobs in runs:
            shutil.rmtree(root / "autograded", ignore_errors=True)
            started = time.monotonic()
            if jobs is None:
                done = nbgrader(["autograde", args.lab, "--force", "--log-level=ERROR"], root)
                ok = done.returncode == 0
            else:
                ok = grade_all(root, jobs=jobs, quiet=True) == 0
            seconds = time.monotonic() - started
            totals: dict[str, float] = {}
            for row in read_scores(root):
                totals[row["student"]] = totals.get(row["student"], 0.0) + (row["score"] or 0.0)
            label = f"{name} (jobs={jobs})" if jobs else "nbgrader autograde (one process)"
            print(f"{label}: {seconds:.0f} s for {args.students} submissions, {seconds / args.students:.1f} s "
                  f"each; ok={ok}; scores {sorted(set(totals.values()))}; load {os.getloadavg()[0]:.1f}",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
