"""A workshop's faults on the course's real JupyterHub (shape 1, 127.0.0.1; gpucourse/tooling/hubrig.py), with
nothing lost: a learner's server killed mid-lesson, the hub restarted while learners work, a learner's
kernel past the server's memory limit, and forty simultaneous submissions graded by `make grade`.

Marked ``extra``: `make test-extra` runs them (CI does, after `make test`). Every wait polls the hub's or
the kernel's own answer up to a ceiling that only a broken system reaches; no sleep is a condition.
"""

from __future__ import annotations

import csv
import os
import secrets
import signal
import sys
import threading
import time
from pathlib import Path

import nbformat
import pytest

from gpucourse.tooling import hubrig, loadtest
from gpucourse.tooling.kernelclient import KernelClient

pytestmark = [pytest.mark.extra, pytest.mark.xdist_group("hub_faults")]

SKIP_REASON = hubrig.skip_reason()
MEMORY_LIMIT_BYTES = 3 * 2**30 // 2  # 1.5 GiB per process: lesson 00a's kernel needs ~0.2 GiB (VmData)
LESSON_PATH = f"gpucourse/notebooks/{loadtest.LESSON}.ipynb"


@pytest.fixture(scope="module")
def shop():
    if SKIP_REASON:
        pytest.skip(SKIP_REASON)
    suffix = secrets.token_hex(2)
    users = {"instructor": f"gfi{suffix}", "a": f"gfa{suffix}", "b": f"gfb{suffix}"}
    try:
        workshop = hubrig.Workshop(users, prefix="gpucourse-faults-").__enter__()
    except hubrig.Unavailable as why:
        pytest.skip(str(why))
    try:
        loadtest.prepare_course(workshop, users["instructor"], [users["a"], users["b"]])
        # as deployed: the servers outlive the hub; the hub polls a server's process every 2 s (deployed: 30 s)
        workshop.hub.write_config(workshop.shim, memory_limit_bytes=MEMORY_LIMIT_BYTES, cleanup_servers=False,
                                  extra="c.Spawner.poll_interval = 2\n")
        workshop.hub.start()
        workshop.hub.start_servers([users["a"], users["b"]])
        yield workshop
    finally:
        for name in (users["a"], users["b"]):  # the hub does not stop them itself (cleanup_servers=False)
            try:
                workshop.hub.api("DELETE", f"/hub/api/users/{name}/server", timeout=60)
            except Exception:  # noqa: BLE001 - the hub may be the thing that broke; leftovers are killed below
                pass
        for name in (users["a"], users["b"]):
            try:
                workshop.hub.wait(lambda name=name: not workshop.hub.server_model(name), 120,
                                  f"{name}'s server to stop")
            except AssertionError:
                pass
        workshop.__exit__(None, None, None)


def _ensure_running(shop, name: str) -> None:
    if not shop.hub.server_model(name).get("ready"):
        shop.hub.request_server(name)
        shop.hub.wait_ready(name)
    if name not in shop.hub.tokens:
        shop.hub.token_for(name)


