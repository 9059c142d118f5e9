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
import json
import os
import pwd
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

import nbformat
import pytest

from gpucourse.tooling.build import ROOT, to_notebook

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("jupyterhub")]

LAB = "lab01_warps"
COURSE = "gpucourse"
PROXY = shutil.which("configurable-http-proxy")
# Every wait polls the hub's own API until it says ready; these ceilings are reached only when
# something is broken, never by a loaded machine (the test shares two cores with another worker).
CEILING_S = 180
SERVER_CEILING_S = 300  # a single-user server's start, three of them at once
SKIP_REASON = None
if not sys.platform.startswith("linux"):
    SKIP_REASON = "the JupyterHub test uses Linux local users"
elif os.geteuid() != 0:
    SKIP_REASON = "the JupyterHub test creates local users (useradd) and spawns servers as them: run it as root"
elif PROXY is None:
    SKIP_REASON = ("configurable-http-proxy is not on PATH (JupyterHub's proxy needs Node.js): "
                   "`npm install -g configurable-http-proxy@5.3.0`")
elif not shutil.which("useradd"):
    SKIP_REASON = "useradd is not available"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _system_python() -> str | None:
    """A Python of this minor version that other users can run (a pyenv under root's 0700 home cannot be)."""
    version = f"python{sys.version_info[0]}.{sys.version_info[1]}"
    for candidate in (sys.executable, f"/usr/bin/{version}", f"/usr/local/bin/{version}"):
        path = Path(candidate).resolve()
        if path.exists() and all(os.stat(p).st_mode & 0o001 for p in path.parents):
            return candidate
    return None


def _shim_environment(base: Path) -> Path:
    """A venv of a system Python that imports this environment's packages (which must be world-readable)."""
    python = _system_python()
    if python is None:
        pytest.skip(f"no python{sys.version_info[0]}.{sys.version_info[1]} that other users can run")
    site_packages = sysconfig.get_paths()["purelib"]
    if not all(os.stat(p).st_mode & 0o005 == 0o005 for p in [Path(site_packages), *Path(site_packages).parents]):
        pytest.skip(f"{site_packages} is not readable by other users")
    shim = base / "env"
    subprocess.run([python, "-m", "venv", "--without-pip", str(shim)], check=True)
    code = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    purelib = subprocess.run([str(shim / "bin" / "python"), "-c", code], capture_output=True, text=True,
                             check=True).stdout.strip()
    Path(purelib, "gpucourse-shim.pth").write_text(f"import site; site.addsitedir({site_packages!r})\n")
    alembic = shim / "bin" / "alembic"  # nbgrader runs `alembic` by name
    alembic.write_text(f"#!{shim / 'bin' / 'python'}\nfrom alembic.config import main\nmain()\n")
    alembic.chmod(0o755)
    config = base / "jupyter-config" / "jupyter_server_config.d"
    config.mkdir(parents=True)
    (config / "nbgrader.json").write_text(json.dumps({"ServerApp": {"jpserver_extensions": {
        "nbgrader.server_extensions.formgrader": True, "nbgrader.server_extensions.assignment_list": True,
        "nbgrader.server_extensions.course_list": True, "nbgrader.server_extensions.validate_assignment": True}}}))
    return shim


