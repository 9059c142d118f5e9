"""A stand-in for libcuda.so.1 at the Python level, for child processes that must start in GPU mode.

Prepend ``PYTHON_STANDIN_DRIVER`` to a child script: it answers gpucourse's start-up probe as a
CUDA 13.0 driver with one H100 (cc 9.0) would, and nothing else, so numba-cuda's real target loads
while no kernel can run. tests/test_runtime_driver.py compiles a C stand-in instead, for the probe
itself.
"""

import textwrap

PYTHON_STANDIN_DRIVER = textwrap.dedent("""
    import ctypes, os
    os.environ["GPUCOURSE_MODE"] = "gpu"

    class StandInDriver:
        def cuInit(self, flags):
            return 0

        def cuDeviceGetCount(self, count):
            count._obj.value = 1
            return 0

        def cuDriverGetVersion(self, version):
            version._obj.value = 13000  # CUDA 13.0
            return 0

        def cuDeviceGet(self, handle, ordinal):
            handle._obj.value = ordinal
            return 0

        def cuDeviceGetName(self, name, length, handle):
            name.value = b"NVIDIA H100 80GB HBM3"
            return 0

        def cuDeviceGetAttribute(self, value, attribute, handle):
            value._obj.value = {75: 9, 76: 0}[attribute]  # compute capability 9.0
            return 0

    _real_cdll = ctypes.CDLL
    ctypes.CDLL = lambda name, *a, **k: StandInDriver() if name == "libcuda.so.1" else _real_cdll(name, *a, **k)
    import gpucourse
    ctypes.CDLL = _real_cdll
""")