def _kernel(shop, name: str, path: str = LESSON_PATH) -> tuple[str, KernelClient]:
    base = f"{shop.hub.url}/user/{name}"
    reply = shop.hub.api("POST", f"/user/{name}/api/sessions", token=shop.hub.tokens[name],
                         json={"path": path, "type": "notebook", "name": Path(path).name,
                               "kernel": {"name": "python3"}})
    assert reply.status_code == 201, reply.text
    kernel_id = reply.json()["kernel"]["id"]
    client = KernelClient(base, shop.hub.tokens[name], kernel_id)
    client.wait_ready()
    return kernel_id, client


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.skipif(SKIP_REASON is not None, reason=SKIP_REASON or "")
def test_a_killed_server_loses_no_saved_work_and_starts_again_from_the_hub_page(shop):
    name = shop.users["a"]
    _ensure_running(shop, name)
    token = shop.hub.tokens[name]
    notebook = shop.hub.api("GET", f"/user/{name}/api/contents/{LESSON_PATH}", token=token).json()["content"]
    _, client = _kernel(shop, name)
    try:
        code_cells = [c for c in notebook["cells"] if c["cell_type"] == "code"]
        for cell in code_cells[:3]:  # the learner is some way into the lesson, and JupyterLab saves
            reply, cell["outputs"] = client.execute(cell["source"])
            assert reply["status"] == "ok", reply
            cell["execution_count"] = reply["execution_count"]
        saved = shop.hub.api("PUT", f"/user/{name}/api/contents/{LESSON_PATH}", token=token,
                             json={"type": "notebook", "content": notebook})
        assert saved.status_code == 200, saved.text
        client.send("shell", "execute_request", {"code": "import time; time.sleep(600)", "silent": False,
                                                 "store_history": True, "user_expressions": {}, "allow_stdin": False})
        pid = shop.hub.server_pid(name)
        assert pid and _alive(pid)
        os.kill(pid, signal.SIGKILL)  # what the kernel's OOM killer does to the biggest process
    finally:
        client.close()
    # the hub sees it (its own poll of the process), and the learner's hub page offers to start it again
    shop.hub.wait(lambda: not shop.hub.server_model(name), 60, "the hub to notice the killed server")
    browser = shop.hub.login(name)
    home = browser.get(shop.hub.url + "/hub/home", timeout=60)
    assert home.ok and f"/hub/spawn/{name}" in home.text, home.text[-2000:]
    shop.hub.spawn_from_hub_page(browser, name)
    shop.hub.wait_ready(name)
    new_pid = shop.hub.server_pid(name)
    assert new_pid and new_pid != pid and _alive(new_pid)
    on_disk = nbformat.read(shop.home(name) / LESSON_PATH, as_version=4)
    nbformat.validate(on_disk)
    again = shop.hub.api("GET", f"/user/{name}/api/contents/{LESSON_PATH}", token=token).json()["content"]
    assert [c["source"] for c in again["cells"]] == [c["source"] for c in notebook["cells"]]
    assert [c.get("outputs") for c in again["cells"][:8]] == [c.get("outputs") for c in notebook["cells"][:8]]
    assert any(c.get("outputs") for c in on_disk.cells), "the outputs saved before the kill are in the file"


@pytest.mark.skipif(SKIP_REASON is not None, reason=SKIP_REASON or "")
def test_a_hub_restart_keeps_the_learners_servers_and_kernels(shop):
    names = [shop.users["a"], shop.users["b"]]
    for name in names:
        _ensure_running(shop, name)
    kernels, pids = {}, {}
    for name in names:
        kernel_id, client = _kernel(shop, name)
        reply, _ = client.execute(f"learner_state = {len(name)} * 1000 + 7")
        assert reply["status"] == "ok", reply
        kernels[name], pids[name] = (kernel_id, client), shop.hub.server_pid(name)
    shop.hub.stop()  # SIGTERM, as `systemctl restart jupyterhub` does; the proxy goes with it
    assert shop.hub.process.poll() is not None
    for name in names:
        assert _alive(pids[name]), f"{name}'s server stopped with the hub"
    for _, client in kernels.values():
        client.close()
    shop.hub.start()
    for name in names:
        shop.hub.wait_ready(name)
        assert shop.hub.server_pid(name) == pids[name], "the hub took over the running server, not a new one"
        kernel_id, _ = kernels[name]
        client = KernelClient(f"{shop.hub.url}/user/{name}", shop.hub.tokens[name], kernel_id)  # reconnect
        try:
            client.wait_ready()
            reply, outputs = client.execute("print(learner_state)")
            assert reply["status"] == "ok", reply
            assert outputs[0]["text"].strip() == str(len(name) * 1000 + 7), outputs
        finally:
            client.close()


