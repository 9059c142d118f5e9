"""The Triton matmul of the tensor-core lesson: interpreted without a GPU (fp16/fp32 at odd shapes; bf16
refused, and the interpreter's bf16 bug kept reproduced), compiled without a GPU for sm_80/90/100 and read
as facts, and bad input refused before any launch. Triton has Linux wheels only: its tests skip elsewhere."""

import importlib.util
import os
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from gpucourse.errors import InvalidConfig
from gpucourse.lessons import tensorcores
from gpucourse.lessons.tensorcores import compiled, experiments, kernels, model

HAS_TRITON = importlib.util.find_spec("triton") is not None
HAS_TORCH = importlib.util.find_spec("torch") is not None
needs_triton = pytest.mark.skipif(not HAS_TRITON, reason="Triton ships Linux wheels only (none on macOS/Windows)")
needs_interpreter = pytest.mark.skipif(not (HAS_TRITON and HAS_TORCH),
                                       reason="Triton's interpreter needs Triton (Linux wheels only) and PyTorch")


def _reference(a, b):
    return a.astype(np.float64) @ b.astype(np.float64)


@pytest.fixture
def no_launch(monkeypatch):
    """Any launch fails the test: checks must refuse before it."""
    def launched(*args, **kwargs):
        raise AssertionError("the kernel was launched")
    monkeypatch.setattr(experiments, "_interpret", launched)


# --- the interpreter ------------------------------------------------------------------------------------

@needs_interpreter
@pytest.mark.parametrize("dtype", [np.float16, np.float32])
@pytest.mark.parametrize(("m", "n", "k"), [(45, 70, 37), (1, 1, 1), (64, 32, 96)])
def test_the_interpreted_kernel_equals_numpy(dtype, m, n, k):
    # 45×37 @ 37×70 is no multiple of the 32×32×32 tiles: the masks cover the ragged edges
    rng = np.random.default_rng(m + n + k)
    a, b = rng.standard_normal((m, k)).astype(dtype), rng.standard_normal((k, n)).astype(dtype)
    c = tensorcores.run_interpreted(a, b)
    assert c.dtype == np.float32 and c.shape == (m, n)
    # fp32 accumulation of exactly representable products: only the order of additions differs
    np.testing.assert_allclose(c, _reference(a, b), rtol=1e-5, atol=1e-4)


@needs_interpreter
def test_other_tiles_and_torch_tensors():
    import torch

    rng = np.random.default_rng(7)
    a, b = rng.standard_normal((50, 33)).astype(np.float16), rng.standard_normal((33, 20)).astype(np.float16)
    c = tensorcores.run_interpreted(torch.from_numpy(a), torch.from_numpy(b), block=(16, 16, 16))
    np.testing.assert_allclose(c, _reference(a, b), rtol=1e-5, atol=1e-4)


@needs_interpreter
def test_the_interpreter_still_computes_bf16_wrong():
    """Why bf16 is refused: Triton 3.7.1's interpreter returns garbage for bf16 tl.dot (errors ~1e10 where
    fp16 is exact). If this fails, a Triton fixed it: lift the refusal in model.check_operands."""
    import torch

    rng = np.random.default_rng(0)
    a = torch.from_numpy(rng.standard_normal((64, 32)).astype(np.float32)).to(torch.bfloat16)
    b = torch.from_numpy(rng.standard_normal((32, 48)).astype(np.float32)).to(torch.bfloat16)
    reference = a.double().numpy() @ b.double().numpy()  # the exact product of the bf16 values
    c = experiments._interpret(a, b, (32, 32, 32))  # straight past the checks
    error = np.nanmax(np.abs(c - reference)) if np.isfinite(c).any() else np.inf
    assert not error < 1.0, f"the interpreter now computes bf16 right (max error {error}): lift the refusal"
    fp16 = experiments._interpret(a.to(torch.float16), b.to(torch.float16), (32, 32, 32))
    assert np.abs(fp16 - a.to(torch.float16).double().numpy() @ b.to(torch.float16).double().numpy()).max() < 1e-3


@needs_interpreter
def test_bf16_is_refused_before_launch(no_launch):
    import torch

    a = torch.zeros((16, 16), dtype=torch.bfloat16)
    with pytest.raises(InvalidConfig, match="bfloat16 is refused in Triton's interpreter"):
        tensorcores.run_interpreted(a, a)


