"""Errors a learner can read: one line that says what is allowed, never a wall of traceback.

IPython shows ``_render_traceback_()`` instead of the traceback when an exception has it, so
a bad slider value or a missing GPU prints one sentence in the notebook.
"""


class CourseError(Exception):
    """Base class: something the learner (or instructor) can fix, said in one line."""

    def _render_traceback_(self) -> list[str]:
        return [f"\x1b[31m{type(self).__name__}\x1b[0m: {self}"]


class InvalidConfig(CourseError, ValueError):
    """A launch configuration, size or option that is not allowed. Raised before any kernel runs."""


class NoGPU(CourseError, RuntimeError):
    """Something that needs a real GPU was asked for in simulator mode."""


class GPUError(CourseError, RuntimeError):
    """The GPU reported an error (illegal address, out of memory); said in plain words."""


class WrongResult(CourseError, AssertionError):
    """A kernel produced a wrong answer, so it was not timed."""