@pytest.mark.skipif(SKIP_REASON is not None, reason=SKIP_REASON or "")
def test_a_kernel_past_the_memory_limit_gets_a_clear_message_and_the_others_keep_working(shop):
    hog, other = shop.users["a"], shop.users["b"]
    for name in (hog, other):
        _ensure_running(shop, name)
    _, hog_client = _kernel(shop, hog)
    _, other_client = _kernel(shop, other)
    results = {}

    def other_learner():  # at the same moment, the other learner's own work
        results["other"] = other_client.execute("import numpy as np\nprint(int(np.arange(10**6).sum()))")

    try:
        thread = threading.Thread(target=other_learner)
        thread.start()
        reply, outputs = hog_client.execute(f"big = bytearray({2 * MEMORY_LIMIT_BYTES})")
        thread.join(timeout=300)
        assert reply["status"] == "error" and reply["ename"] == "MemoryError", reply
        errors = [o for o in outputs if o["output_type"] == "error"]  # still a failed cell (nbgrader sees it)
        assert len(errors) == 1 and errors[0]["ename"] == "MemoryError", outputs
        text = "".join(errors[0]["traceback"])
        assert "more memory than your server may use (1.5 GiB per process)" in text, outputs
        assert "Traceback" not in text and "bytearray" not in text, text
        other_reply, other_outputs = results["other"]
        assert other_reply["status"] == "ok" and other_outputs[0]["text"].strip() == str(sum(range(10**6)))
        reply, outputs = hog_client.execute("small = bytearray(10**6); print(len(small))")  # still the same kernel
        assert reply["status"] == "ok" and outputs[0]["text"].strip() == "1000000", outputs
    finally:
        hog_client.close()
        other_client.close()


SUBMISSIONS = 40


def _submit_all_at_once(learners: list[str], shop, timeout_s: float = 300) -> dict[str, str]:
    """`nbgrader submit LAB --course COURSE` as each learner (its uid, its home, its nbgrader_config.py), all
    forty started in the same instant. nbgrader's own SubmitApp, imported once here and forked, one process per
    learner: forty separate interpreters would spend ~5 CPU-s each on imports before submitting (200 CPU-s
    on two cores), which measures Python's start-up, not the exchange. Returns {learner: why} for failures."""
    import pwd

    from nbgrader.apps.submitapp import SubmitApp

    children = {}
    for name in learners:
        account = pwd.getpwnam(name)
        pid = os.fork()
        if pid == 0:  # the learner's process: never returns into pytest
            code = 1
            try:
                os.setgroups([])
                os.setgid(account.pw_gid)
                os.setuid(account.pw_uid)
                os.environ.update(HOME=account.pw_dir, USER=name)
                os.chdir(account.pw_dir)
                log = os.open(os.path.join(account.pw_dir, "submit.log"), os.O_WRONLY | os.O_CREAT, 0o644)
                os.dup2(log, 1)
                os.dup2(log, 2)
                SubmitApp.launch_instance([loadtest.LAB, "--course", loadtest.COURSE])
                code = 0
            except SystemExit as done:
                code = done.code if isinstance(done.code, int) else 1
            except BaseException:  # noqa: BLE001 - reported through submit.log and the exit code
                import traceback

                traceback.print_exc()
            finally:
                os._exit(code)
        children[pid] = name
    deadline = time.monotonic() + timeout_s
    failed = {}
    while children and time.monotonic() < deadline:  # only our own children: the hub is a child too
        for pid in list(children):
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                name = children.pop(pid)
                if os.waitstatus_to_exitcode(status) != 0:
                    failed[name] = (shop.home(name) / "submit.log").read_text()[-500:]
        time.sleep(0.2)
    for pid, name in children.items():
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        failed[name] = "still submitting after the deadline"
    return failed


