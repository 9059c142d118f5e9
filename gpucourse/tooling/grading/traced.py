"""A learner's kernel under the course's microscope, for hidden blocks: ``frozen.launch`` with every access seen.

``launch`` runs a learner's kernel on a fresh thread; a hidden block that also wants the microscope's view of
it (every access of every thread checked, or the profile's metrics) would otherwise call
``microscope.trace``/``profile`` on its own thread, where the kernel's Python (the microscope runs it as
Python, GPU or not) could walk up to the block's frame. ``trace_launch`` runs the microscope there instead,
under ``frozen.py``'s rules (fresh thread, no thread or hook left behind, the result frozen):

* ``trace_launch(kernel, grid, block, *args)`` → None; what the kernel wrote is in the grader's arrays. A
  thread that touches memory outside an array (the microscope raises IndexError) refuses the call: the
  hidden test fails with a message that says the kernel raised.
* ``trace_launch(..., metrics=[...])`` → ``{metric: value}``, the profile's values (ncu's names), plain.
* ``key="brighten"``: ``kernel`` is a learner's mapping of kernels; ``kernel[key]`` is read on that thread.

``run_hidden_tests`` binds it in every hidden block beside ``call`` and ``launch``.
"""

from __future__ import annotations

from gpucourse.tooling.grading.frozen import _not_forbidden, _on_a_thread

_NO_KEY = object()


def trace_launch(kernel, grid, block, *args, metrics=(), key=_NO_KEY):
    """The microscope's run of ``kernel[grid, block](*args)`` on a fresh thread (module docstring)."""
    metrics = [str(m) for m in metrics]  # the grader's own list, copied before any learner code runs
    _not_forbidden(kernel)

    def run():
        from gpucourse import microscope

        chosen = kernel if key is _NO_KEY else kernel[key]
        _not_forbidden(chosen)  # read on this thread: a learner's mapping may hand in the course's kernel
        if not metrics:
            microscope.trace(chosen, grid, block, *args)
            return None
        profile = microscope.profile(chosen, grid, block, *args)
        return {metric: profile.value(metric) for metric in metrics}

    return _on_a_thread(run, trace_launch)
