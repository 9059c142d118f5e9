"""The course's JupyterHub shape 1 (deploy/jupyterhub_config.py) on 127.0.0.1, for tests and the load tool.

Real local users (created here and removed at the end, even on an error or Ctrl-C; needs root),
JupyterHub with configurable-http-proxy, DummyAuthenticator with one password, LocalProcessSpawner
running ``jupyterhub.singleuser`` from a venv of a system Python that imports this environment's
packages, and an nbgrader exchange folder. Used by tests/test_jupyterhub.py, tests/test_hub_faults.py
and ``make loadtest`` (gpucourse/tooling/loadtest.py). Binds 127.0.0.1 only.

    with Workshop({"instructor": "gpci1", "learner_a": "gpca1"}) as shop:
        shop.hub.start(shop.hub.write_config(shop.shim))
        shop.hub.start_servers()
"""

from __future__ import annotations

import json
import os
import pwd
import re
import secrets
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

from gpucourse.measure.ranklaunch import free_port

PROXY = shutil.which("configurable-http-proxy")
# Every wait polls the hub's own API until it says ready; these ceilings are reached only when
# something is broken, never by a loaded machine.
CEILING_S = 180
SERVER_CEILING_S = 300  # a single-user server's start, several at once on two cores


class Unavailable(RuntimeError):
    """This machine cannot run the hub (not Linux, not root, no proxy, no shareable Python)."""


def skip_reason() -> str | None:
    if not sys.platform.startswith("linux"):
        return "the JupyterHub rig uses Linux local users"
    if os.geteuid() != 0:
        return "the JupyterHub rig creates local users (useradd) and spawns servers as them: run it as root"
    if PROXY is None:
        return ("configurable-http-proxy is not on PATH (JupyterHub's proxy needs Node.js): "
                "`npm install -g configurable-http-proxy@5.3.0`")
    if not shutil.which("useradd"):
        return "useradd is not available"
    return None


def _system_python() -> str | None:
    """A Python of this minor version that other users can run (a pyenv under root's 0700 home cannot be)."""
    version = f"python{sys.version_info[0]}.{sys.version_info[1]}"
    for candidate in (sys.executable, f"/usr/bin/{version}", f"/usr/local/bin/{version}"):
        path = Path(candidate).resolve()
        if path.exists() and all(os.stat(p).st_mode & 0o001 for p in path.parents):
            return candidate
    return None


# The learner's message when an allocation passes the server's memory limit (see memory_limit_bytes): the
# deployed deploy/ipython_kernel_config.py, read by every kernel of the shim (IPython reads sys.prefix/etc/ipython).
KERNEL_CONFIG = Path(__file__).resolve().parents[2] / "deploy" / "ipython_kernel_config.py"


def shim_environment(base: Path) -> Path:
    """A venv of a system Python that imports this environment's packages (which must be world-readable)."""
    python = _system_python()
    if python is None:
        raise Unavailable(f"no python{sys.version_info[0]}.{sys.version_info[1]} that other users can run")
    site_packages = sysconfig.get_paths()["purelib"]
    if not all(os.stat(p).st_mode & 0o005 == 0o005 for p in [Path(site_packages), *Path(site_packages).parents]):
        raise Unavailable(f"{site_packages} is not readable by other users")
    shim = base / "env"
    subprocess.run([python, "-m", "venv", "--without-pip", str(shim)], check=True)
    code = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    purelib = subprocess.run([str(shim / "bin" / "python"), "-c", code], capture_output=True, text=True,
                             check=True).stdout.strip()
    # this checkout first (PYTHONPATH may name a work tree other than the editable install's)
    extra = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    lines = [f"{p}\n" for p in extra] + [f"import site; site.addsitedir({site_packages!r})\n"]
    Path(purelib, "gpucourse-shim.pth").write_text("".join(lines))
    alembic = shim / "bin" / "alembic"  # nbgrader runs `alembic` by name
    alembic.write_text(f"#!{shim / 'bin' / 'python'}\nfrom alembic.config import main\nmain()\n")
    alembic.chmod(0o755)
    ipython = shim / "etc" / "ipython"  # IPython reads sys.prefix/etc/ipython for every kernel of this venv
    ipython.mkdir(parents=True)
    if KERNEL_CONFIG.exists():
        shutil.copy(KERNEL_CONFIG, ipython / "ipython_kernel_config.py")
    config = base / "jupyter-config" / "jupyter_server_config.d"
    config.mkdir(parents=True)
    (config / "nbgrader.json").write_text(json.dumps({"ServerApp": {"jpserver_extensions": {
        "nbgrader.server_extensions.formgrader": True, "nbgrader.server_extensions.assignment_list": True,
        "nbgrader.server_extensions.course_list": True, "nbgrader.server_extensions.validate_assignment": True}}}))
    return shim


