# JupyterHub on ONE shared GPU server (no Kubernetes): real local users with passwords (PAM), each
# learner's server a local process, GPUs handed out round-robin, nbgrader's exchange in /srv.
# The same shape runs in tests/test_jupyterhub.py on 127.0.0.1. deploy/README.md has the steps.
#
#   sudo /opt/gpucourse/.venv/bin/jupyterhub -f /opt/gpucourse/deploy/jupyterhub_config.py
import os
import pwd
import shutil
import subprocess

c = get_config()  # noqa: F821  (provided by JupyterHub)

COURSE = "/opt/gpucourse"  # a clone with `make setup` run by a system Python (not a pyenv under /root)
VENV_BIN = f"{COURSE}/.venv/bin"

# Behind a TLS reverse proxy (Caddy, nginx) on the same machine; never expose plain HTTP.
c.JupyterHub.bind_url = "http://127.0.0.1:8000"
c.JupyterHub.hub_ip = "127.0.0.1"
c.JupyterHub.db_url = "sqlite:////srv/jupyterhub/jupyterhub.sqlite"
c.JupyterHub.cookie_secret_file = "/srv/jupyterhub/jupyterhub_cookie_secret"
c.ConfigurableHTTPProxy.command = ["configurable-http-proxy"]  # npm install -g configurable-http-proxy@5.3.0

# Local users in the `gpucourse` group log in with their system password.
c.JupyterHub.authenticator_class = "pam"
c.LocalAuthenticator.allowed_groups = {"gpucourse"}
c.Authenticator.admin_users = {"instructor"}

# Sizing, limits and culling follow from `make loadtest` (deploy/README.md, "Sizing a workshop").
# Restarting the hub (an upgrade, a crash) leaves the learners' servers and kernels running; it finds them again.
c.JupyterHub.cleanup_servers = False

c.JupyterHub.spawner_class = "localprocess"
# LocalProcessSpawner enforces no mem_limit: prlimit gives every process of a learner's server (the server,
# each kernel) a data limit. A cell that passes it gets a MemoryError in that kernel only, with one line that
# says so (cp deploy/ipython_kernel_config.py /etc/ipython/); the other learners are not touched. Lesson 00a's
# kernel peaks at ~0.3 GiB of data (torch imported: ~0.3 GiB), so 4 GiB leaves room for every lesson's arrays.
MEMORY_LIMIT_BYTES = 4 * 2**30
c.Spawner.cmd = ["prlimit", f"--data={MEMORY_LIMIT_BYTES}", "--", f"{VENV_BIN}/jupyterhub-singleuser"]
# Culling, by the single-user server itself (no extra package): a kernel idle for 45 minutes is stopped
# (its notebook stays saved), and a server with no kernel and no browser for an hour stops, freeing its
# ~0.6 GiB (deploy/README.md, "Sizing a workshop").
c.Spawner.args = [
    # kernels talk to their server over Unix sockets, not TCP ports on 127.0.0.1: with sixteen learners
    # starting kernels at once, `make loadtest` saw a kernel die on "Address already in use" (two kernels
    # picking the same free port), and a learner's lesson never opened
    "--KernelManager.transport=ipc",
    "--MappingKernelManager.cull_idle_timeout=2700",
    "--MappingKernelManager.cull_interval=300",
    "--ServerApp.shutdown_no_activity_timeout=3600",
]
c.Spawner.default_url = "/lab"
c.Spawner.notebook_dir = "~"
c.Spawner.start_timeout = 120
c.Spawner.http_timeout = 120
c.Spawner.environment = {
    "PATH": f"{VENV_BIN}:/usr/local/bin:/usr/bin:/bin",  # nbgrader runs `alembic` by name
    # plotly.js once per page, from JupyterLab's plotly extension: "+notebook" would save all of it (4.9 MB)
    # into the first chart of every notebook (tools/notebook_size.py --renderer plotly_mimetype+notebook)
    "PLOTLY_RENDERER": "plotly_mimetype",
}


def _gpu_count() -> int:
    try:
        out = subprocess.run(["nvidia-smi", "--list-gpus"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return sum(1 for line in out.splitlines() if line.startswith("GPU "))


GPUS = _gpu_count()
RUNTIME_ROOT = "/srv/jupyterhub/runtime"  # one private folder per learner, made by pre_spawn_hook


def pre_spawn_hook(spawner):
    """Give each learner one GPU (round-robin by user id), a private runtime folder and, once, a copy of the
    lessons and labs."""
    if GPUS:
        spawner.environment["CUDA_VISIBLE_DEVICES"] = str(spawner.user.id % GPUS)
    account = pwd.getpwnam(spawner.user.name)
    # the kernels' Unix sockets (--KernelManager.transport=ipc) live in the runtime folder: a socket's path has
    # at most 107 bytes, which ~/.local/share/jupyter/runtime/kernel-<uuid>-ipc-1 passes for long home paths
    runtime = os.path.join(RUNTIME_ROOT, spawner.user.name)
    os.makedirs(runtime, mode=0o700, exist_ok=True)
    os.chown(runtime, account.pw_uid, account.pw_gid)
    spawner.environment["JUPYTER_RUNTIME_DIR"] = runtime
    target = os.path.join(account.pw_dir, "gpucourse")
    if not os.path.exists(target):
        for part in ("notebooks", "labs"):
            shutil.copytree(os.path.join(COURSE, part), os.path.join(target, part))
        for folder, _, files in os.walk(target):
            os.chown(folder, account.pw_uid, account.pw_gid)
            for name in files:
                os.chown(os.path.join(folder, name), account.pw_uid, account.pw_gid)


c.Spawner.pre_spawn_hook = pre_spawn_hook