@pytest.mark.skipif(SKIP_REASON is not None, reason=SKIP_REASON or "")
def test_forty_simultaneous_submissions_are_all_graded():
    """Forty learners run `nbgrader submit` (what the Assignments tab runs) at the same moment into the shared
    exchange; the instructor collects and runs `make grade`'s command: forty rows in the gradebook, each
    solution 10/10 and each untouched lab 0."""
    from nbgrader.api import Gradebook

    from gpucourse.tooling.build import ROOT, to_notebook

    suffix = secrets.token_hex(2)
    learners = [f"gs{suffix}{i:02d}" for i in range(SUBMISSIONS)]
    users = {"instructor": f"gsi{suffix}", **{name: name for name in learners}}
    try:
        shop = hubrig.Workshop(users, prefix="gpucourse-submit-").__enter__()
    except hubrig.Unavailable as why:
        pytest.skip(str(why))
    try:
        instructor = users["instructor"]
        course = loadtest.prepare_course(shop, instructor, [])
        loadtest.instructor_nbgrader(shop, instructor, course, "generate_assignment", loadtest.LAB, "--force")
        loadtest.instructor_nbgrader(shop, instructor, course, "release_assignment", loadtest.LAB, "--force")
        released = course / "release" / loadtest.LAB / f"{loadtest.LAB}.ipynb"
        if not released.exists():
            released = course / "labs" / loadtest.LAB / f"{loadtest.LAB}.ipynb"
        solution = to_notebook(ROOT / "solutions" / loadtest.LAB / f"{loadtest.LAB}.py")
        env = {"PATH": f"{shop.shim / 'bin'}:/usr/bin:/bin", "LANG": "C.UTF-8",
               "JUPYTER_PATH": str(Path(sys.prefix) / "share" / "jupyter")}
        for i, name in enumerate(learners):  # each learner has fetched the lab; half of them answered it
            home = shop.home(name)
            (home / "nbgrader_config.py").write_text(
                f"c = get_config()  # noqa\nc.CourseDirectory.course_id = {loadtest.COURSE!r}\n"
                f"c.Exchange.root = {str(shop.exchange)!r}\n")
            lab = nbformat.read(released, as_version=4)
            if i % 2 == 0:
                answers = {c.metadata["nbgrader"]["grade_id"]: c.source for c in solution.cells
                           if c.metadata.get("nbgrader", {}).get("solution")}
                for cell in lab.cells:
                    grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
                    if grade_id in answers:
                        cell.source = answers[grade_id]
            (home / loadtest.LAB).mkdir()
            nbformat.write(lab, home / loadtest.LAB / f"{loadtest.LAB}.ipynb")
            shop.chown_home(name)
        failed = _submit_all_at_once(learners, shop)
        assert not failed, failed
        inbound = list((shop.exchange / loadtest.COURSE / "inbound").iterdir())
        assert len(inbound) == SUBMISSIONS, len(inbound)

        loadtest.instructor_nbgrader(shop, instructor, course, "collect", loadtest.LAB)
        started = time.monotonic()
        graded = hubrig.run_as(instructor, [str(shop.shim / "bin" / "python"), "-m", "gpucourse", "grade",
                                            "--jobs", "2"], course, env, timeout=900)  # what `make grade` runs
        assert graded.returncode == 0, graded.stdout[-2000:] + graded.stderr[-2000:]
        print(f"make grade: {SUBMISSIONS} submissions in {time.monotonic() - started:.0f} s")
        with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
            scores = {s.student.id: s.score for s in gradebook.assignment_submissions(loadtest.LAB)}
        assert sorted(scores) == sorted(learners)
        with open(course / "grades.csv") as handle:
            rows = {row["student"]: row for row in csv.DictReader(handle)}
        assert sorted(rows) == sorted(learners)
        for i, name in enumerate(learners):
            assert scores[name] == (10 if i % 2 == 0 else 0), (name, scores[name])
    finally:
        shop.__exit__(None, None, None)
