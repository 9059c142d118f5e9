# nbgrader course configuration: nbgrader's "source" is solutions/, its "release" is labs/.
# Run nbgrader from the repository root (or use `make labs`, `make grade`, `make feedback`).
import os

c = get_config()  # noqa: F821  (provided by nbgrader)

c.CourseDirectory.root = os.path.dirname(os.path.abspath(__file__))
c.CourseDirectory.course_id = "gpucourse"
c.CourseDirectory.source_directory = "solutions"
c.CourseDirectory.release_directory = "labs"
c.CourseDirectory.submitted_directory = "submitted"
c.CourseDirectory.autograded_directory = "autograded"
c.CourseDirectory.feedback_directory = "feedback"
# solutions/<lab>/<lab>.py is the text source of the notebook (with solutions): never release it.
c.CourseDirectory.ignore = [".ipynb_checkpoints", "*.pyc", "__pycache__", "feedback", "*.py"]

c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}
c.ClearSolutions.text_stub = "YOUR ANSWER HERE"
# Student notebooks run kernels that compile on first use (Numba JIT): give each cell room.
c.Execute.timeout = 120
# A loop inside a jitted function cannot be interrupted: time the cell out and score 0 instead
# of failing the whole autograde for that student.
c.Execute.raise_on_iopub_timeout = False
c.Execute.interrupt_on_timeout = True
