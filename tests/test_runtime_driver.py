"""The start-up decision against a stand-in driver: a libcuda.so.1 compiled here from a few C
functions that report a chosen CUDA version, device name and compute capability.

Each row imports gpucourse in a child process whose loader finds the stand-in first
(LD_LIBRARY_PATH), so the real probe (ctypes, CUDA Driver API) reads it. The installed stack
here is CUDA 13; the CUDA 12 stack goes through ``runtime.decide(stack=...)``.
"""

import os
import shutil
import subprocess
import sys

import pytest

from gpucourse.measure import runtime

GCC = shutil.which("gcc") or shutil.which("cc")
pytestmark = pytest.mark.skipif(GCC is None or not sys.platform.startswith("linux"),
                                reason="needs a C compiler on Linux to build the stand-in libcuda.so.1")

# The Driver API signatures the probe calls (cuda.h); values come from STANDIN_* variables.
STAND_IN = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
static int env_int(const char *name, int fallback) {
  const char *v = getenv(name); return v ? atoi(v) : fallback;
}
int cuInit(unsigned int flags) { return env_int("STANDIN_INIT_STATUS", 0); }
int cuDriverGetVersion(int *version) { *version = env_int("STANDIN_DRIVER_VERSION", 13000); return 0; }
int cuDeviceGetCount(int *count) { *count = env_int("STANDIN_DEVICE_COUNT", 1); return 0; }
int cuDeviceGet(int *device, int ordinal) { *device = ordinal; return 0; }
int cuDeviceGetName(char *name, int len, int device) {
  const char *v = getenv("STANDIN_DEVICE_NAME");
  strncpy(name, v ? v : "Stand-in GPU", len - 1); name[len - 1] = 0; return 0;
}
static int per_device(const char *name, int device, int fallback) {  /* STANDIN_CC_MAJOR_1 for GPU 1 */
  char key[64]; snprintf(key, sizeof key, "%s_%d", name, device);
  return env_int(key, env_int(name, fallback));
}
int cuDeviceGetAttribute(int *value, int attribute, int device) {
  if (attribute == 75) { *value = per_device("STANDIN_CC_MAJOR", device, 9); return 0; }
  if (attribute == 76) { *value = per_device("STANDIN_CC_MINOR", device, 0); return 0; }
  return 1;  /* CUDA_ERROR_INVALID_VALUE: the probe asks for nothing else */
}
"""

CHILD = """
from gpucourse.measure import runtime
print(runtime.MODE, '|', runtime.SIM_REASON)
mode, reason = runtime.decide(stack=lambda: runtime.Stack(12, "cuda-bindings 12.9.0"))
print(mode, '|', reason)
"""


@pytest.fixture(scope="module")
def stand_in(tmp_path_factory):
    folder = tmp_path_factory.mktemp("standin")
    (folder / "standin.c").write_text(STAND_IN)
    subprocess.run([GCC, "-shared", "-fPIC", "-o", str(folder / "libcuda.so.1"), str(folder / "standin.c")],
                   check=True, capture_output=True)
    return folder


def child_env(stand_in, driver: str, cc: str, name: str = "Stand-in GPU", **extra) -> dict:
    major, minor = (int(v) for v in driver.split("."))
    cc_major, cc_minor = cc.split(".")
    env = {k: v for k, v in os.environ.items() if k not in ("GPUCOURSE_MODE", "NUMBA_ENABLE_CUDASIM")}
    env.update(LD_LIBRARY_PATH=f"{stand_in}:{os.environ.get('LD_LIBRARY_PATH', '')}",
               PYTHONPATH=os.environ.get("PYTHONPATH", os.getcwd()),
               STANDIN_DRIVER_VERSION=str(major * 1000 + minor * 10), STANDIN_DEVICE_NAME=name,
               STANDIN_CC_MAJOR=cc_major, STANDIN_CC_MINOR=cc_minor, **extra)
    return env


def run_child(env, code=CHILD) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)


# Worked out by hand from the rules: CUDA 13 needs a CUDA 13 driver (R580) and cc ≥ 7.5; CUDA 12
# needs a CUDA 12 driver (R525) and cc ≥ 5.0. "gpu", or (the words the one-line reason must hold).
CUDA13 = {
    "11.8": ("CUDA 11.8", "update the NVIDIA driver to the R580 branch"),  # no stack runs on 11.8
    "12.4": ("CUDA 12.4", "make setup CUDA=12"),
    "12.8": ("CUDA 12.8", "make setup CUDA=12"),
}
ROWS = [(d, cc) for d in ("11.8", "12.4", "12.8", "13.0") for cc in ("7.0", "7.5", "9.0", "12.0")]


def expected_cuda13(driver, cc):
    if driver == "13.0":
        return "gpu" if cc != "7.0" else ("compute capability 7.0", "below the 7.5", "make setup CUDA=12")
    words = CUDA13[driver]
    if driver == "11.8" and cc == "7.0":
        # a V100 on an 11.8 driver: the CUDA 12 stack, after a driver update
        words = ("CUDA 11.8", "update the NVIDIA driver to the R525 branch or newer and run `make setup CUDA=12`")
    return words


def expected_cuda12(driver, cc):
    return ("CUDA 11.8", "update the NVIDIA driver to the R525 branch or newer") if driver == "11.8" else "gpu"


def check(line: str, expected):
    mode, _, reason = (part.strip() for part in line.partition("|"))
    if expected == "gpu":
        assert (mode, reason) == ("gpu", ""), line
    else:
        assert mode == "sim", line
        for words in expected:
            assert words in reason, (words, line)
        assert "\n" not in reason


@pytest.mark.parametrize(("driver", "cc"), ROWS)
def test_start_up_decision_for_each_driver_and_compute_capability(stand_in, driver, cc):
    done = run_child(child_env(stand_in, driver, cc, name=f"Stand-in cc {cc}"))
    assert done.returncode == 0, done.stderr
    installed, cuda12 = done.stdout.strip().splitlines()
    check(installed, expected_cuda13(driver, cc))
    check(cuda12, expected_cuda12(driver, cc))
    if driver == "13.0" and cc == "7.0":
        assert "(Stand-in cc 7.0)" in installed  # the reason names the device


def test_the_installed_stack_here_is_cuda_13():
    stack = runtime.installed_stack()
    assert stack is not None and stack.cuda_major == 13 and stack.min_cc == (7, 5)
    assert stack.evidence.startswith("cuda-bindings 13.")


@pytest.mark.parametrize("driver", ["12.4", "13.0"])
def test_forcing_gpu_on_a_gpu_the_stack_cannot_use_fails_in_one_line(stand_in, driver):
    cc = "7.0" if driver == "13.0" else "7.5"
    done = run_child(child_env(stand_in, driver, cc, name="Tesla T4", GPUCOURSE_MODE="gpu"), "import gpucourse")
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr  # no traceback in plain Python either
    assert lines[0].startswith("NoGPU: GPUCOURSE_MODE=gpu was set but ")
    assert (f"CUDA {driver}" if driver == "12.4" else "compute capability 7.0") in lines[0]
    assert "make setup CUDA=12" in lines[0]


def test_forcing_gpu_on_a_usable_gpu_starts_gpu_mode(stand_in):
    done = run_child(child_env(stand_in, "13.0", "9.0", GPUCOURSE_MODE="gpu"),
                     "from gpucourse.measure import runtime; print(runtime.MODE)")
    assert done.stdout.strip() == "gpu", done.stderr


def test_a_driver_that_does_not_initialise(stand_in):
    done = run_child(child_env(stand_in, "13.0", "9.0", STANDIN_INIT_STATUS="999"))
    assert done.stdout.splitlines()[0] == "sim | the NVIDIA driver did not initialise (cuInit returned 999)"


def test_doctor_on_a_mismatched_driver(stand_in):
    """Simulator mode is a valid mode: exit 0 with the reason; non-zero only when GPU mode was demanded."""
    env = child_env(stand_in, "12.4", "7.5", name="Tesla T4")
    auto = subprocess.run([sys.executable, "-m", "gpucourse", "doctor"], capture_output=True, text=True,
                          env=env, timeout=300)
    assert auto.returncode == 0, auto.stdout + auto.stderr
    mode_line = next(line for line in auto.stdout.splitlines() if line.startswith("mode:"))
    assert "CUDA 12.4" in mode_line and "make setup CUDA=12" in mode_line
    assert "CUDA stack: CUDA 13 (cuda-bindings 13." in auto.stdout
    assert "driver of the R580 branch or newer" in auto.stdout
    env["GPUCOURSE_MODE"] = "gpu"
    forced = subprocess.run([sys.executable, "-m", "gpucourse", "doctor"], capture_output=True, text=True,
                            env=env, timeout=300)
    assert forced.returncode != 0
    assert forced.stdout == ""
    assert len(forced.stderr.strip().splitlines()) == 1 and "CUDA 12.4" in forced.stderr


def test_a_second_gpu_the_stack_can_use_is_pointed_at(stand_in):
    # GPU 0 a V100 (cc 7.0), GPU 1 an H100 (cc 9.0), a CUDA 13 driver and stack: use GPU 1.
    env = child_env(stand_in, "13.0", "7.0", STANDIN_DEVICE_COUNT="2", STANDIN_CC_MAJOR_1="9", STANDIN_CC_MINOR_1="0")
    line = run_child(env).stdout.splitlines()[0]
    assert line.startswith("sim | the GPU (Stand-in GPU) has compute capability 7.0")
    assert line.endswith("set CUDA_VISIBLE_DEVICES=1 before starting Python"), line


def test_native_windows_says_to_use_wsl2():
    mode, reason = runtime.decide(platform="win32")
    assert mode == "sim" and "WSL2" in reason
    with pytest.raises(runtime.NoGPU, match="WSL2"):
        runtime.decide("gpu", platform="win32")
