"""One way to execute a notebook headless, in a fresh kernel that starts even on a busy machine.

jupyter_client gives a kernel five TCP ports it found free a moment earlier; with many kernels starting
at once (the suite on two workers, JupyterLab in the browser test, the website's two lesson kernels) a
port can be taken in between, and a 2-core machine under that load can take long to answer. CI stop 55
failed that way: "Kernel didn't respond in 60 seconds" before the website's first cell. So the kernel
here talks over IPC files in a private folder (no ports, as the grader's kernels do), is given
KERNEL_START_S to answer, and one that still does not start is started once more, with a line that
says so. A kernel that started and then failed is never retried: that is the notebook's error.
"""

from __future__ import annotations

import copy
import sys
import tempfile
from pathlib import Path

import nbformat
from nbclient import NotebookClient

KERNEL_START_S = 180
START_ATTEMPTS = 2


class _PrivateKernelClient(NotebookClient):
    """nbclient's client with its kernel on IPC files under `ipc_dir`; remembers whether it answered."""

    def __init__(self, nb, ipc_dir: str, **kwargs):
        super().__init__(nb, **kwargs)
        self._ipc_dir = ipc_dir
        self.kernel_answered = False

    def create_kernel_manager(self):
        km = super().create_kernel_manager()
        km.transport = "ipc"
        km.ip = str(Path(self._ipc_dir) / "kernel")
        return km

    async def async_start_new_kernel_client(self):
        kc = await super().async_start_new_kernel_client()
        self.kernel_answered = True
        return kc


def execute(nb: nbformat.NotebookNode, cwd: Path, *, env: dict, cell_timeout_s: int,
            store_widget_state: bool, allow_errors: bool = False, **start_kwargs) -> nbformat.NotebookNode:
    """Execute `nb` in place in a new python3 kernel whose working directory is `cwd`; return it."""
    unexecuted, attempt = copy.deepcopy(nb.cells), 1
    while True:
        with tempfile.TemporaryDirectory(prefix="gpucourse-kernel-") as ipc_dir:
            client = _PrivateKernelClient(
                nb, ipc_dir, timeout=cell_timeout_s, startup_timeout=KERNEL_START_S, kernel_name="python3",
                allow_errors=allow_errors, store_widget_state=store_widget_state,
                resources={"metadata": {"path": str(cwd)}})
            try:
                client.execute(env=env, **start_kwargs)
                return nb
            except RuntimeError as error:
                if client.kernel_answered or attempt == START_ATTEMPTS:
                    raise
                print(f"the kernel did not start ({error}); starting a fresh one", file=sys.stderr)
        nb.cells, attempt = copy.deepcopy(unexecuted), attempt + 1
