"""The grading kernel's sandbox (Linux Landlock, no privileges needed) and its launch.

The kernel can read the Python installation, the ``gpucourse`` package and ``data/``, and
read/write only its own notebook folder and a private home. ``solutions/``, the gradebook, other
learners' submissions and the exchange are out of reach; it cannot signal or trace the grader; as
root it also drops every capability. Where Landlock is missing grading still works and says that
it is unsandboxed.

Running this file as a script (``python -I -S sandbox.py --sandbox SPEC -- ARGV``) is the
launcher: it restricts itself, writes what it applied to the spec's ``status_file``, then execs
the kernel. Keep the imports stdlib-only.
"""

from __future__ import annotations

import ctypes
import json
import os
import sys
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parents[1]
ROOT = PACKAGE_DIR.parent

# ---------------------------------------------------------------------------------------------
# Landlock via ctypes (applied by the launcher right before it execs the kernel)
# ---------------------------------------------------------------------------------------------

_SYS_CREATE_RULESET, _SYS_ADD_RULE, _SYS_RESTRICT_SELF = 444, 445, 446  # same on every architecture
_PR_SET_NO_NEW_PRIVS, _PR_CAPBSET_DROP = 38, 24
_FS_EXECUTE, _FS_WRITE_FILE, _FS_READ_FILE, _FS_READ_DIR = 1, 2, 4, 8
_FS_TRUNCATE = 1 << 14
_FILE_RIGHTS = _FS_EXECUTE | _FS_WRITE_FILE | _FS_READ_FILE | _FS_TRUNCATE
_SCOPE_ABSTRACT_UNIX_SOCKET, _SCOPE_SIGNAL = 1, 2
SYSTEM_READ_PATHS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/proc", "/sys")
SYSTEM_WRITE_PATHS = ("/dev",)


def landlock_abi() -> int:
    """The kernel's Landlock ABI version (0: unavailable)."""
    if not sys.platform.startswith("linux"):
        return 0
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        abi = libc.syscall(_SYS_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(1))
    except Exception:
        return 0
    return max(int(abi), 0)


def _handled_fs(abi: int) -> int:
    rights = (1 << 13) - 1  # ABI 1: execute … make_sym
    if abi >= 2:
        rights |= 1 << 13  # refer
    if abi >= 3:
        rights |= _FS_TRUNCATE
    return rights  # ioctl on devices (ABI 5) stays unrestricted: GPU drivers need it


def _restrict_self(read: list[str], write: list[str], read_files: list[str]) -> int:
    """Apply Landlock to this process (and everything it execs). Returns the ABI used."""
    abi = landlock_abi()
    if abi <= 0:
        return 0
    libc = ctypes.CDLL(None, use_errno=True)
    handled = _handled_fs(abi)
    attr = (ctypes.c_uint64 * 3)(handled, 0, _SCOPE_ABSTRACT_UNIX_SOCKET | _SCOPE_SIGNAL if abi >= 6 else 0)
    size = 24 if abi >= 6 else 8
    ruleset = libc.syscall(_SYS_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0))
    if ruleset < 0:
        raise OSError(ctypes.get_errno(), "landlock_create_ruleset failed")

    class PathBeneath(ctypes.Structure):
        _pack_ = 1
        _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]

    read_rights = _FS_EXECUTE | _FS_READ_FILE | _FS_READ_DIR
    rules = [(p, read_rights) for p in read] + [(p, handled) for p in write]
    rules += [(p, _FS_READ_FILE) for p in read_files]
    for path, rights in rules:
        try:
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            if not os.path.isdir(path):
                rights &= _FILE_RIGHTS
            rule = PathBeneath(rights & handled, fd)
            added = libc.syscall(_SYS_ADD_RULE, ruleset, ctypes.c_int(1), ctypes.byref(rule), ctypes.c_uint32(0))
            if added < 0:
                raise OSError(ctypes.get_errno(), f"landlock_add_rule failed for {path}")
        finally:
            os.close(fd)
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")
    if libc.syscall(_SYS_RESTRICT_SELF, ruleset, ctypes.c_uint32(0)) != 0:
        raise OSError(ctypes.get_errno(), "landlock_restrict_self failed")
    os.close(ruleset)
    return abi


def _drop_capabilities() -> None:
    """As root, keep uid 0 but give up every capability (raw sockets, kill, ptrace, mount …)."""
    if os.geteuid() != 0:
        return
    libc = ctypes.CDLL(None, use_errno=True)
    for cap in range(64):
        if libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            break  # past the last capability this kernel knows
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
    data = (ctypes.c_uint32 * 6)()  # effective, permitted, inheritable × 2: all empty
    libc.capset(ctypes.byref(header), ctypes.byref(data))


