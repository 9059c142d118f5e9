"""Resource usage without a GPU: PTX from numba-cuda in a child process, ptxas -v, the cache, "unknown"."""

import subprocess
import time

import pytest

from gpucourse.errors import InvalidConfig
from gpucourse.lessons import occupancy as ol
from gpucourse.measure import ptxinfo

SAMPLE = """ptxas info    : 8 bytes gmem
ptxas info    : Compiling entry function '_ZN8__main__6hungry' for 'sm_90'
ptxas info    : Function properties for _ZN8__main__6hungry
    704 bytes stack frame, 2228 bytes spill stores, 1644 bytes spill loads
ptxas info    : Used 32 registers, used 1 barriers, 4096 bytes smem, 704 bytes cumulative stack size
ptxas info    : Compile time = 112.217 ms
"""


def test_parse_ptxas_reads_the_entry_function():
    report = ptxinfo.parse_ptxas(SAMPLE)
    assert report["registers"] == 32 and report["barriers"] == 1 and report["shared_bytes"] == 4096
    spills = (report["stack_frame_bytes"], report["spill_store_bytes"], report["spill_load_bytes"])
    assert spills == (704, 2228, 1644)
    assert report["note"] == ""


def test_parse_ptxas_notes_a_raised_register_cap():
    warning = "ptxas warning : For profile sm_90 adjusting per thread register count of 16 to lower bound of 24"  # noqa: E501
    text = warning + "\n" + SAMPLE
    assert "24" in ptxinfo.parse_ptxas(text)["note"]


def test_parse_ptxas_without_an_entry_raises():
    with pytest.raises(ValueError):
        ptxinfo.parse_ptxas("ptxas fatal : Unresolved extern function")


@pytest.mark.parametrize("bad", [256, -1, "32", 3.0, True])
def test_bad_register_cap_raises(bad):
    with pytest.raises(InvalidConfig, match="max_registers"):
        ptxinfo.resource_usage(ol.copy_kernel, ol.KERNELS["copy"].signature, (9, 0), bad, use_gpu=False)


def test_no_ptxas_means_unknown_with_a_reason(monkeypatch, tmp_path):
    monkeypatch.setenv(ptxinfo.PTXAS_ENV, "none")
    monkeypatch.setattr(ptxinfo, "CACHE_DIR", tmp_path)
    u = ptxinfo.resource_usage(ol.copy_kernel, ol.KERNELS["copy"].signature, (9, 0), use_gpu=False)
    assert not u.known and u.registers is None and u.source == "unknown"
    assert "ptxas" in u.reason and "type" in u.reason
    assert "unknown" in u.summary()
    table = ol.usage_table(cc=(9, 0))
    assert set(table.registers) == {"unknown"}


def test_broken_ptxas_means_unknown(monkeypatch, tmp_path):
    monkeypatch.setenv(ptxinfo.PTXAS_ENV, "/bin/false")
    monkeypatch.setattr(ptxinfo, "CACHE_DIR", tmp_path)
    monkeypatch.setattr(ptxinfo, "compile_ptx", lambda kernels, cc: [{"ptx": "// not ptx", "seconds": 0.0}])
    u = ptxinfo.resource_usage(ol.copy_kernel, ol.KERNELS["copy"].signature, (9, 0), use_gpu=False)
    assert not u.known and "ptxas" in u.reason


def test_find_ptxas_locates_the_wheel_relative_to_the_prefix():
    candidates = [str(p) for p in ptxinfo._wheel_ptxas_candidates()]
    assert any(c.endswith("site-packages/nvidia/cu13/bin/ptxas") for c in candidates)


needs_ptxas = pytest.mark.skipif(ptxinfo.find_ptxas() is None, reason="no ptxas (no cuda-toolkit wheel)")


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    """The lesson's kernels compiled once (one child process) into a fresh cache; with timings."""
    cache = tmp_path_factory.mktemp("ptxinfo")
    saved = ptxinfo.CACHE_DIR
    ptxinfo.CACHE_DIR = cache
    real_run, processes = subprocess.run, []
    try:
        started = time.perf_counter()
        table = ol.usage_table(cc=(9, 0))
        cold_s = time.perf_counter() - started
        subprocess.run = lambda *args, **kwargs: processes.append(args) or real_run(*args, **kwargs)
        again = ol.usage_table(cc=(9, 0))
        yield {"table": table.set_index("kernel"), "again": again, "cold_s": cold_s, "warm_processes": processes}
    finally:
        subprocess.run = real_run
        ptxinfo.CACHE_DIR = saved


@needs_ptxas
def test_lesson_kernels_resources_from_ptxas(compiled):
    t = compiled["table"]
    assert all(isinstance(r, int) for r in t.registers), t
    assert 0 < t.registers["copy"] <= 32
    # 48 live accumulators cannot fit in fewer than 48 registers (without spilling).
    assert t.registers["accumulators"] >= 48
    assert t.static_shared_bytes["block_sum"] == 4096  # cuda.shared.array(1024, float32)
    assert t.static_shared_bytes["copy"] == 0
    assert all("ptxas" in s and "sm_90" in s for s in t.source)


