"""Command line: python -m gpucourse {setup,doctor,record,gpu-report,compile-check,notebooks,labs,lab,
grade,feedback,book,minutes}."""

from __future__ import annotations

import argparse
import sys

from gpucourse.errors import CourseError, InvalidConfig


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gpucourse", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    setup = sub.add_parser("setup", help="make .venv with the stack for this machine (what `make setup` does)")
    setup.add_argument("--cuda", choices=("13", "12", "sim", "system"),
                       help="the stack (default: from the NVIDIA driver; system: the site's own, offline)")
    setup.add_argument("--wheelhouse", help="the system stack's wheels (default: wheelhouse/)")
    doctor = sub.add_parser("doctor", help="pre-flight check for learners and instructors")
    doctor.add_argument("--headless", action="store_true",
                        help="a validation host without JupyterLab: check everything but jupyterlab/nbgrader/jupytext")
    rec = sub.add_parser("record", help="run every registered sweep on this GPU into data/reference/")
    rec.add_argument("sweeps", nargs="*", help="sweep names (default: all)")
    rec.add_argument("--list", action="store_true", help="list the registered sweeps and exit")
    sub.add_parser("notebooks", help="generate .ipynb files from the text sources")
    labs = sub.add_parser("labs", help="regenerate labs/ from solutions/ with nbgrader")
    labs.add_argument("--check", action="store_true", help="fail if labs/ differs from a fresh generation")
    lab = sub.add_parser("lab", help="start JupyterLab with lesson 00 open")
    lab.add_argument("--port", type=int, default=8888)
    grade = sub.add_parser("grade", help="autograde everything in submitted/ and write grades.csv")
    grade.add_argument("--jobs", type=int, default=None, help="students graded in parallel")
    grade.add_argument("--gpu", action="store_true",
                       help="run the grading kernels on the GPU (default: simulator mode, as the labs are designed)")
    sub.add_parser("feedback", help="generate feedback for every graded submission")
    sub.add_parser("book", help="build the static website into build/book/_build/html")
    sub.add_parser("minutes", help="each lesson's and lab's minutes by the course's rule, against what they state")
    compile_check = sub.add_parser("compile-check", help="compile every kernel to SASS for each architecture")
    compile_check.add_argument("--arch", default=None, help="e.g. 75,80,86,89,90,100,120 (the default)")
    compile_check.add_argument("--only", default=None, help="only kernels whose label contains this text")
    widget_run = sub.add_parser("widget-run", help="run each lesson and move every widget it made, timed")
    widget_run.add_argument("--lesson", default=None, help="only lessons whose file name starts with this, e.g. 03")
    widget_run.add_argument("--json", default=None, help="also write the results here")
    widget_run.add_argument("--timeout", type=float, default=None, help="seconds a lesson may take (default 600)")
    widget_run.add_argument("--count", action="store_true",
                            help="count each lesson's moves, make none, and write them for gpu-report's plan")
    report = sub.add_parser("gpu-report", help="GPU tier, every sweep recorded, spread, widget time: one report")
    report.add_argument("--out", default="build/gpu-report", help="folder for gpu-report.md and the recordings")
    report.add_argument("--rehearsal", action="store_true",
                        help="rehearse it on a machine without a GPU (every number marked rehearsal)")
    report.add_argument("--quick", action="store_true",
                        help="the validation profile: quick contract, fewer points; recordings kept apart")
    report.add_argument("--budget", type=float, default=None, metavar="SECONDS",
                        help="skip (and list) the steps whose estimate no longer fits")
    report.add_argument("--resume", action="store_true", help="continue a cut-off report in --out (same GPU, stack)")
    report.add_argument("--retry-failed", action="store_true",
                        help="with --resume: run the steps that failed again (kept as failed otherwise)")
    report.add_argument("--plan", action="store_true", help="print the steps and their estimates; run nothing")
    report.add_argument("--targets", action="store_true",
                        help="the first reservation: lessons 03/04/04a/05's expectations first (full contract, never "
                             "cut by --budget), then the sweeps behind their charts (quick plans); planned ≤ 8 min")
    args = parser.parse_args(argv)
    try:
        return _run(args)
    except CourseError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