DEPLOY_CONFIG = Path(__file__).resolve().parents[2] / "deploy" / "jupyterhub_config.py"


def deployed_spawner_args() -> list[str]:
    """The single-user servers' arguments of deploy/jupyterhub_config.py (culling, the kernels' transport),
    so that the rig's servers run as deployed ones do."""
    if not DEPLOY_CONFIG.exists():
        return []
    from traitlets.config import Config

    config = Config()
    namespace = {"get_config": lambda: config, "__file__": str(DEPLOY_CONFIG)}
    exec(compile(DEPLOY_CONFIG.read_text(), str(DEPLOY_CONFIG), "exec"), namespace)
    return list(config.Spawner.args or [])


class Hub:
    def __init__(self, base: Path, users: dict[str, str]):
        import requests

        self.requests = requests
        self.base, self.users = base, users
        self.port, self.hub_port, self.api_port = free_port(), free_port(), free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.service_token = secrets.token_hex(16)
        self.password = secrets.token_hex(12)
        self.tokens: dict[str, str] = {}
        self.process: subprocess.Popen | None = None
        self.config: Path | None = None

    def write_config(self, shim: Path, *, memory_limit_bytes: int | None = None, cleanup_servers: bool = True,
                     extra: str = "") -> Path:
        """The test hub's configuration. ``memory_limit_bytes``: each process of a learner's server (the
        server and every kernel) gets RLIMIT_DATA, as deploy/jupyterhub_config.py sets it with prlimit;
        ``cleanup_servers=False``: the learners' servers outlive a restart of the hub (as deployed)."""
        path = self.base / "jupyterhub_config.py"
        names = sorted(self.users.values())
        command = [str(shim / "bin" / "python"), "-m", "jupyterhub.singleuser"]
        if memory_limit_bytes:
            command = [shutil.which("prlimit") or "prlimit", f"--data={int(memory_limit_bytes)}", "--", *command]
        admins = {self.users["instructor"]} if "instructor" in self.users else set()
        path.write_text(f"""
import os, pwd  # noqa
c = get_config()  # noqa


def _runtime_dir(spawner):  # as deploy/jupyterhub_config.py's pre_spawn_hook: a short path for the kernels' sockets
    account = pwd.getpwnam(spawner.user.name)
    path = os.path.join({str(self.base / 'run')!r}, spawner.user.name)
    os.makedirs(path, mode=0o700, exist_ok=True)
    os.chown(path, account.pw_uid, account.pw_gid)
    spawner.environment["JUPYTER_RUNTIME_DIR"] = path


c.Spawner.pre_spawn_hook = _runtime_dir
c.JupyterHub.ip = "127.0.0.1"
c.JupyterHub.port = {self.port}
c.JupyterHub.hub_ip = "127.0.0.1"
c.JupyterHub.hub_port = {self.hub_port}
c.ConfigurableHTTPProxy.api_url = "http://127.0.0.1:{self.api_port}"
c.ConfigurableHTTPProxy.command = [{PROXY!r}]
c.ConfigurableHTTPProxy.pid_file = {str(self.base / 'proxy.pid')!r}
c.JupyterHub.db_url = "sqlite:///{self.base / 'jupyterhub.sqlite'}"
c.JupyterHub.cookie_secret_file = {str(self.base / 'cookie_secret')!r}
c.JupyterHub.cleanup_servers = {cleanup_servers!r}
c.JupyterHub.authenticator_class = "dummy"
c.DummyAuthenticator.password = {self.password!r}
c.Authenticator.allowed_users = set({names!r})
c.Authenticator.admin_users = {admins!r}
c.JupyterHub.spawner_class = "localprocess"
c.Spawner.cmd = {command!r}
c.Spawner.args = {deployed_spawner_args()!r}
c.Spawner.env_keep = ["LANG"]
c.Spawner.environment = {{
    "PATH": {str(shim / 'bin') + ':/usr/local/bin:/usr/bin:/bin'!r},
    "JUPYTER_CONFIG_PATH": {str(self.base / 'jupyter-config')!r},
    "JUPYTER_PATH": {str(Path(sys.prefix) / 'share' / 'jupyter')!r},  # nbconvert's templates
    "GPUCOURSE_MODE": "sim",
    "PLOTLY_RENDERER": "plotly_mimetype",
}}
c.Spawner.start_timeout = {SERVER_CEILING_S}
c.Spawner.http_timeout = {SERVER_CEILING_S}
c.JupyterHub.services = [{{"name": "gpucourse-test", "api_token": {self.service_token!r}}}]
c.JupyterHub.load_roles = [{{"name": "gpucourse-test", "services": ["gpucourse-test"],
    "scopes": ["admin:users", "admin:servers", "tokens", "access:servers", "list:users", "read:users"]}}]
{extra}
""")
        self.config = path
        return path

    def start(self, config: Path | None = None) -> None:
        config = config or self.config
        log = open(self.base / "jupyterhub.log", "a")  # noqa: SIM115
        self.process = subprocess.Popen([sys.executable, "-m", "jupyterhub", "-f", str(config)], cwd=self.base,
                                        stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self.wait(lambda: self.api("GET", "/hub/api/").ok, CEILING_S, "the hub to answer")

    def api(self, method: str, path: str, token: str | None = None, **kwargs):
        headers = {"Authorization": f"token {token or self.service_token}"}
        kwargs.setdefault("timeout", 300)
        return self.requests.request(method, self.url + path, headers=headers, **kwargs)

    def server_model(self, name: str) -> dict:
        return self.api("GET", f"/hub/api/users/{name}").json().get("servers", {}).get("", {})

    def request_server(self, name: str) -> None:
        reply = self.api("POST", f"/hub/api/users/{name}/server")
        assert reply.status_code in (201, 202), reply.text

    def wait_ready(self, name: str, seconds: float = SERVER_CEILING_S) -> None:
        self.wait(lambda: self.server_model(name).get("ready"), seconds, f"{name}'s server")

    def token_for(self, name: str) -> str:
        reply = self.api("POST", f"/hub/api/users/{name}/tokens", json={"note": "gpucourse rig", "expires_in": 7200})
        assert reply.status_code == 201, reply.text
        self.tokens[name] = reply.json()["token"]
        return self.tokens[name]

    def start_servers(self, names=None) -> None:
        names = list(names or self.users.values())
        for name in names:
            self.request_server(name)
        for name in names:
            self.wait_ready(name)
            self.token_for(name)

    def user(self, role: str, method: str, path: str, **kwargs):
        name = self.users[role]
        reply = self.api(method, f"/user/{name}{path}", token=self.tokens[name], **kwargs)
        if not reply.ok:
            log = (self.base / "jupyterhub.log").read_text()[-6000:]
            raise AssertionError(f"{role} {method} {path}: {reply.status_code} {reply.text[-500:]}\n{log}")
        return reply

    def login(self, name: str):
        """A learner's browser: the login form with the password; returns the session with its cookies."""
        session = self.requests.Session()
        page = session.get(self.url + "/hub/login", timeout=120)
        page.raise_for_status()
        xsrf = session.cookies.get("_xsrf") or re.search(r'name="_xsrf" value="([^"]+)"', page.text).group(1)
        reply = session.post(self.url + "/hub/login", data={"username": name, "password": self.password,
                                                            "_xsrf": xsrf}, timeout=120, allow_redirects=False)
        if reply.status_code != 302:
            raise AssertionError(f"login of {name}: {reply.status_code} {reply.text[-300:]}")
        return session

    def spawn_from_hub_page(self, session, name: str) -> None:
        """What the hub page's "Start My Server" does: GET /hub/spawn (no options form: it spawns)."""
        reply = session.get(self.url + f"/hub/spawn/{name}", timeout=300, allow_redirects=False)
        if reply.status_code not in (200, 302, 303):
            raise AssertionError(f"spawn of {name}: {reply.status_code} {reply.text[-300:]}")

    def server_pid(self, name: str) -> int | None:
        reply = self.api("GET", f"/hub/api/users/{name}", params={"include_stopped_servers": "1"})
        state = reply.json().get("servers", {}).get("", {}).get("state") or {}
        return state.get("pid")

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)  # the hub stops the servers (if cleanup_servers) and the proxy
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()

    def wait(self, ready, seconds: float, what: str) -> None:
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


