"""A real multi-user JupyterHub on 127.0.0.1 running a workshop round: the instructor releases
lab 01, two learners fetch it, one submits the solution and one the untouched lab, the instructor
collects, autogrades and exports: 100 % and 0 %.

JupyterHub with its proxy from the npm registry (configurable-http-proxy), real local users
(created and removed here; needs root), DummyAuthenticator with a password, LocalProcessSpawner,
and nbgrader's exchange. Learners act through their own single-user servers (nbgrader's
Assignments API, the contents API); the instructor through the formgrader API of theirs, then
`nbgrader export` in a terminal. Everything is started and stopped by the test.
"""

from __future__ import annotations

import csv
import secrets
import shutil
import sys
import time
from pathlib import Path

import nbformat
import pytest

from gpucourse.tooling import hubrig
from gpucourse.tooling.build import ROOT, to_notebook

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("jupyterhub")]

LAB = "lab01_warps"
COURSE = "gpucourse"
# the hub, its users and its waits: gpucourse/tooling/hubrig.py (shared with `make loadtest` and the fault tests)
SKIP_REASON = hubrig.skip_reason()


def _solved(fetched: dict, solution: nbformat.NotebookNode) -> dict:
    """The fetched lab with every answer cell filled in from the solution, as a learner would."""
    answers = {c.metadata["nbgrader"]["grade_id"]: c.source for c in solution.cells
               if c.metadata.get("nbgrader", {}).get("solution")}
    for cell in fetched["cells"]:
        grade_id = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        if grade_id in answers:
            cell["source"] = answers[grade_id]
    return fetched


@pytest.mark.skipif(SKIP_REASON is not None, reason=SKIP_REASON or "")
def test_workshop_round_on_a_real_jupyterhub():
    started = time.monotonic()
    suffix = secrets.token_hex(3)
    users = {"instructor": f"gpci{suffix}", "learner_a": f"gpca{suffix}", "learner_b": f"gpcb{suffix}"}
    try:
        shop = hubrig.Workshop(users).__enter__()
    except hubrig.Unavailable as why:
        pytest.skip(str(why))
    hub = shop.hub
    try:
        shim, exchange = shop.shim, shop.exchange
        course = shop.home(users["instructor"])  # the instructor's home is the course directory
        config = (ROOT / "nbgrader_config.py").read_text()
        config += f"\nc.Exchange.root = {str(exchange)!r}\n"
        config += f"c.GuardedExecute.kernel_log = {str(course / 'kernels.log')!r}\n"
        (course / "nbgrader_config.py").write_text(config)
        (course / "solutions" / LAB).mkdir(parents=True)
        shutil.copy(ROOT / "solutions" / LAB / f"{LAB}.py", course / "solutions" / LAB)
        nbformat.write(to_notebook(ROOT / "solutions" / LAB / f"{LAB}.py"), course / "solutions" / LAB / f"{LAB}.ipynb")
        for role in ("learner_a", "learner_b"):
            (shop.home(users[role]) / "nbgrader_config.py").write_text(
                f"c = get_config()  # noqa\nc.CourseDirectory.course_id = {COURSE!r}\n"
                f"c.Exchange.root = {str(exchange)!r}\n")
        for name in users.values():
            shop.chown_home(name)
        hub.start(hub.write_config(shim))
        hub.start_servers()

        # the instructor generates and releases the lab (formgrader, in their browser)
        for action in ("assign", "release"):
            result = hub.user("instructor", "POST", f"/formgrader/api/assignment/{LAB}/{action}").json()
            assert result["success"], result

        # both learners fetch it; learner A answers every exercise, learner B submits it untouched
        for role in ("learner_a", "learner_b"):
            listed = hub.user(role, "POST", "/assignments/fetch",
                              params={"course_id": COURSE, "assignment_id": LAB}).json()
            assert listed["success"] and any(a["assignment_id"] == LAB and a["status"] == "fetched"
                                             for a in listed["value"]), listed
        path = f"/api/contents/{LAB}/{LAB}.ipynb"
        fetched = hub.user("learner_a", "GET", path).json()["content"]
        solution = to_notebook(ROOT / "solutions" / LAB / f"{LAB}.py")
        hub.user("learner_a", "PUT", path, json={"type": "notebook", "content": _solved(fetched, solution)})
        for role in ("learner_a", "learner_b"):
            result = hub.user(role, "POST", "/assignments/submit",
                              params={"course_id": COURSE, "assignment_id": LAB}).json()
            assert result["success"], result

        # the instructor collects and autogrades (formgrader), then exports (a terminal)
        result = hub.user("instructor", "POST", f"/formgrader/api/assignment/{LAB}/collect").json()
        assert result["success"], result
        for role in ("learner_a", "learner_b"):
            result = hub.user("instructor", "POST",
                              f"/formgrader/api/submission/{LAB}/{users[role]}/autograde").json()
            kernels = course / "kernels.log"
            assert result["success"], (result, kernels.read_text()[-3000:] if kernels.exists() else "")
        env = {"PATH": f"{shim / 'bin'}:/usr/bin:/bin", "LANG": "C.UTF-8",
               "JUPYTER_PATH": str(Path(sys.prefix) / "share" / "jupyter")}
        done = hubrig.run_as(users["instructor"], [str(shim / "bin" / "python"), "-m", "nbgrader", "export"],
                             course, env)
        assert done.returncode == 0, done.stderr[-3000:]
        with open(course / "grades.csv") as handle:
            grades = {row["student_id"]: row for row in csv.DictReader(handle)}
        a, b = grades[users["learner_a"]], grades[users["learner_b"]]
        assert float(a["max_score"]) == 10 and float(a["score"]) == 10, a  # 100 %
        assert float(b["score"]) == 0, b  # 0 %
    finally:
        shop.__exit__(None, None, None)
    assert not shop.leftovers, f"processes left running after the hub stopped: {shop.leftovers}"
    assert hub.process is not None and hub.process.poll() is not None
    print(f"JupyterHub round trip: {time.monotonic() - started:.0f} s")
