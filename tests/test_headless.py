"""gpucourse.tooling.headless: the website's, the lesson tests' and notebook_size's kernels start over IPC
(no TCP port to lose to another kernel), and a kernel that does not start is started once more; one that
started and then failed is the notebook's error, never retried (CI stop 55: "Kernel didn't respond in 60
seconds" before the website's first cell)."""

import nbformat
import pytest
from labtools import learner_env
from nbclient.exceptions import DeadKernelError

from gpucourse.tooling import headless


def notebook(*sources: str) -> nbformat.NotebookNode:
    return nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in sources])


def text(cell) -> str:
    return "".join(o.get("text", "") for o in cell.outputs)


def count_starts(monkeypatch, fail_first: int) -> list[int]:
    """Make the first `fail_first` kernels not answer, as a lost port race does; count every start."""
    starts = []
    real = headless._PrivateKernelClient.async_start_new_kernel_client

    async def start(self):
        starts.append(1)
        if len(starts) <= fail_first:
            await self._async_cleanup_kernel()
            raise RuntimeError("Kernel didn't respond in 180 seconds")
        return await real(self)

    monkeypatch.setattr(headless._PrivateKernelClient, "async_start_new_kernel_client", start)
    return starts


def test_the_kernel_talks_over_ipc_in_the_given_folder(tmp_path):
    nb = notebook("from ipykernel.kernelapp import IPKernelApp\nimport os\n"
                  "print(IPKernelApp.instance().transport, os.getcwd())")
    headless.execute(nb, tmp_path, env=learner_env(), cell_timeout_s=60, store_widget_state=False)
    assert text(nb.cells[0]).split() == ["ipc", str(tmp_path)]


def test_a_kernel_that_does_not_start_is_started_once_more(tmp_path, monkeypatch, capsys):
    starts = count_starts(monkeypatch, fail_first=1)
    nb = notebook("print(6 * 7)")
    assert headless.execute(nb, tmp_path, env=learner_env(), cell_timeout_s=60, store_widget_state=False) is nb
    assert len(starts) == 2
    assert text(nb.cells[0]) == "42\n"
    assert "the kernel did not start (Kernel didn't respond in 180 seconds); starting a fresh one" in \
        capsys.readouterr().err


def test_a_kernel_that_never_starts_is_an_error_after_two_tries(tmp_path, monkeypatch):
    starts = count_starts(monkeypatch, fail_first=2)
    with pytest.raises(RuntimeError, match="didn't respond"):
        headless.execute(notebook("1"), tmp_path, env=learner_env(), cell_timeout_s=60, store_widget_state=False)
    assert len(starts) == headless.START_ATTEMPTS == 2


def test_a_kernel_that_dies_in_a_cell_is_not_retried(tmp_path, monkeypatch):
    starts = count_starts(monkeypatch, fail_first=0)
    nb = notebook("print('ran')", "import os; os._exit(1)")
    with pytest.raises(DeadKernelError):
        headless.execute(nb, tmp_path, env=learner_env(), cell_timeout_s=60, store_widget_state=False)
    assert len(starts) == 1
    assert text(nb.cells[0]) == "ran\n"


def test_the_graders_kernels_get_as_long_to_answer():
    from gpucourse.tooling.grading.execute import GuardedExecute

    assert GuardedExecute().startup_timeout == headless.KERNEL_START_S > 60  # nbclient's default is 60 s
