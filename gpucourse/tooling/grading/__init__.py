"""Hardened grading: hidden-test checks, a sandboxed autograder, `make grade` and `make feedback`.

Its rooms, lowest first (a room imports only rooms before it: ``tests/test_layers.py``):

* **In the learner's kernel** (imported by every lab, through this package): ``hidden`` (``check()``,
  ``run_hidden_tests()``: a hidden block runs muted in a private namespace, with the grader's ``check``,
  ``freeze`` and ``call``, its declared ``FORBIDDEN`` targets armed, and any failure is one generic line)
  on top of ``frozen`` (a learner's answer copied to plain data, a learner's function called on a fresh
  thread, before any comparison), ``tripwire`` (forbidden functions that record calls from learner code)
  and ``snapshot`` (what hidden tests rely on, taken before any learner code runs and
  put back before each hidden block) and ``hooks`` (IPython's own hooks, with the snapshot, put back around
  every graded cell, asked by the grader outside any cell).
* **Reading the source**: ``rewrite`` (hidden blocks into one guarded call; cut out for feedback) and
  ``scan`` (the tamper scan).
* **nbgrader's side** (imported only by the grader: they need nbgrader): ``notes`` (the grader's notes in
  a notebook), ``header`` (the kernel's startup file that takes the snapshot), ``locked`` (locked cells a
  submission deleted, put back), ``execute`` (``GuardedExecute``: sandboxed kernel, limits that always
  end, output capped) and ``preprocessors`` (``GuardSubmission``, ``FinalizeGrades``,
  ``SanitizeFeedback``).
* **The batch**: ``report`` (scores, grades.csv, the summary), ``workers`` (grading processes) and
  ``batch`` (``grade_all``, ``feedback_all``); then ``known`` (a lab's solution and known-wrong submissions,
  graded once through the batch: ``gpu-report``'s grading steps and tests/labtools.py).
* **The sandbox** (``gpucourse.tooling.sandbox``, Linux Landlock): the grading kernel reads only the Python
  installation, the package and ``data/``, and writes only its notebook folder and a private home.

The names below stay importable from here (``from gpucourse.tooling.grading import check``; nbgrader_config.py
names ``gpucourse.tooling.grading.GuardSubmission``). Only the kernel's rooms are imported with the package;
the rest on first use, so a learner's kernel never imports nbgrader.
"""

from __future__ import annotations

import importlib

from gpucourse.tooling.grading.frozen import AnswerRefused, call, freeze
from gpucourse.tooling.grading.hidden import (
    GENERIC_FAILURE,
    HiddenTestFailed,
    check,
    reaches_package,
    run_hidden_tests,
)
from gpucourse.tooling.grading.snapshot import custom_comparisons, snapshot_environment
from gpucourse.tooling.grading.tripwire import Trips, armed

# name -> the module that holds it, imported on first use
_LATER = {
    **dict.fromkeys(["BEGIN_HIDDEN", "END_HIDDEN", "guard_hidden_tests", "strip_hidden_tests"], "rewrite"),
    **dict.fromkeys(["PROTECTED_NAMES", "imported_names", "lab_helpers", "scan_learner_code"], "scan"),
    **dict.fromkeys(["NOTE_KEY"], "notes"),
    **dict.fromkeys(["HEADER_STATUS", "header_note"], "header"),
    **dict.fromkeys(["RestoreLockedCells"], "locked"),
    **dict.fromkeys(["GuardedExecute"], "execute"),
    **dict.fromkeys(["GuardSubmission", "FinalizeGrades", "SanitizeFeedback"], "preprocessors"),
    **dict.fromkeys(["NOTE_FIELDS", "read_scores"], "report"),
    **dict.fromkeys(["WorkerPool", "nbgrader_api"], "workers"),
    **dict.fromkeys(["SUBMITTED", "course_root", "feedback_all", "grade_all", "submitted_labs",
                     "unreadable_reason"], "batch"),
}
_SANDBOX = ("PACKAGE_DIR", "ROOT", "kernel_environment", "landlock_abi", "sandbox_command", "sandbox_note",
            "sandbox_paths", "sandbox_status")

__all__ = ["GENERIC_FAILURE", "AnswerRefused", "HiddenTestFailed", "Trips", "armed", "call", "check",
           "custom_comparisons", "freeze", "reaches_package", "run_hidden_tests", "snapshot_environment",
           *_LATER, *_SANDBOX]


def __getattr__(name: str):
    if name in _LATER:
        return getattr(importlib.import_module(f"{__name__}.{_LATER[name]}"), name)
    if name in _SANDBOX:
        return getattr(importlib.import_module("gpucourse.tooling.sandbox"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
