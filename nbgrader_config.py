# nbgrader course configuration: nbgrader's "source" is solutions/, its "release" is labs/.
# Run nbgrader from the repository root (or use `make labs`, `make grade`, `make feedback`).
# The hardened grading pieces (sandboxed kernel, time limits that always end, hidden tests that
# never reach feedback) live in gpucourse/tooling/grading/; instructor/README.md explains them.
import importlib.util
import os

c = get_config()  # noqa: F821  (provided by nbgrader)

c.CourseDirectory.root = os.path.dirname(os.path.abspath(__file__))
c.CourseDirectory.course_id = "gpucourse"
c.CourseDirectory.source_directory = "solutions"
c.CourseDirectory.release_directory = "labs"
c.CourseDirectory.submitted_directory = "submitted"
c.CourseDirectory.autograded_directory = "autograded"
c.CourseDirectory.feedback_directory = "feedback"
# solutions/<lab>/<lab>.py is the text source of the notebook (with solutions): never release it,
# and never copy it next to a submission while grading.
c.CourseDirectory.ignore = [".ipynb_checkpoints", "*.pyc", "__pycache__", "feedback", "*.py"]

c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}
c.ClearSolutions.text_stub = "YOUR ANSWER HERE"


def _header_notebook() -> str:
    """instructor/header.ipynb (prepended to every released lab), found next to this file or,
    for a scratch copy of this configuration, next to the installed gpucourse package."""
    folders = [c.CourseDirectory.root]
    spec = importlib.util.find_spec("gpucourse")
    if spec and spec.origin:
        folders.append(os.path.dirname(os.path.dirname(spec.origin)))
    for folder in folders:
        path = os.path.join(folder, "instructor", "header.ipynb")
        if os.path.exists(path):
            return path
    return ""


c.IncludeHeaderFooter.header = _header_notebook()

# --- Time limits --------------------------------------------------------------------------------
# Per cell. First-use compilation counts against it: measured on the development machine (no GPU),
# importing the course and Numba takes 3-10 s under load, a Numba @njit compile 0.3-1 s, a CUDA
# kernel compiled to PTX 0.3-2 s; on a GPU add CUDA context creation (1-3 s) and cold NVRTC/cuBLAS
# start-up (several seconds). 120 s leaves ~10x headroom over the slowest lab cell measured.
c.Execute.timeout = 120
# A loop inside a jitted function cannot be interrupted: don't fail the student's whole
# autograde for it (GuardedExecute then kills the kernel and the remaining cells score 0).
c.Execute.raise_on_iopub_timeout = False
c.Execute.interrupt_on_timeout = True
c.Execute.shutdown_kernel = "immediate"  # the graded kernel's state is not needed afterwards
c.GuardedExecute.notebook_timeout = 600  # the whole notebook; later cells are "not run"
c.GuardedExecute.interrupt_grace = 10  # an interrupted cell that is still running then is killed
c.GuardedExecute.max_output_chars = 100_000  # output kept per cell (megabytes of prints are cut)
c.GuardedExecute.sandbox = "auto"  # Landlock where the OS has it; "required" refuses to grade without

# --- Locked cells -------------------------------------------------------------------------------
# Edited locked cells are restored from the gradebook (nbgrader's OverwriteCells does that); deleted
# locked cells (tests, the setup, `show` cells) are put back in their places by RestoreLockedCells, so
# deleting a test never removes its points from the maximum. nbgrader's own add_missing_cells stays off:
# it fails the submission (and `make grade`) when the cell before a deleted test is not a graded or
# answer cell, as in lab 00a and lab 04a.
c.OverwriteCells.add_missing_cells = False

# --- The pipelines ------------------------------------------------------------------------------
c.Autograde.sanitize_preprocessors = [
    "nbgrader.preprocessors.ClearOutput",
    "nbgrader.preprocessors.DeduplicateIds",
    "nbgrader.preprocessors.OverwriteKernelspec",
    "gpucourse.tooling.grading.RestoreLockedCells",  # deleted locked cells put back, in their places
    "nbgrader.preprocessors.OverwriteCells",
    "nbgrader.preprocessors.CheckCellMetadata",
    "gpucourse.tooling.grading.GuardSubmission",  # tamper scan, hidden tests wrapped, skip tags dropped
]
c.Autograde.autograde_preprocessors = [
    "gpucourse.tooling.grading.GuardedExecute",  # sandboxed kernel, limits that always end
    "nbgrader.preprocessors.IgnorePattern",
    "gpucourse.tooling.grading.FinalizeGrades",  # never ran / tampered: 0; no partial credit
    "nbgrader.preprocessors.LimitOutput",
    "nbgrader.preprocessors.SaveAutoGrades",
    "nbgrader.preprocessors.AssignLatePenalties",
    "nbgrader.preprocessors.CheckCellMetadata",
]
# Stock feedback shows hidden tests' source and the lines their tracebacks print: this one
# shows code, scores and one-line verdicts only.
c.GenerateFeedback.preprocessors = [
    "nbgrader.preprocessors.GetGrades",
    "nbconvert.preprocessors.CSSHTMLHeaderPreprocessor",
    "gpucourse.tooling.grading.SanitizeFeedback",
]