def processes_of(uids: set[int]) -> list[int]:
    found = []
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            uid_line = next(line for line in status.read_text().splitlines() if line.startswith("Uid:"))
        except (OSError, StopIteration):
            continue
        if int(uid_line.split()[1]) in uids:
            found.append(int(status.parent.name))
    return found


def run_as(name: str, args: list[str], cwd: Path, env: dict, timeout: float = 300) -> subprocess.CompletedProcess:
    """A command in a user's terminal on the hub."""
    account = pwd.getpwnam(name)
    return subprocess.run(args, cwd=cwd, env={**env, "HOME": account.pw_dir, "USER": name}, user=account.pw_uid,
                          group=account.pw_gid, extra_groups=[], capture_output=True, text=True, timeout=timeout)


class Workshop:
    """A base folder, a shim environment, an exchange, local users and a Hub: all removed on exit, even on
    an exception, Ctrl-C or SIGTERM. ``leftovers`` lists processes that were still running after the hub
    stopped (killed here)."""

    def __init__(self, users: dict[str, str], prefix: str = "gpucourse-hub-"):
        self.users = users
        self.prefix = prefix
        self.created: list[str] = []
        self.leftovers: list[int] = []
        self.base: Path | None = None
        self.hub: Hub | None = None
        self._old_term = None

    def __enter__(self) -> Workshop:
        reason = skip_reason()
        if reason:
            raise Unavailable(reason)
        self.base = Path(tempfile.mkdtemp(prefix=self.prefix, dir="/tmp"))
        self.base.chmod(0o755)
        if threading_main():
            self._old_term = signal.signal(signal.SIGTERM, _raise_exit)
        try:
            self.hub = Hub(self.base, self.users)
            self.shim = shim_environment(self.base)
            self.exchange = self.base / "exchange"
            self.exchange.mkdir()
            self.exchange.chmod(0o777)
            (self.base / "home").mkdir()
            for name in self.users.values():
                self.add_user(name)
        except BaseException:
            self.__exit__(*sys.exc_info())
            raise
        return self

    def add_user(self, name: str) -> Path:
        subprocess.run(["useradd", "--create-home", "--home-dir", str(self.base / "home" / name), "--shell",
                        "/bin/bash", name], check=True, capture_output=True)
        self.created.append(name)
        return self.home(name)

    def home(self, name: str) -> Path:
        return Path(pwd.getpwnam(name).pw_dir)

    def chown_home(self, name: str) -> None:
        account = pwd.getpwnam(name)
        subprocess.run(["chown", "-R", f"{account.pw_uid}:{account.pw_gid}", account.pw_dir], check=True)

    def __exit__(self, *exc) -> None:
        base = self.base
        try:
            pid_file = base / "proxy.pid" if base else None
            proxy_pid = int(pid_file.read_text()) if pid_file and pid_file.exists() else None
            if self.hub is not None:
                self.hub.stop()
            uids = set()
            for name in self.created:
                try:
                    uids.add(pwd.getpwnam(name).pw_uid)
                except KeyError:
                    pass
            self.leftovers = processes_of(uids) if uids else []
            if proxy_pid and Path(f"/proc/{proxy_pid}").exists():
                self.leftovers.append(proxy_pid)
            for pid in self.leftovers:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            for name in self.created:
                subprocess.run(["userdel", "--remove", name], capture_output=True)
            if base is not None:
                shutil.rmtree(base, ignore_errors=True)
        finally:
            if self._old_term is not None:
                signal.signal(signal.SIGTERM, self._old_term)


def threading_main() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


def _raise_exit(signum, frame):
    raise SystemExit(128 + signum)
