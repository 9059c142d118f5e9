"""The board around tensor-core measurements (SM clock, power draw) and the formats by compute capability
(review gpu-recordings.md §4; gpu-mode-paths.md G21): all with stand-ins for NVML and the GPU."""

import ctypes
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from gpucourse.errors import InvalidConfig
from gpucourse.lessons import measuring, precision
from gpucourse.lessons.precision import experiments as precision_experiments
from gpucourse.measure import gpuinfo, runtime


class FakeNVML:
    """The two NVML calls clocks_and_power makes; ``clocks``/``watts`` are consumed one per call."""

    def __init__(self, clocks=(1980,), milliwatts=(650_000,), fail_power=False):
        self.clocks, self.milliwatts, self.fail_power = list(clocks), list(milliwatts), fail_power

    def nvmlDeviceGetHandleByPciBusId_v2(self, bus_id, handle):
        return 0

    def nvmlDeviceGetClockInfo(self, handle, kind, out):
        assert kind == gpuinfo.NVML_CLOCK_SM
        ctypes.cast(out, ctypes.POINTER(ctypes.c_uint)).contents.value = self.clocks.pop(0)
        return 0

    def nvmlDeviceGetPowerUsage(self, handle, out):
        if self.fail_power:
            return 3  # NVML_ERROR_NOT_SUPPORTED
        ctypes.cast(out, ctypes.POINTER(ctypes.c_uint)).contents.value = self.milliwatts.pop(0)
        return 0


def test_clocks_and_power_read_nvml_in_its_units():
    assert gpuinfo.clocks_and_power(FakeNVML(), pci_bus_id="00000000:1B:00.0") == {"sm_clock_mhz": 1980,
                                                                                   "power_w": 650.0}
    assert gpuinfo.clocks_and_power(FakeNVML(fail_power=True), pci_bus_id="x")["power_w"] is None


def test_around_samples_before_and_after_the_run():
    nvml = FakeNVML(clocks=(1980, 1755), milliwatts=(120_000, 690_000))
    order = []

    def run():
        order.append("run")
        return 42

    def sample():
        order.append("sample")
        return gpuinfo.clocks_and_power(nvml, pci_bus_id="x")

    result, board = gpuinfo.around(run, sample)
    assert result == 42 and order == ["sample", "run", "sample"]
    assert board == {"sm_clock_mhz_before": 1980, "sm_clock_mhz_after": 1755, "power_w_before": 120.0,
                     "power_w_after": 690.0}
    assert tuple(board) == gpuinfo.CLOCK_POWER_KEYS


@pytest.fixture
def fake_gpu(monkeypatch):
    """A GPU of a chosen compute capability: runtime says GPU mode, the device has that cc."""
    def make(cc, name="Tesla T4"):
        info = SimpleNamespace(name=name, compute_capability=cc, datasheet_bandwidth_gbps=320.0)
        monkeypatch.setattr(runtime, "is_gpu", lambda: True)
        monkeypatch.setattr(runtime, "device", lambda: info)
        return info
    return make


def test_the_sweep_times_only_formats_the_gpu_has_and_records_the_board(fake_gpu, monkeypatch):
    fake_gpu((7, 5))
    timed = []

    def fake_measure(dtype, m, n=None, k=None):
        timed.append(dtype)
        return SimpleNamespace(tflops=1.0, median_ms=1.0, iqr_ms=0.0, min_ms=1.0, n_samples=10)

    monkeypatch.setattr(precision_experiments, "measure_matmul", fake_measure)
    monkeypatch.setattr(precision_experiments, "fp8_supported", lambda: False)
    samples = iter([{"sm_clock_mhz": 1590, "power_w": 30.0}, {"sm_clock_mhz": 1200, "power_w": 70.0}] * 4)
    monkeypatch.setattr(gpuinfo, "clocks_and_power", lambda: next(samples))
    data = precision_experiments.matmul_sweep(sizes=(1024, 2048))
    assert timed == ["fp32", "fp32", "fp16", "fp16"]  # no tf32, bf16 or fp8 on Turing
    assert list(data.sm_clock_mhz_after) == [1200] * 4 and list(data.power_w_before) == [30.0] * 4


def test_the_vocab_sweep_rows_carry_the_board(fake_gpu, monkeypatch):
    fake_gpu((9, 0), "NVIDIA H200")
    monkeypatch.setattr(precision_experiments, "measure_matmul",
                        lambda *a, **k: SimpleNamespace(tflops=1.0, median_ms=1.0, iqr_ms=0.0, n_samples=10))
    monkeypatch.setattr(gpuinfo, "clocks_and_power", lambda: {"sm_clock_mhz": 1980, "power_w": 500.0})
    data = precision_experiments.vocab_shape_sweep(dtypes=("bf16",))
    assert set(gpuinfo.CLOCK_POWER_KEYS) <= set(data.columns) and (data.sm_clock_mhz_before == 1980).all()