class Hub:
    def __init__(self, base: Path, users: dict[str, str]):
        import requests

        self.requests = requests
        self.base, self.users = base, users
        self.port, self.hub_port, self.api_port = _free_port(), _free_port(), _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.service_token = secrets.token_hex(16)
        self.tokens: dict[str, str] = {}
        self.process: subprocess.Popen | None = None

    def write_config(self, shim: Path) -> Path:
        path = self.base / "jupyterhub_config.py"
        names = sorted(self.users.values())
        path.write_text(f"""
c = get_config()  # noqa
c.JupyterHub.ip = "127.0.0.1"
c.JupyterHub.port = {self.port}
c.JupyterHub.hub_ip = "127.0.0.1"
c.JupyterHub.hub_port = {self.hub_port}
c.ConfigurableHTTPProxy.api_url = "http://127.0.0.1:{self.api_port}"
c.ConfigurableHTTPProxy.command = [{PROXY!r}]
c.ConfigurableHTTPProxy.pid_file = {str(self.base / 'proxy.pid')!r}
c.JupyterHub.db_url = "sqlite:///{self.base / 'jupyterhub.sqlite'}"
c.JupyterHub.cookie_secret_file = {str(self.base / 'cookie_secret')!r}
c.JupyterHub.authenticator_class = "dummy"
c.DummyAuthenticator.password = {secrets.token_hex(12)!r}
c.Authenticator.allowed_users = set({names!r})
c.Authenticator.admin_users = {{{self.users['instructor']!r}}}
c.JupyterHub.spawner_class = "localprocess"
c.Spawner.cmd = [{str(shim / 'bin' / 'python')!r}, "-m", "jupyterhub.singleuser"]
c.Spawner.env_keep = ["LANG"]
c.Spawner.environment = {{
    "PATH": {str(shim / 'bin') + ':/usr/local/bin:/usr/bin:/bin'!r},
    "JUPYTER_CONFIG_PATH": {str(self.base / 'jupyter-config')!r},
    "JUPYTER_PATH": {str(Path(sys.prefix) / 'share' / 'jupyter')!r},  # nbconvert's templates
    "GPUCOURSE_MODE": "sim",
}}
c.Spawner.start_timeout = {SERVER_CEILING_S}
c.Spawner.http_timeout = {SERVER_CEILING_S}
c.JupyterHub.services = [{{"name": "gpucourse-test", "api_token": {self.service_token!r}}}]
c.JupyterHub.load_roles = [{{"name": "gpucourse-test", "services": ["gpucourse-test"],
    "scopes": ["admin:users", "admin:servers", "tokens", "access:servers", "list:users", "read:users"]}}]
""")
        return path

    def start(self, config: Path) -> None:
        log = open(self.base / "jupyterhub.log", "w")  # noqa: SIM115
        self.process = subprocess.Popen([sys.executable, "-m", "jupyterhub", "-f", str(config)], cwd=self.base,
                                        stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self._wait(lambda: self.api("GET", "/hub/api/").ok, CEILING_S, "the hub to answer")

    def api(self, method: str, path: str, token: str | None = None, **kwargs):
        headers = {"Authorization": f"token {token or self.service_token}"}
        return self.requests.request(method, self.url + path, headers=headers, timeout=300, **kwargs)

    def start_servers(self) -> None:
        for name in self.users.values():
            reply = self.api("POST", f"/hub/api/users/{name}/server")
            assert reply.status_code in (201, 202), reply.text
        for name in self.users.values():
            self._wait(lambda name=name: (self.api("GET", f"/hub/api/users/{name}").json()
                                          .get("servers", {}).get("", {}).get("ready")), SERVER_CEILING_S,
                       f"{name}'s server")
            reply = self.api("POST", f"/hub/api/users/{name}/tokens",
                             json={"note": "gpucourse test", "expires_in": 3600})
            assert reply.status_code == 201, reply.text
            self.tokens[name] = reply.json()["token"]

    def user(self, role: str, method: str, path: str, **kwargs):
        name = self.users[role]
        reply = self.api(method, f"/user/{name}{path}", token=self.tokens[name], **kwargs)
        if not reply.ok:
            log = (self.base / "jupyterhub.log").read_text()[-6000:]
            raise AssertionError(f"{role} {method} {path}: {reply.status_code} {reply.text[-500:]}\n{log}")
        return reply

    def stop(self) -> None:
        if self.process is None:
            return
        self.process.send_signal(signal.SIGTERM)  # the hub stops the servers and the proxy it started
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()

    def _wait(self, ready, seconds: float, what: str) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            try:
                if ready():
                    return
            except (self.requests.ConnectionError, ValueError, KeyError):
                pass
            if self.process is not None and self.process.poll() is not None:
                break
            time.sleep(0.5)
        log = (self.base / "jupyterhub.log").read_text()[-4000:]
        raise AssertionError(f"timed out waiting for {what}\n{log}")


def _processes_of(uids: set[int]) -> list[int]:
    found = []
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            uid_line = next(line for line in status.read_text().splitlines() if line.startswith("Uid:"))
        except (OSError, StopIteration):
            continue
        if int(uid_line.split()[1]) in uids:
            found.append(int(status.parent.name))
    return found


def _run_as(name: str, args: list[str], cwd: Path, env: dict) -> subprocess.CompletedProcess:
    """A command in the instructor's terminal on the hub."""
    account = pwd.getpwnam(name)
    return subprocess.run(args, cwd=cwd, env={**env, "HOME": account.pw_dir, "USER": name}, user=account.pw_uid,
                          group=account.pw_gid, extra_groups=[], capture_output=True, text=True, timeout=300)


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
    base = Path(tempfile.mkdtemp(prefix="gpucourse-hub-", dir="/tmp"))
    base.chmod(0o755)
    suffix = secrets.token_hex(3)
    users = {"instructor": f"gpci{suffix}", "learner_a": f"gpca{suffix}", "learner_b": f"gpcb{suffix}"}
    created: list[str] = []
    hub = Hub(base, users)
    try:
        shim = _shim_environment(base)
        exchange = base / "exchange"
        exchange.mkdir()
        exchange.chmod(0o777)
        (base / "home").mkdir()
        for name in users.values():
            subprocess.run(["useradd", "--create-home", "--home-dir", str(base / "home" / name), "--shell",
                            "/bin/bash", name], check=True, capture_output=True)
            created.append(name)
        instructor = pwd.getpwnam(users["instructor"])
        course = Path(instructor.pw_dir)  # the instructor's home is the course directory
        config = (ROOT / "nbgrader_config.py").read_text()
        config += f"\nc.Exchange.root = {str(exchange)!r}\n"
        config += f"c.GuardedExecute.kernel_log = {str(course / 'kernels.log')!r}\n"
        (course / "nbgrader_config.py").write_text(config)
        (course / "solutions" / LAB).mkdir(parents=True)
        shutil.copy(ROOT / "solutions" / LAB / f"{LAB}.py", course / "solutions" / LAB)
        nbformat.write(to_notebook(ROOT / "solutions" / LAB / f"{LAB}.py"), course / "solutions" / LAB / f"{LAB}.ipynb")
        for role in ("learner_a", "learner_b"):
            home = Path(pwd.getpwnam(users[role]).pw_dir)
            (home / "nbgrader_config.py").write_text(
                f"c = get_config()  # noqa\nc.CourseDirectory.course_id = {COURSE!r}\n"
                f"c.Exchange.root = {str(exchange)!r}\n")
        for name in users.values():
            account = pwd.getpwnam(name)
            subprocess.run(["chown", "-R", f"{account.pw_uid}:{account.pw_gid}", account.pw_dir], check=True)

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
        done = _run_as(users["instructor"], [str(shim / "bin" / "python"), "-m", "nbgrader", "export"], course, env)
        assert done.returncode == 0, done.stderr[-3000:]
        with open(course / "grades.csv") as handle:
            grades = {row["student_id"]: row for row in csv.DictReader(handle)}
        a, b = grades[users["learner_a"]], grades[users["learner_b"]]
        assert float(a["max_score"]) == 10 and float(a["score"]) == 10, a  # 100 %
        assert float(b["score"]) == 0, b  # 0 %
    finally:
        pid_file = base / "proxy.pid"
        proxy_pid = int(pid_file.read_text()) if pid_file.exists() else None
        hub.stop()
        leftovers = _processes_of({pwd.getpwnam(name).pw_uid for name in created})
        if proxy_pid and Path(f"/proc/{proxy_pid}").exists():
            leftovers.append(proxy_pid)
        for pid in leftovers:
            os.kill(pid, signal.SIGKILL)
        for name in created:
            subprocess.run(["userdel", "--remove", name], capture_output=True)
        shutil.rmtree(base, ignore_errors=True)
    assert not leftovers, f"processes left running after the hub stopped: {leftovers}"
    assert hub.process is not None and hub.process.poll() is not None
    print(f"JupyterHub round trip: {time.monotonic() - started:.0f} s")