def restrict(spec: dict, kernel: list[str]) -> None:
    """What the launcher does before the kernel runs: Landlock from ``spec`` (its connection file readable),
    what was applied written to the spec's ``status_file`` (if any), every capability given up. In "required"
    mode a kernel that cannot be sandboxed exits (70). Also run by a kernel forked from the grader's template
    (``grading/forkkernel.py``) in place of the exec."""
    read_files = list(spec.get("read_files", []))
    if "-f" in kernel:  # the connection file that jupyter_client wrote for this kernel
        read_files.append(kernel[kernel.index("-f") + 1])
    abi, error = 0, None
    try:
        abi = _restrict_self(spec["read"], spec["write"], read_files)
    except OSError as exc:
        error = str(exc)
    if abi == 0 and error is None:
        error = "Landlock is not available in this kernel"
    if error:
        print(f"gpucourse sandbox: {error}", file=sys.stderr)
        if spec.get("mode") == "required":
            os._exit(70)
        abi = 0  # "auto": the kernel runs unsandboxed, and the grade report says so
    if spec.get("status_file"):
        with open(spec["status_file"], "w") as handle:
            json.dump({"abi": abi, "error": error}, handle)
    _drop_capabilities()


def _sandbox_main(argv: list[str]) -> None:
    """``sandbox.py --sandbox SPEC -- KERNEL_ARGV…``: restrict, then exec the kernel."""
    spec, kernel = parse_sandbox_command(argv, launcher=False)
    restrict(spec, kernel)
    os.execv(kernel[0], kernel)


def sandbox_note(status_file) -> str | None:
    """A line for the grade report when the launcher could not sandbox this kernel (None when it
    did, or when no kernel was launched)."""
    try:
        status = json.loads(Path(status_file).read_text())
    except (OSError, ValueError):
        return None
    if status.get("abi"):
        return None
    return (f"graded WITHOUT the Landlock sandbox ({status.get('error') or 'not applied'}): this "
            "submission could read what the grader can read")


def sandbox_status() -> str:
    abi = landlock_abi()
    if abi:
        return f"Landlock ABI {abi}"
    return "UNAVAILABLE (no Landlock in this kernel: submissions can read what the grader can read)"



# ---------------------------------------------------------------------------------------------
# Kernel launch: the sandbox spec and the environment
# ---------------------------------------------------------------------------------------------


SANDBOX_FLAG = "--sandbox"


def sandbox_command(kernel_argv: list[str], spec: dict) -> list[str]:
    return [sys.executable, "-I", "-S", str(Path(__file__).resolve()), SANDBOX_FLAG, json.dumps(spec), "--",
            *kernel_argv]


def parse_sandbox_command(argv: list[str], launcher: bool = True) -> tuple[dict, list[str]] | None:
    """(spec, kernel argv) of a ``sandbox_command`` (``launcher``: the whole command; else the launcher's own
    arguments from ``--sandbox``), or None for another command."""
    if launcher:
        head = [sys.executable, "-I", "-S", str(Path(__file__).resolve()), SANDBOX_FLAG]
        if argv[:5] != head or len(argv) < 8 or argv[6] != "--":
            return None
        argv = argv[4:]
    return json.loads(argv[1]), argv[argv.index("--") + 1:]


def _within(path: str, folder: str) -> bool:
    try:
        Path(path).resolve().relative_to(Path(folder).resolve())
        return True
    except ValueError:
        return False


CUDA_DRIVER_ROOTS = ("/run/nvidia",)  # the GPU Operator's driver root (/run/nvidia/driver)


def _located_nvvm() -> list[str]:
    """The folders of the libNVVM and libdevice that numba-cuda will use (cuda-pathfinder finds them as
    numba-cuda does); none where cuda-pathfinder is missing or finds nothing."""
    try:
        from cuda import pathfinder
    except Exception:  # noqa: BLE001 (no CUDA stack: simulator only)
        return []
    found = []
    for locate in (lambda: pathfinder.load_nvidia_dynamic_lib("nvvm").abs_path,
                   lambda: pathfinder.find_bitcode_lib("device")):
        try:
            path = locate()
        except Exception:  # noqa: BLE001
            continue
        if path:
            found.append(os.path.dirname(path))
    return found


