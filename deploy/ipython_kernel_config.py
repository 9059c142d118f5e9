# Every learner's kernel on the shared server (shape 1): copy to /etc/ipython/ipython_kernel_config.py.
# A cell that asks for more memory than the server's limit (RLIMIT_DATA, set by prlimit in
# deploy/jupyterhub_config.py's Spawner.cmd) gets one line saying so, not a traceback: the kernel,
# the learner's notebook and the other learners are unaffected (gpucourse/tooling/memlimit.py).
c = get_config()  # noqa: F821  (provided by IPython)
c.InteractiveShellApp.exec_lines = [
    "import gpucourse.tooling.memlimit as _gpucourse_memlimit; _gpucourse_memlimit.install(); del _gpucourse_memlimit"
]