BAD = [
    (np.zeros(16, np.float16), np.zeros((16, 16), np.float16), "A must be a 2-D matrix"),
    (np.zeros((16, 16), np.float16), np.zeros((2, 16, 16), np.float16), "B must be a 2-D matrix"),
    (np.zeros((16, 24), np.float16), np.zeros((16, 16), np.float16), "A's columns must equal B's rows"),
    (np.zeros((16, 16), np.float64), np.zeros((16, 16), np.float64), "dtype must be one of float16, float32"),
    (np.zeros((16, 16), np.int32), np.zeros((16, 16), np.int32), "dtype must be one of"),
    (np.zeros((16, 16), np.float16), np.zeros((16, 16), np.float32), "the same dtype"),
    (np.zeros((0, 16), np.float16), np.zeros((16, 16), np.float16), "must not be empty"),
    (np.zeros((257, 16), np.float16), np.zeros((16, 16), np.float16), "≤ 256"),
    ([[1.0]], np.zeros((1, 1), np.float16), "2-D matrix"),
]


@pytest.mark.parametrize(("a", "b", "words"), BAD)
def test_bad_input_is_refused_before_launch(no_launch, a, b, words):
    with pytest.raises(InvalidConfig, match=re.escape(words)):
        tensorcores.run_interpreted(a, b)


@pytest.mark.parametrize("block", [(32, 32), (8, 32, 32), (32, 48, 32), (512, 32, 32), "abc"])
def test_bad_tiles_are_refused_before_launch(no_launch, block):
    a = np.zeros((16, 16), np.float16)
    with pytest.raises(InvalidConfig, match="block must be"):
        tensorcores.run_interpreted(a, a, block=block)


def test_without_triton_the_lesson_says_so(monkeypatch, no_launch):
    monkeypatch.setattr(kernels, "tl", None)
    experiments.interpreted_kernel.cache_clear()
    try:
        with pytest.raises(kernels.TritonMissing, match="Linux wheels only"):
            experiments.interpreted_kernel()
        with pytest.raises(kernels.TritonMissing, match="Linux wheels only"):
            compiled._compiled(80, "float16", (128, 128, 64), 4, 3)
    finally:
        experiments.interpreted_kernel.cache_clear()


