"""GPU tier for the foundation: the harness, the ceilings, doctor, `make record`, lessons 00–01.

Run on a machine with an NVIDIA GPU: `pytest -m gpu`. Expectations are ratios measured in one run.
"""

import json

import numpy as np
import pytest
from gpu_expectations import expect

from gpucourse.measure import harness, recording, reference, runtime

pytestmark = pytest.mark.gpu


def test_banner_and_device_facts_come_from_the_driver():
    info = runtime.device()
    assert not info.simulated and info.sm_count and info.memory_bytes and info.l2_bytes
    assert repr(runtime.banner()).startswith(f"GPU mode · {info.name}")


@pytest.fixture(scope="module")
def spin_times():
    """A dependent FMA chain at 20,000 and 80,000 iterations, measured once for the tests below."""
    from numba import cuda

    from gpucourse.lessons.measuring import _spin_kernel

    spin = _spin_kernel()
    out = cuda.device_array(132 * 128, dtype=np.float32)
    short = harness.measure(lambda: spin[132, 128](out, 20_000), label="short")
    long = harness.measure(lambda: spin[132, 128](out, 80_000), label="long")
    return short, long


def test_the_measurement_contract_holds(spin_times):
    short, _ = spin_times
    # the contract in force: 0.5 s of GPU time, or 0.1 s in a quick report (an H200's quick tier: 100.5 ms),
    # or MAX_SAMPLES samples of a short kernel's batch, whichever comes first
    assert short.measured and short.n_samples >= 10
    assert short.total_ms >= harness.contract().min_total_ms or short.n_samples >= harness.MAX_SAMPLES
    assert short.provenance["device"] == runtime.device().name


def test_event_timing_tracks_four_times_the_work_at_least(spin_times, record_property):
    short, long = spin_times
    ratio = long.median_ms / short.median_ms  # 4× the work, one run
    record_property("ratio", round(ratio, 4))
    assert expect("events.four_times_work.min") <= ratio


def test_event_timing_tracks_four_times_the_work_at_most(spin_times, record_property):
    short, long = spin_times
    ratio = long.median_ms / short.median_ms
    record_property("ratio", round(ratio, 4))
    assert ratio <= expect("events.four_times_work.max")


def test_the_launch_alone_is_far_faster_than_the_kernel():
    from gpucourse.lessons import measuring

    data = measuring.async_pitfall()  # ~11 ms of fp32 work on an H200
    medians = data.groupby("method").ms.median()
    assert medians["wall clock, launch only"] * expect("async.sync_over_launch") < medians["wall clock + synchronize"]


def test_short_kernels_are_batched():
    from numba import cuda

    @cuda.jit
    def nothing(x):
        pass

    x = cuda.device_array(1, dtype=np.float32)
    m = harness.measure(lambda: nothing[1, 32](x), label="empty kernel")
    assert m.launches_per_sample > 1 and m.median_ms < expect("launch.empty_kernel_ms")


def test_a_wrong_kernel_is_never_timed():
    from gpucourse.errors import WrongResult

    with pytest.raises(WrongResult):
        harness.measure(lambda: None, check=lambda: False)


@pytest.fixture(scope="module")
def copy_over_sheet():
    from gpucourse.measure import ceilings

    sheet = runtime.device().datasheet_bandwidth_gbps
    if not sheet:
        pytest.skip(f"no cited datasheet bandwidth for {runtime.device().name} (runtime.DATASHEETS)")
    return ceilings.measure_copy_gbps(256 * 2**20) / sheet


def test_copy_ceiling_reaches_most_of_the_datasheet(copy_over_sheet, record_property):
    record_property("ratio", round(copy_over_sheet, 4))
    assert copy_over_sheet >= expect("ceiling.copy_over_datasheet.min")


def test_copy_ceiling_stays_below_the_datasheet(copy_over_sheet, record_property):
    record_property("ratio", round(copy_over_sheet, 4))
    assert copy_over_sheet <= expect("ceiling.copy_over_datasheet.max")


@pytest.fixture(scope="module")
def staircase():
    from gpucourse.lessons import warps

    return warps.measure_staircase([32, 33, 64, 65]).set_index("threads_per_block").median_ms


def test_staircase_33_threads_cost_what_64_do(staircase):
    assert staircase[33] / staircase[64] >= expect("staircase.33_over_64")  # 2 warps either way


def test_staircase_the_33rd_thread_costs_a_whole_warp(staircase):
    assert staircase[33] / staircase[32] >= expect("staircase.33_over_32")  # the 33rd thread costs a whole warp


def test_doctor_passes_on_a_healthy_gpu():
    import importlib.util

    from gpucourse.tooling.doctor import JUPYTER, run_doctor

    headless = any(importlib.util.find_spec(m) is None for m in JUPYTER)  # a validation host (C3)
    lines = []
    assert run_doctor(lines.append, headless=headless) == 0, "\n".join(lines)
    assert any("[ok  ] copy bandwidth" in line for line in lines)
    assert any("[ok  ] a kernel runs" in line for line in lines)


def test_record_writes_provenance_for_the_foundation_sweeps(tmp_path):
    written = recording.record(["warps.staircase", "measuring.async_pitfall"], root=tmp_path)
    assert len(written) == 2
    meta = json.loads((written[0].parent / "provenance.json").read_text())
    for key in harness.REQUIRED_PROVENANCE:  # the keys a contributed recording must carry (C1: not old names)
        assert meta["device"][key] not in (None, "", {}), key
    assert meta["device"]["contract"] == harness.contract().name
    rec = reference.load("warps.staircase", root=tmp_path)
    if harness.contract().name == "quick":  # inside a quick report: kept in quick/, drawn with its contract named
        assert written[0].parent.name == "quick" and rec.quick and "quick contract" in rec.caption()
    data = rec.data
    assert data.median_ms.gt(0).all() and data.timing_method.notna().all()


def test_an_illegal_address_is_one_plain_sentence():
    import subprocess
    import sys

    code = (
        "import gpucourse, numpy as np\n"
        "from numba import cuda\n"
        "from gpucourse.measure.harness import gpu_errors\n"
        "@cuda.jit\n"
        "def bad(x):\n"
        "    x[10**9] = 1\n"
        "x = cuda.device_array(4, dtype=np.float32)\n"
        "try:\n"
        "    with gpu_errors('bad kernel'):\n"
        "        bad[1, 1](x); cuda.synchronize()\n"
        "except gpucourse.errors.GPUError as e:\n"
        "    print('GPUError:', e)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "GPUError: bad kernel read or wrote outside its arrays" in done.stdout, done.stderr[-2000:]
