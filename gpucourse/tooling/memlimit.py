"""A clear message when a learner's kernel passes its server's memory limit.

A workshop server limits each process of a learner's server (RLIMIT_DATA, set by ``prlimit`` in
deploy/jupyterhub_config.py's ``Spawner.cmd``): an allocation past it fails with MemoryError in that
learner's kernel only, and the kernel, the learner's other work and the other learners keep running.
``install()`` runs in every kernel (IPython's ``exec_lines``) and turns that MemoryError into one line
that says what happened and what to do. Standard library only: it costs the kernel nothing to load.
"""

from __future__ import annotations

import resource

MESSAGE = ("MemoryError: this cell asked for more memory than your server may use ({limit}). Nothing else "
           "was affected: your kernel is still running and your notebook is saved. Use smaller sizes, or free "
           "memory (`del` a large array, or Kernel → Restart) and run the cell again.")


def limit_bytes() -> int | None:
    soft, _ = resource.getrlimit(resource.RLIMIT_DATA)
    return None if soft == resource.RLIM_INFINITY else soft


def message(limit: int | None = None) -> str:
    limit = limit_bytes() if limit is None else limit
    text = f"{limit / 2**30:.1f} GiB per process" if limit else "the machine's memory"
    return MESSAGE.format(limit=text)


def install(shell=None) -> None:
    """Show ``message()`` as the traceback when a cell raises MemoryError (the cell still fails)."""
    if shell is None:
        from IPython import get_ipython

        shell = get_ipython()
    if shell is None:
        return

    def handler(self, etype, value, tb, tb_offset=None):
        # still an error (an "error" output, the cell fails, nbgrader counts it as failed), with one line as its
        # traceback instead of the stack
        self._showtraceback(etype, value, [message()])
        return None

    shell.set_custom_exc((MemoryError,), handler)
