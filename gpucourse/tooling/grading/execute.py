"""``GuardedExecute``: nbgrader's Execute, hardened. The kernel runs in a sandbox (``tooling/sandbox.py``)
with a private home (holding the grader's header: ``header.py``) and a scrubbed environment; a cell over its
time limit is interrupted and, if it does not stop, the kernel is killed; a kernel that dies is a note, not
a grader failure; output is capped. Imported only by the grader (it needs nbgrader)."""

from __future__ import annotations

import ast
import asyncio
import contextlib
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from queue import Empty

from jupyter_client.kernelspec import KernelSpec
from jupyter_core.utils import ensure_async, run_sync
from nbclient.exceptions import DeadKernelError
from nbgrader.preprocessors import Execute
from traitlets import Bool, Enum, Integer, List, Unicode

from gpucourse.tooling.grading.forkkernel import ForkingKernelManager, preload_modules, private_folder
from gpucourse.tooling.grading.header import header_note, write_header
from gpucourse.tooling.grading.hidden import INTEGRITY
from gpucourse.tooling.grading.hooks import READY, RESTORE_EXPRESSION, hostile
from gpucourse.tooling.grading.notes import NOTE_KEY, add_note, is_grade, is_locked
from gpucourse.tooling.headless import KERNEL_START_S
from gpucourse.tooling.sandbox import kernel_environment, sandbox_command, sandbox_note, sandbox_paths