def cuda_read_paths(environ=None, located=None) -> list[str]:
    """Folders of the CUDA installation a grading kernel on the GPU must read, wherever it lives (a module-loaded
    toolkit under /apps or /sw, the HPC SDK under /opt, the GPU Operator's driver under /run/nvidia): ``CUDA_HOME``,
    ``CUDA_PATH``, each ``LD_LIBRARY_PATH`` entry, the NVVM and libdevice folders numba-cuda locates (``located``,
    default: found now), and ``CUDA_DRIVER_ROOTS``; only absolute paths of existing folders (gpu-mode review, G10)."""
    env = os.environ if environ is None else environ
    paths = [env.get("CUDA_HOME", ""), env.get("CUDA_PATH", ""), *env.get("LD_LIBRARY_PATH", "").split(os.pathsep)]
    paths += list(_located_nvvm() if located is None else located) + list(CUDA_DRIVER_ROOTS)
    return [p for p in dict.fromkeys(paths) if p and os.path.isabs(p) and os.path.isdir(p)]


def sandbox_paths(notebook_dir, private_dir, *, extra_read=(), protected=(), mode="auto") -> dict:
    """What the grading kernel may read and write. A folder that contains a protected one (the
    course root, solutions/) is never granted: only the package and data folders inside it."""
    protected = [str(Path(p).resolve()) for p in [*protected, ROOT / "solutions"]]
    read = set(SYSTEM_READ_PATHS) | {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    read |= {p for p in sys.path if p and os.path.isdir(p)}
    read |= {str(PACKAGE_DIR), str(ROOT / "data"), *extra_read, *cuda_read_paths()}
    granted = []
    for path in sorted(read):
        if any(_within(secret, path) for secret in protected):
            continue  # e.g. the repository root on sys.path, or "" (the grader's cwd)
        granted.append(str(Path(path).resolve()))
    write = [str(Path(notebook_dir).resolve()), str(Path(private_dir).resolve()), *SYSTEM_WRITE_PATHS]
    return {"read": granted, "write": write, "read_files": [], "mode": mode}


_ENV_KEEP = {"PATH", "LANG", "LANGUAGE", "TZ", "LD_LIBRARY_PATH", "PLOTLY_RENDERER", "OMP_NUM_THREADS",
             "NBGRADER_EXECUTION", "SYSTEMROOT"}
_ENV_PREFIXES = ("LC_", "CUDA_", "NVIDIA_", "NUMBA_", "GPUCOURSE_", "CUPY_", "MKL_", "OPENBLAS_")


def kernel_environment(private_dir: Path) -> dict:
    """A scrubbed environment (no tokens or credentials of the grader) with a private home."""
    env = {k: v for k, v in os.environ.items() if k in _ENV_KEEP or k.startswith(_ENV_PREFIXES)}
    home = Path(private_dir) / "home"
    tmp = Path(private_dir) / "tmp"
    for folder in (home, tmp):
        folder.mkdir(parents=True, exist_ok=True)
    # the kernel imports the grader's own gpucourse (not another checkout an editable install
    # points to), through a link: the sandbox lets it read the package but not list the repository
    packages = Path(private_dir) / "python"
    packages.mkdir(exist_ok=True)
    if not (packages / "gpucourse").exists():
        (packages / "gpucourse").symlink_to(PACKAGE_DIR, target_is_directory=True)
    env.update({
        "PYTHONPATH": str(packages),
        "HOME": str(home), "TMPDIR": str(tmp), "TEMP": str(tmp), "TMP": str(tmp),
        "IPYTHONDIR": str(home / ".ipython"), "MPLCONFIGDIR": str(home / ".matplotlib"),
        "XDG_CACHE_HOME": str(home / ".cache"), "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_DATA_HOME": str(home / ".local/share"), "JUPYTER_DATA_DIR": str(home / ".jupyter-data"),
        "JUPYTER_RUNTIME_DIR": str(home / ".jupyter-runtime"), "JUPYTER_CONFIG_DIR": str(home / ".jupyter"),
        "NUMBA_CACHE_DIR": str(home / ".numba"), "CUPY_CACHE_DIR": str(home / ".cupy"),
        "PYTHONDONTWRITEBYTECODE": "1", "PYTHONNOUSERSITE": "1", "PYTHONHASHSEED": "0",
        # a warning printed to stderr would cost a correct test cell its points (nbgrader's rule)
        "PYTHONWARNINGS": "ignore", "NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS": "0",
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "/usr/bin:/bin")]),
    })
    return env


if __name__ == "__main__" and len(sys.argv) > 2 and sys.argv[1] == "--sandbox":
    _sandbox_main(sys.argv[1:])