@pytest.mark.parametrize("cc, missing", [((7, 5), {"tf32", "bf16", "fp8_e4m3"}), ((8, 0), {"fp8_e4m3"}),
                                         ((8, 6), {"fp8_e4m3"}), ((8, 9), set()), ((9, 0), set())])
def test_unsupported_dtypes_by_compute_capability(cc, missing):
    found = precision.unsupported_dtypes(cc)
    assert set(found) == missing
    if "tf32" in found:
        assert found["tf32"].startswith("not supported before Ampere")


def test_a_turing_throughput_chart_labels_tf32_instead_of_plotting_it(fake_gpu):
    fake_gpu((7, 5))
    data = pd.DataFrame({"dtype": ["fp32", "fp16"], "n": [4096, 4096], "tflops": [7.0, 40.0],
                         "median_ms": [1.0, 1.0]})
    fig = precision.throughput_figure(data=data, source="test", device_name="Tesla T4")
    notes = " ".join(a.text for a in fig.layout.annotations if a.text)
    assert "tf32: not supported before Ampere" in notes and "bf16: not supported before Ampere" in notes
    from gpucourse.lessons.precision.figures import MATMUL_LABELS

    plotted = {t.name for t in fig.data}
    assert MATMUL_LABELS["fp16"] in plotted and MATMUL_LABELS["tf32"] not in plotted
    assert "datasheet fp16 (Tesla T4): 65" in notes and "tf32 (Tesla T4)" not in notes


def test_an_h200_throughput_chart_has_no_such_label(fake_gpu):
    fake_gpu((9, 0), "NVIDIA H200")
    data = pd.DataFrame({"dtype": ["tf32"], "n": [4096], "tflops": [300.0], "median_ms": [1.0]})
    fig = precision.throughput_figure(data=data, source="test", device_name="NVIDIA H200")
    assert "not supported" not in " ".join(a.text or "" for a in fig.layout.annotations)


@pytest.mark.parametrize("cc, first", [((7, 5), "fp16"), ((8, 0), "bf16"), ((9, 0), "bf16"), ((12, 0), "bf16")])
def test_the_roof_uses_fp16_before_ampere_and_says_why(cc, first, fake_gpu):
    precision_name, why = measuring.tensor_precision(cc)
    assert precision_name == first
    assert ("no bf16 tensor cores" in why) == (cc < (8, 0))
    fake_gpu(cc)
    assert measuring.roof_precisions()[0] == [first, "fp32"]


def test_ceilings_measure_only_the_requested_precision(fake_gpu, monkeypatch):
    from gpucourse.measure import ceilings as probe

    fake_gpu((7, 5))
    asked = []
    monkeypatch.setattr(probe, "copy_gbps", lambda: 250.0)
    monkeypatch.setattr(probe, "matmul_tflops", lambda dtype: asked.append(dtype) or 50.0)
    table = measuring.ceilings(("fp16",))
    assert asked == ["float16"] and list(table.quantity) == ["copy bandwidth", "fp16 matmul"]
    assert table.set_index("quantity").datasheet["fp16 matmul"] == 65.0  # the T4 datasheet row
    asked.clear()
    fig = measuring.roofline_figure()  # the default on a T4: fp16, and only fp16 is measured
    assert asked == ["float16"] and "fp16" in fig.layout.title.text
    asked.clear()
    measuring.ceilings()  # the recording's default: fp32 and this GPU's tensor format
    assert asked == ["float32", "float16"]
    with pytest.raises(InvalidConfig):
        measuring.ceilings(("fp64",))


def test_datasheet_rows_for_turing_ampere_and_ada():
    assert runtime.datasheet_tflops("Tesla T4") == {"fp32": 8.1, "fp16": 65.0}
    assert runtime.datasheet_tflops("NVIDIA A100-SXM4-80GB")["bf16"] == 312.0
    assert runtime.datasheet_tflops("NVIDIA A100-PCIE-40GB")["tf32"] == 156.0
    assert runtime.datasheet_tflops("NVIDIA L4")["bf16"] == 121.0
    assert runtime.datasheet_tflops("NVIDIA L40S") == {}  # not listed: no line rather than a guess
    for name in ("Tesla T4", "NVIDIA L4", "NVIDIA A100-SXM4-40GB"):
        sheet = runtime.datasheet_tflops(name)
        assert all(np.isfinite(v) and v >= sheet["fp32"] for v in sheet.values())