class GuardedExecute(Execute):
    """nbgrader's Execute, hardened: sandboxed kernel, time limits that always end, a dead
    kernel recorded as a note, output capped."""

    notebook_timeout = Integer(600, help="seconds for the whole notebook; later cells are not run").tag(
        config=True)
    interrupt_grace = Integer(10, help="seconds an interrupted cell may take to stop before the kernel "
                                       "is killed").tag(config=True)
    max_output_chars = Integer(100_000, help="characters of output kept per cell").tag(config=True)
    stop_output_chars = Integer(20_000_000, help="characters of output after which a cell is "
                                                 "interrupted").tag(config=True)
    sandbox = Enum(["auto", "required", "off"], "auto", help="Landlock sandbox for the kernel").tag(
        config=True)
    extra_read_paths = List(Unicode(), help="more folders the kernel may read").tag(config=True)
    startup_timeout = Integer(KERNEL_START_S, help="seconds a new kernel may take to answer (a loaded "
                                                   "machine grading many submissions)").tag(config=True)
    kernel_log = Unicode("", help="a file that collects the kernels' own stdout/stderr (debugging)").tag(
        config=True)

    fork_kernels = Bool(True, help="start each kernel as a fork of a process that imported the lab's libraries "
                                   "(Linux, simulator mode; forkkernel.py): the same kernel, about 2 s sooner").tag(
        config=True)

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("kernel_manager_class", ForkingKernelManager)  # forkkernel.py (nbgrader's: the async one)
        super().__init__(*args, **kwargs)

    def preprocess(self, nb, resources=None, km=None):
        self._stopped, self._kernel_checked, self._kernel_notes = None, False, []
        self._started = time.monotonic()
        # one path for every notebook of this process: equal kernel environments, so forks of one template
        self._private, self._fixed = private_folder()
        self._notebook_dir = (resources or {}).get("metadata", {}).get("path") or os.getcwd()
        self._trusted = nb.metadata.get(NOTE_KEY, {}).get("trusted_imports", [])
        write_header(self._private, self._trusted)
        try:
            nb, resources = super().preprocess(nb, resources, km)
            # e.g. the batch reports the Landlock ABI, but this kernel ran without it
            nb.metadata.setdefault(NOTE_KEY, {}).setdefault("notes", []).extend(self._kernel_notes)
            return nb, resources
        finally:
            shutil.rmtree(self._private, ignore_errors=True)

    # -- kernel launch: sandbox, private home, scrubbed environment, ipc transport -------
    def create_kernel_manager(self):
        km = super().create_kernel_manager()
        spec = km.kernel_spec
        argv = [sys.executable if a in ("python", "python3", f"python3.{sys.version_info[1]}") else a
                for a in spec.argv]
        if self.sandbox != "off":
            argv = sandbox_command(argv, self._sandbox_spec())
        km._kernel_spec = KernelSpec(argv=argv, display_name=spec.display_name, language=spec.language,
                                     env={}, metadata=spec.metadata, interrupt_mode=spec.interrupt_mode)
        km.transport = "ipc"
        km.ip = str(self._private / "kernel")
        if isinstance(km, ForkingKernelManager) and self.fork_kernels and self._fixed:
            km.fork_preload, km.fork_log = preload_modules(self._trusted), self.kernel_log
        return km

    def _sandbox_spec(self) -> dict:
        spec = sandbox_paths(self._notebook_dir, self._private, extra_read=list(self.extra_read_paths),
                             protected=[self._course_root()], mode=self.sandbox)
        return {**spec, "status_file": str(self._private / "sandbox.json")}

    def _course_root(self) -> str:
        # autograded/<student>/<lab>/ → the course root is three levels up
        folder = Path(self._notebook_dir).resolve()
        return str(folder.parents[2] if len(folder.parents) > 3 else folder.parent)

    async def async_start_new_kernel(self, **kwargs):
        kwargs.setdefault("env", kernel_environment(self._private))
        log = open(self.kernel_log, "a") if self.kernel_log else subprocess.DEVNULL  # noqa: SIM115
        kwargs.setdefault("stdout", log)
        kwargs.setdefault("stderr", log)
        try:
            await super().async_start_new_kernel(**kwargs)
        finally:
            if log is not subprocess.DEVNULL:
                log.close()

    start_new_kernel = run_sync(async_start_new_kernel)  # nbclient binds the sync one to its own

    # -- time limits ------------------------------------------------------------------
    def _get_timeout(self, cell):
        timeout = super()._get_timeout(cell)
        left = self.notebook_timeout - (time.monotonic() - self._started)
        if timeout is None:
            return max(1, int(left))
        return max(1, int(min(timeout, left)))

    async def _async_handle_timeout(self, timeout, cell=None):
        self.log.warning("cell over its time limit (%s s): interrupting", timeout)
        with contextlib.suppress(Exception):
            await ensure_async(self.km.interrupt_kernel())
        stopped = False
        deadline = time.monotonic() + self.interrupt_grace
        while (left := deadline - time.monotonic()) > 0:
            try:
                msg = await ensure_async(self.kc.shell_channel.get_msg(timeout=left))
            except Empty:
                break
            if msg.get("msg_type") == "execute_reply":
                stopped = True
                break
        evalue = f"this cell ran longer than its {timeout} s limit (an endless loop?) and was stopped"
        if not stopped:
            evalue = (f"this cell ran longer than its {timeout} s limit and did not stop when "
                      "interrupted (a loop inside a compiled function or GPU kernel?); grading of this "
                      "notebook ended here, so this cell and the cells after it score 0")
            self._stopped = "the time limit of an earlier cell"
            self.iopub_timeout = 1  # no more output will come from a killed kernel
            with contextlib.suppress(Exception):
                await ensure_async(self.km.shutdown_kernel(now=True))
        if cell is not None:
            cell.metadata.setdefault(NOTE_KEY, {}).setdefault("notes", []).append(
                f"TimeLimitExceeded: {evalue}")
        return {"content": {"status": "error", "ename": "TimeLimitExceeded", "evalue": evalue,
                            "traceback": [f"TimeLimitExceeded: {evalue}"]}}

    # -- cells: stop after a dead kernel, cap output ----------------------------------------
    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type != "code" or not cell.source.strip():
            return cell, resources
        if not self._kernel_checked:  # the kernel is up, no learner code ran yet: read its start
            self._kernel_checked = True
            notes = [header_note(self._private)]
            if self.sandbox != "off":
                notes.append(sandbox_note(self._private / "sandbox.json"))
            self._kernel_notes = [note for note in notes if note]
        if self._stopped is None and time.monotonic() - self._started > self.notebook_timeout:
            self._stopped = f"the notebook's {self.notebook_timeout} s time limit"
        if self._stopped is not None:
            cell.outputs = []
            add_note(cell, "NotRun", f"not run because of {self._stopped}; it scores 0")
            return cell, resources
        self._cell_chars, self._dropped_chars, self._interrupted = 0, 0, False
        integrity = None
        try:
            if is_grade(cell) and is_locked(cell):
                integrity = self._restore_before_test_cell(cell)
            cell, resources = super().preprocess_cell(cell, resources, index)
            if is_grade(cell) and is_locked(cell) and not integrity and self._stopped is None:
                integrity = self._restore_before_test_cell(cell, after=True)
        except DeadKernelError:
            self._stopped = "an earlier cell that stopped the kernel"
            add_note(cell, "KernelDied", "the Python process running this notebook stopped while "
                                          "this cell ran (os._exit, a crash, a segmentation fault or "
                                          "running out of memory); this cell and the cells after it "
                                          "score 0")
        if integrity:  # read by FinalizeGrades: every graded cell of the notebook scores 0
            from nbformat.notebooknode import NotebookNode

            cell.outputs.append(NotebookNode(output_type="error", ename=INTEGRITY, evalue=integrity,
                                             traceback=[f"{INTEGRITY}: {integrity}"]))
        if self._dropped_chars:
            from nbformat.notebooknode import NotebookNode

            text = (f"\n[grader: {self._dropped_chars:,} more characters of output were dropped; "
                    f"the limit is {self.max_output_chars:,} per cell]\n")
            cell.outputs.append(NotebookNode(output_type="stream", name="stdout", text=text))
            add_note(cell, "OutputLimit", f"{self._dropped_chars:,} characters of output were dropped",
                      as_error=False)
        return cell, resources

    def _restore_before_test_cell(self, cell, *, after: bool = False) -> str | None:
        """Before a graded cell: the kernel puts back the snapshot and IPython's hooks (``hooks.py``),
        asked outside any cell: an empty execute request, whose user expression IPython evaluates past
        every transformer and event callback. None when it did; else why the notebook counts as tampered
        with (no ``READY`` in the reply, or the course's own code had changed). ``after``: the same,
        right after the graded cell, where a transformer, a method replaced on the shell or a
        ``pre_run_cell`` callback found again means learner code put one back meanwhile (a thread, an
        asyncio task, the cell's own calls): tampering too."""
        msg_id = self.kc.execute("", silent=True, store_history=False,
                                 user_expressions={"gpucourse": RESTORE_EXPRESSION})
        reply = run_sync(self.async_wait_for_reply)(msg_id, cell)
        result = ((reply or {}).get("content", {}).get("user_expressions") or {}).get("gpucourse") or {}
        text = str(result.get("data", {}).get("text/plain", "")) if result.get("status") == "ok" else ""
        with contextlib.suppress(ValueError, SyntaxError):
            text = str(ast.literal_eval(text))
        if not text.startswith(READY):
            return ("the kernel did not put back IPython's hooks around this graded cell (its reply was "
                    f"{text[:80]!r}): something replaced how the kernel answers")
        hooks, _, course = text[len(READY):].partition(" | course: ")
        hooks = [item for item in hooks.strip().removeprefix("hooks: ").split(", ") if item]
        if course:
            return f"the course's own code was changed: {course}"
        if after and hostile(hooks):
            return ("IPython hooks were installed again while this graded cell ran or the kernel waited "
                    f"({', '.join(hostile(hooks)[:3])})")
        if hooks and not after:
            add_note(cell, "HooksRestored", "before this cell the grader put back IPython hooks that the "
                     f"notebook had changed ({', '.join(hooks[:4])[:200]})", as_error=False)
        return None

    def output(self, outs, msg, display_id, cell_index):
        content = msg.get("content", {})
        size = len(content.get("text", "")) + sum(len(str(v)) for v in content.get("data", {}).values())
        size += sum(len(line) for line in content.get("traceback", []))
        room = self.max_output_chars - self._cell_chars
        self._cell_chars += size
        if size <= room or msg["msg_type"] == "error":
            return super().output(outs, msg, display_id, cell_index)
        self._dropped_chars += size - max(room, 0)
        if msg["msg_type"] == "stream" and room > 0:
            msg = {**msg, "content": {**content, "text": content["text"][:room]}}
            super().output(outs, msg, display_id, cell_index)
        if self._cell_chars > self.stop_output_chars and not self._interrupted:
            self._interrupted = True
            asyncio.ensure_future(ensure_async(self.km.interrupt_kernel()))
        return None