def test_without_triton_installed_the_package_imports_and_says_so_in_one_line():
    code = textwrap.dedent("""
        import sys
        sys.modules["triton"] = None  # as on macOS/Windows: no Triton wheel
        import numpy as np
        from gpucourse.lessons import tensorcores
        print(tensorcores.matmul_kernel.__name__)
        for run in (lambda: tensorcores.run_interpreted(np.ones((4, 4), np.float16), np.ones((4, 4), np.float16)),
                    lambda: tensorcores.compile_for(90)):
            try:
                run()
            except tensorcores.TritonMissing as error:
                print("refused:", error)
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert lines[0] == "matmul_kernel" and len(lines) == 3, lines
    assert all(line.startswith("refused: Triton is not installed") for line in lines[1:]), lines


@needs_interpreter
def test_interpreting_leaves_the_compile_mode_alone():
    from triton import knobs

    before = os.environ.get("TRITON_INTERPRET")
    tensorcores.run_interpreted(np.ones((16, 16), np.float32), np.ones((16, 16), np.float32))
    assert os.environ.get("TRITON_INTERPRET") == before
    assert knobs.runtime.interpret == (before not in (None, "", "0", "false"))
    assert type(experiments.interpreted_kernel()).__name__ == "InterpretedFunction"


# --- compiled for three generations, read as facts ------------------------------------------------------

@pytest.fixture(scope="module", params=[80, 90, 100])
def facts(request):
    if not HAS_TRITON:
        pytest.skip("Triton ships Linux wheels only (none on macOS/Windows)")
    return compiled.compile_for(request.param)  # cached per process: a few seconds each, once


ONE_STAGE_BYTES = (128 * 64 + 64 * 128) * 2  # an fp16 A tile and B tile of the 128×128×64 compile


@needs_triton
def test_each_generation_uses_its_own_tensor_core_instructions(facts):
    expected = model.GENERATIONS[facts.cc]
    for name in expected.ptx:
        assert facts.ptx.get(name, 0) > 0, (name, facts.summary())
    for name in expected.sass:
        assert facts.sass.get(name, 0) > 0, (name, facts.summary())
    others = [g for cc, g in model.GENERATIONS.items() if cc != facts.cc]
    for other in others:  # and not another generation's
        for name in other.sass:
            assert name not in facts.sass, (name, facts.summary())
    assert ("mma.sync" in facts.ptx) == (facts.cc == 80)
    assert ("wgmma.mma_async" in facts.ptx) == (facts.cc == 90)
    assert ("tcgen05.mma" in facts.ptx) == (facts.cc == 100)
    assert facts.mma_opcodes and all(op.split(".")[0] in expected.sass for op in facts.mma_opcodes)
    assert 0 < facts.registers <= 255
    assert facts.shared_bytes >= ONE_STAGE_BYTES  # at least one stage of A and B tiles
    assert facts.generation == expected.name and facts.triton_version


@needs_triton
def test_what_each_generation_adds(facts):
    if facts.cc == 80:  # a warp's mma.sync on register fragments, loaded by ldmatrix; m16n8k16 in SASS
        assert facts.sass["LDSM"] > 0 and "HMMA.16816.F32" in facts.mma_opcodes
        assert facts.ptx.get("cp.async", 0) > 0  # Ampere's async copy feeds the stages
    if facts.cc == 100:  # the accumulator lives in tensor memory, completion through an mbarrier
        assert facts.tmem_columns > 0 and facts.ptx["tcgen05.ld"] > 0 and facts.ptx["mbarrier"] > 0
    else:
        assert facts.tmem_columns == 0 and "tcgen05.ld" not in facts.ptx


@needs_triton
def test_fp32_becomes_tf32_on_the_tensor_cores():
    # the interpreter computes fp32 in fp32; a GPU's tl.dot default is TF32: mma.m16n8k8 .tf32 (the microscope's
    # m16n8k8 tf32 fragments) on sm_80
    facts = compiled.compile_for(80, "float32")
    assert facts.mma_opcodes == ("HMMA.1688.F32.TF32",)


@needs_triton
def test_the_generations_table():
    table = tensorcores.generations_table()
    assert list(table["GPU"]) == [g.name for g in model.GENERATIONS.values()]
    assert table["PTX"].str.contains("mma.sync").tolist() == [True, False, False]
    assert table["SASS"].str.contains("UTCHMMA").tolist() == [False, False, True]


@pytest.mark.parametrize(("kwargs", "words"), [
    ({"cc": 75}, "cc must be one of 80, 90, 100"),
    ({"cc": "sm_89"}, "cc must be one of"),
    ({"cc": 90, "dtype": "float64"}, "dtype must be one of float16, bfloat16, float32"),
    ({"cc": 90, "tile": (128, 128)}, "block must be"),
    ({"cc": 90, "num_warps": 3}, "num_warps"),
])
def test_bad_compile_requests_are_refused(kwargs, words):
    with pytest.raises(InvalidConfig, match=re.escape(words)):
        tensorcores.compile_for(**kwargs)


def test_cc_spellings():
    assert compiled.check_cc("sm_90a") == compiled.check_cc((9, 0)) == compiled.check_cc(90) == 90


def test_ptx_and_sass_are_counted_by_their_longest_name():
    ptx = """
        cp.async.cg.shared.global [ %r1 + 0 ], [ %rd2 + 0 ], 0x10, %r3;
        cp.async.commit_group;
        @%p1 cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%r4], [%rd5], [%r8];
        mbarrier.try_wait.parity.shared::cta.b64 %p2, [%r9], %r10;
        mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%f1, %f2, %f3, %f4}, {%r1, %r2, %r3, %r4}, {%r5, %r6}, {%f1};
        // mma.sync in a comment is no instruction
    """
    assert compiled.ptx_counts(ptx) == {"mma.sync": 1, "cp.async": 1, "cp.async.commit_group": 1,
                                        "cp.async.bulk.tensor": 1, "mbarrier": 1}
    sass = ("        /*0a50*/                   HMMA.16816.F32 R4, R20, R24, R4 ;   /* 0x... */\n"
            "        /*0a60*/              @!P0 LDGSTS.E.BYPASS.128 [R5], desc[UR4][R2.64] ;\n"
            "        /*0a70*/                   UTCHMMA gdesc[UR4], gdesc[UR6], tmem[UR8], idesc[UR9], UPT ;\n")
    assert compiled.sass_opcodes(sass) == ["HMMA.16816.F32", "LDGSTS.E.BYPASS.128", "UTCHMMA"]
