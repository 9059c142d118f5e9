import os
import subprocess
import sys

import pytest

from gpucourse.errors import CourseError, InvalidConfig, NoGPU
from gpucourse.measure import runtime


def run_python(code: str, **env) -> subprocess.CompletedProcess:
    full_env = {k: v for k, v in os.environ.items() if k not in ("GPUCOURSE_MODE", "NUMBA_ENABLE_CUDASIM")}
    full_env.update(env)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=full_env, timeout=120)


def test_simulator_mode_here_sets_the_simulator_before_numba():
    assert runtime.MODE == "sim"
    assert os.environ["NUMBA_ENABLE_CUDASIM"] == "1"
    import numba
    from numba import cuda

    assert numba.config.ENABLE_CUDASIM == 1  # numba read the flag: it was set before numba's import
    assert runtime.cuda is cuda
    assert type(cuda.get_current_device()).__name__ == "FakeCUDADevice"  # the simulator's device, no driver
    assert runtime.xp.__name__ == "numpy"


def test_forced_sim_mode_says_why():
    code = "from gpucourse.measure import runtime; print(runtime.MODE, '|', runtime.SIM_REASON)"
    done = run_python(code, GPUCOURSE_MODE="sim")
    assert done.stdout.strip() == "sim | GPUCOURSE_MODE=sim was set"


def test_unknown_mode_is_a_one_line_error():
    done = run_python("import gpucourse", GPUCOURSE_MODE="fast")
    assert done.returncode != 0
    assert "GPUCOURSE_MODE must be 'gpu', 'sim' or unset" in done.stderr.splitlines()[-1]


@pytest.mark.skipif(runtime.is_gpu(), reason="checks the error on a machine without a GPU")
def test_forcing_gpu_without_one_says_what_to_do():
    done = run_python("import gpucourse", GPUCOURSE_MODE="gpu")
    last = done.stderr.splitlines()[-1]
    assert done.returncode != 0
    assert "GPUCOURSE_MODE=gpu was set but" in last and "use GPUCOURSE_MODE=sim" in last


def test_course_errors_render_as_one_line_in_ipython():
    for error in (InvalidConfig("block size must be ≤ 1024"), NoGPU("no GPU")):
        assert isinstance(error, CourseError)
        lines = error._render_traceback_()
        assert len(lines) == 1 and str(error) in lines[0]


def test_banner_in_simulator_mode_says_timings_are_not_live():
    banner = runtime.banner()
    text = repr(banner)
    assert text.startswith("Simulator mode")
    assert "never shown as such" in text
    html = banner._repr_html_()
    assert 'class="gpucourse-banner"' in html and 'role="status"' in html


def test_gpu_banner_lists_the_device_facts():
    info = runtime.DeviceInfo(name="NVIDIA H200", compute_capability=(9, 0), sm_count=132,
                              memory_bytes=141 * 2**30, l2_bytes=60 * 2**20, datasheet_bandwidth_gbps=4800.0,
                              driver_version="13.0", cuda_version="13.0")
    text = repr(runtime.Banner(info, "gpu", ""))
    for fact in ("GPU mode · NVIDIA H200", "compute capability 9.0", "132 SMs", "L2 60 MiB", "datasheet 4800 GB/s",
                 "measured live"):
        assert fact in text
    assert info.slug == "nvidia-h200"


def test_datasheet_lookup_by_device_name():
    # Names as the driver reports them; figures from each row's cited datasheet.
    assert runtime.datasheet_bandwidth_gbps("NVIDIA H200") == 4800.0
    assert runtime.datasheet_bandwidth_gbps("NVIDIA H100 80GB HBM3") == 3350.0
    assert runtime.datasheet_bandwidth_gbps("Tesla T4") == 320.0
    assert runtime.datasheet_bandwidth_gbps("NVIDIA A100-SXM4-80GB") == 2039.0
    assert runtime.datasheet_bandwidth_gbps("Some Future GPU") is None
    assert runtime.datasheet_tflops("NVIDIA H200")["bf16"] == 989.4
    assert runtime.datasheet_tflops("NVIDIA H200 NVL") == {} and runtime.datasheet_tflops("NVIDIA H100 PCIe") == {}


def test_datasheet_names_match_exactly():
    # A prefix is a different card: an L4 is not an L40S, a GH200 is not an H200.
    assert runtime.datasheet_bandwidth_gbps("NVIDIA L4") == 300.0
    assert runtime.datasheet_bandwidth_gbps("NVIDIA L40S") == 864.0
    assert runtime.datasheet_bandwidth_gbps("NVIDIA GH200 480GB") is None
    assert runtime.datasheet_tflops("NVIDIA GH200 480GB") == {}
    assert runtime.datasheet_bandwidth_gbps("NVIDIA A10") == 600.0
    assert runtime.datasheet_bandwidth_gbps("NVIDIA A100 80GB PCIe") == 1935.0


def test_a_mig_slice_gets_no_datasheet_figure():
    # A MIG instance has a share of the GPU's memory bandwidth, not all of it.
    assert runtime.datasheet_bandwidth_gbps("NVIDIA A100-SXM4-40GB MIG 1g.5gb") is None
    assert runtime.datasheet_bandwidth_gbps("NVIDIA H100 80GB HBM3 MIG 3g.40gb") is None
    assert runtime.datasheet_tflops("NVIDIA H100 80GB HBM3 MIG 3g.40gb") == {}


def test_every_datasheet_row_cites_its_source():
    for name, sheet in runtime.DATASHEETS.items():
        assert sheet.source.startswith("NVIDIA "), name
        assert sheet.bandwidth_gbps > 0
    required = ("Tesla T4", "NVIDIA L4", "NVIDIA L40S", "NVIDIA A10", "NVIDIA A100-PCIE-40GB",
                "NVIDIA A100 80GB PCIe", "NVIDIA A100-SXM4-40GB", "NVIDIA A100-SXM4-80GB", "NVIDIA H100 PCIe",
                "NVIDIA H100 80GB HBM3", "NVIDIA H100 NVL", "NVIDIA H200", "NVIDIA B200",
                "NVIDIA GeForce RTX 4090", "NVIDIA GeForce RTX 5090")
    assert set(required) <= set(runtime.DATASHEETS)


def test_simulated_device_is_a_modelled_cc90():
    info = runtime.device()
    assert info.simulated and info.compute_capability == (9, 0) and info.slug == "simulator"