@needs_ptxas
def test_cache_makes_the_second_call_fast(compiled):
    # counted, not timed: the second call starts no process (no compiler child, no ptxas)
    assert compiled["warm_processes"] == []
    assert list(compiled["again"].seconds) == [0.0] * len(compiled["again"])
    print(f"cold compile of {len(compiled['table'])} kernels + ptxas: {compiled['cold_s']:.2f} s")


@needs_ptxas
def test_max_registers_caps_through_ptxas_and_causes_spills(compiled):
    capped = ol.usage("accumulators", max_registers=32, cc=(9, 0))
    assert capped.known and capped.registers <= 32
    assert capped.spills and capped.spill_store_bytes > 0
    assert "--maxrregcount=32" in capped.source
    free = ol.usage("accumulators", cc=(9, 0))
    assert free.registers > capped.registers and not free.spills
    # A cap the kernel is already under changes nothing.
    assert ol.usage("copy", max_registers=128, cc=(9, 0)).registers == compiled["table"].registers["copy"]


@needs_ptxas
def test_cap_below_the_hardware_floor_is_explained(compiled):
    # ptxas for sm_90 will not go below 24 registers: a cap of 16 is raised to 24 (and says so).
    low = ol.usage("copy", max_registers=16, cc=(9, 0))
    assert low.known and low.registers == compiled["table"].registers["copy"]
    assert "lowest" in low.note and "24" in low.note


@needs_ptxas
def test_a_notebook_kernel_compiles_from_its_source(tmp_path, monkeypatch):
    monkeypatch.setattr(ptxinfo, "CACHE_DIR", tmp_path)
    cuda = ol.kernels.cuda

    @cuda.jit
    def scale(out, x):
        i = cuda.grid(1)
        if i < x.size:
            out[i] = 2 * x[i]

    u = ptxinfo.resource_usage(scale, "void(float32[::1], float32[::1])", (8, 0), use_gpu=False)
    assert u.known and u.registers > 0 and "sm_80" in u.source


@needs_ptxas
def test_a_kernel_that_does_not_compile_is_unknown(tmp_path, monkeypatch):
    monkeypatch.setattr(ptxinfo, "CACHE_DIR", tmp_path)
    cuda = ol.kernels.cuda

    @cuda.jit
    def broken(out):
        out[0] = undefined_name  # noqa: F821

    u = ptxinfo.resource_usage(broken, "void(float32[::1])", (9, 0), use_gpu=False)
    assert not u.known and "could not compile" in u.reason


def test_cached_ptx_is_keyed_by_the_compiler_that_made_it(monkeypatch):
    # PTX that a newer libNVVM wrote (".version 9.5") cannot be read by an older ptxas: a machine whose
    # toolkit changed must compile again, not reuse the cache.
    from importlib import metadata

    real_version = metadata.version
    before = ptxinfo._compiler_versions()
    monkeypatch.setattr(metadata, "version",
                        lambda name: "99.0" if name == "nvidia-nvvm" else real_version(name))
    assert ptxinfo._compiler_versions() != before and "nvidia-nvvm 99.0" in ptxinfo._compiler_versions()


@needs_ptxas
def test_gpu_mode_fills_spills_from_ptxas_on_the_devices_ptx(monkeypatch):
    """G20: on a GPU the driver reports registers but no spills; ptxas on the kernel's PTX for the device's
    cc fills them. Faked in-process: the "compiled kernel" hands back the PTX the simulator-mode path makes
    (cc 7.5, to show that the device's cc is used, not sm_90), and the driver attributes are stand-ins."""
    from types import SimpleNamespace

    k = ol.KERNELS["accumulators"]
    ptx = ptxinfo.compile_ptx([(k.kernel, k.signature)], (7, 5))[0]["ptx"]
    asked = []

    class Compiled:
        regs_per_thread, shared_mem_per_block, local_mem_per_thread = 40, 0, 0

        def inspect_asm(self, cc):
            asked.append(cc)
            return ptx

    monkeypatch.setattr(ptxinfo, "gpu_kernel", lambda kernel, signature, cap=None: (None, Compiled()))
    monkeypatch.setattr(ptxinfo.runtime, "device",
                        lambda: SimpleNamespace(compute_capability=(7, 5), name="stand-in T4"))
    capped = ptxinfo.resource_usage(k.kernel, k.signature, max_registers=32, use_gpu=True)
    assert asked == [(7, 5)]
    assert capped.spill_store_bytes > 0 and capped.spills, capped
    assert "sm_75" in capped.source and "--maxrregcount=32" in capped.source
    assert capped.registers == 40  # the driver's number stays the registers: ptxas only adds the spills
    free = ptxinfo.resource_usage(k.kernel, k.signature, use_gpu=True)
    assert free.spill_store_bytes == 0 and not free.spills
    # without ptxas the spills stay unknown, and the usage says why (never a made-up 0)
    monkeypatch.setattr(ptxinfo, "find_ptxas", lambda: None)
    blind = ptxinfo.resource_usage(k.kernel, k.signature, use_gpu=True)
    assert blind.spill_store_bytes is None and "ptxas was not found" in blind.note