def _run(args) -> int:
    if args.command == "setup":
        from gpucourse.tooling.install import main as install

        return install((["--cuda", args.cuda] if args.cuda else [])
                       + (["--wheelhouse", args.wheelhouse] if args.wheelhouse else []))
    if args.command == "compile-check":
        from gpucourse.tooling.compilecheck import main as compile_check

        return compile_check(args.arch, args.only)
    if args.command == "doctor":
        from gpucourse.tooling.doctor import run_doctor

        return run_doctor(headless=args.headless)
    if args.command == "record":
        from gpucourse.measure import recording, reference

        if args.list:
            for name, sweep in sorted(reference.load_all_sweeps().items()):
                print(f"{name:32s} {sweep.lesson:18s} {sweep.description}")
            return 0
        for path in recording.record(args.sweeps or None):
            print(f"wrote {path}")
        return 0
    if args.command == "notebooks":
        from gpucourse.tooling.build import build_notebooks

        paths = build_notebooks()
        print(f"{len(paths)} notebooks up to date")
        return 0
    if args.command == "labs":
        from gpucourse.tooling import build

        if args.check:
            problems = build.check_labs()
            for problem in problems:
                print(f"labs/: {problem}", file=sys.stderr)
            if not problems:
                print(f"labs/ matches solutions/ ({len(build.lab_names())} labs, no solutions or hidden tests)")
            return 1 if problems else 0
        print("generated:", ", ".join(build.generate_labs()))
        return 0
    if args.command == "lab":
        from gpucourse.tooling.launch import main as launch
        from gpucourse.tooling.launch import reexec_in_course_venv

        reexec_in_course_venv(["-m", "gpucourse", "lab", "--port", str(args.port)])
        from gpucourse.tooling.build import build_notebooks

        build_notebooks()  # what `make lab` does first (Windows has no make)
        launch(args.port)
        return 0
    if args.command == "minutes":
        from gpucourse.tooling.minutes import main as minutes

        return minutes()
    if args.command == "book":
        from gpucourse.tooling.book import build as build_book

        build_book()
        return 0
    if args.command == "gpu-report":
        from gpucourse.tooling import gpureport

        if args.plan:
            steps = gpureport.plan_steps(args.quick, targets=args.targets)
            for step in steps:  # each estimate says where it comes from: the model, or the last real run
                print(f"{step.name:36s} {step.estimate_s:6.1f} s  {step.source}")
            for group, seconds in gpureport.plan_groups(steps).items():
                print(f"{'  all ' + group:36s} {seconds:6.1f} s")
            print(f"{'estimated, start-up included':36s} {gpureport.estimate_s(args.quick, args.targets):6.1f} s")
            print(f"~10-minute reservations with --resume: {gpureport.reservations(args.quick, args.targets)}")
            return 0
        if args.budget is not None and args.budget <= 0:
            raise InvalidConfig(f"--budget must be a positive number of seconds, got {args.budget:g}")
        done = gpureport.build(args.out, practice=args.rehearsal, quick=args.quick, budget_s=args.budget,
                               resume=args.resume, retry_failed=args.retry_failed, targets=args.targets)
        failed = [s.name for s in done.steps if s.status == "failed"]
        print(f"wrote {done.path}, {done.data_folder} and {done.archive}"
              + (f"; failed steps: {', '.join(failed)}" if failed else ""))
        return 0
    if args.command == "widget-run":
        from gpucourse.tooling import widgetrun

        return widgetrun.main((["--lesson", args.lesson] if args.lesson else []) + (["--json", args.json] if args.json
                              else []) + (["--timeout", str(args.timeout)] if args.timeout else [])
                              + (["--count"] if args.count else []))
    if args.command == "grade":
        from gpucourse.tooling.grading import grade_all

        return grade_all(jobs=args.jobs, gpu=args.gpu)
    if args.command == "feedback":
        from gpucourse.tooling.grading import feedback_all

        return feedback_all()
    return 2


if __name__ == "__main__":
    sys.exit(main())
