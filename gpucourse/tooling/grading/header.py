"""The grader's kernel header: an IPython startup file, written into the grading kernel's private home,
that runs before the first cell and takes the snapshot (``snapshot.py``) and IPython's hooks (``hooks.py``);
and the report's line when it failed."""

from __future__ import annotations

from pathlib import Path

HEADER_STATUS = "header-status.txt"


def write_header(private_dir: Path, trusted_imports: list) -> None:
    """The grader's kernel header: an IPython startup file in the kernel's private home, which runs
    before the first cell and snapshots what hidden tests rely on (``snapshot_environment``)."""
    startup = Path(private_dir) / "home" / ".ipython" / "profile_default" / "startup"
    startup.mkdir(parents=True, exist_ok=True)
    imports = [(str(name), str(what)) for name, what in trusted_imports]
    (startup / "00-gpucourse-grader.py").write_text(f"""\
try:
    import gpucourse.tooling.grading.snapshot as _gpucourse_snapshot
    _gpucourse_snapshot.snapshot_environment({imports!r})
    import gpucourse.tooling.grading.hooks as _gpucourse_hooks
    _gpucourse_hooks.snapshot_hooks()  # IPython's own hooks, put back before every graded cell
    import gc as _gpucourse_gc
    # everything loaded so far (the libraries, the snapshot's copies) lives until the kernel ends: the
    # collector need not walk it again in each full collection (issue 50: lab 00a's round trip -19 %)
    _gpucourse_gc.freeze()
    _gpucourse_header = "ok"
except BaseException as _gpucourse_error:  # reported by the grader, not raised into the notebook
    _gpucourse_header = f"{{type(_gpucourse_error).__name__}}: {{_gpucourse_error}}"[:300]
with open({str(Path(private_dir) / HEADER_STATUS)!r}, "w") as _gpucourse_file:
    _gpucourse_file.write(_gpucourse_header)
for _gpucourse_name in [n for n in globals() if n.startswith("_gpucourse_")]:
    del globals()[_gpucourse_name]
del _gpucourse_name
""")


def header_note(private_dir: Path) -> str | None:
    """A line for the grade report when the header did not snapshot (None when it did)."""
    try:
        status = (Path(private_dir) / HEADER_STATUS).read_text()
    except OSError:
        status = "it did not run"
    if status == "ok":
        return None
    return (f"the grader's kernel header failed ({status}): this submission's hidden tests ran without the "
            "snapshot that protects them from changes to NumPy, builtins and imported names")
