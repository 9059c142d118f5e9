"""measure.torch_precision: the fp32_precision API where torch has it, the legacy TF32 switches
otherwise; the public scaled_mm where torch has it, torch._scaled_mm otherwise; and no legacy name
anywhere else in the package or lesson 07."""

import re
import types
from pathlib import Path

import pytest

from gpucourse.measure import torch_precision

ROOT = Path(__file__).resolve().parents[1]
LEGACY = re.compile(r"allow_tf32|set_float32_matmul_precision|get_float32_matmul_precision|torch\._scaled_mm\(")


class _Matmul:
    def __init__(self, new_api: bool):
        if new_api:
            self.fp32_precision = "none"
        else:
            self.allow_tf32 = False


def _fake_torch(new_api: bool, public_scaled_mm: bool = False):
    calls = []
    fake = types.SimpleNamespace(backends=types.SimpleNamespace(cuda=types.SimpleNamespace(matmul=_Matmul(new_api))))
    fake.precision = "highest"
    fake.set_float32_matmul_precision = lambda p: (calls.append(("set_precision", p)), setattr(fake, "precision", p))
    fake.get_float32_matmul_precision = lambda: fake.precision
    fake._scaled_mm = lambda *a, **k: calls.append(("_scaled_mm", a, k)) or "private"
    functional = types.SimpleNamespace()
    if public_scaled_mm:
        functional.ScalingType = types.SimpleNamespace(TensorWise="tensorwise")
        functional.scaled_mm = lambda *a, **k: calls.append(("scaled_mm", a, k)) or "public"
    fake.nn = types.SimpleNamespace(functional=functional)
    return fake, calls


def test_new_api_chosen_when_present():
    fake, calls = _fake_torch(new_api=True)
    assert torch_precision.has_fp32_precision(fake)
    torch_precision.set_matmul_tf32(fake, True)
    assert fake.backends.cuda.matmul.fp32_precision == "tf32" and torch_precision.get_matmul_tf32(fake)
    torch_precision.set_matmul_tf32(fake, False)
    assert fake.backends.cuda.matmul.fp32_precision == "ieee"
    assert not hasattr(fake.backends.cuda.matmul, "allow_tf32") and calls == []


def test_legacy_switch_when_fp32_precision_absent():
    fake, calls = _fake_torch(new_api=False)
    assert not torch_precision.has_fp32_precision(fake)
    torch_precision.set_matmul_tf32(fake, True)
    assert fake.backends.cuda.matmul.allow_tf32 is True and fake.precision == "high"
    assert not hasattr(fake.backends.cuda.matmul, "fp32_precision")
    torch_precision.set_matmul_tf32(fake, False)
    assert fake.backends.cuda.matmul.allow_tf32 is False and fake.precision == "highest"


@pytest.mark.parametrize("new_api", [True, False])
def test_context_restores_what_was_there(monkeypatch, new_api):
    fake, _ = _fake_torch(new_api)
    monkeypatch.setitem(__import__("sys").modules, "torch", fake)
    matmul = fake.backends.cuda.matmul
    before = matmul.fp32_precision if new_api else (matmul.allow_tf32, fake.precision)
    with torch_precision.matmul_tf32(True):
        assert torch_precision.get_matmul_tf32(fake)
    after = matmul.fp32_precision if new_api else (matmul.allow_tf32, fake.precision)
    assert after == before  # "none" stays "none", not "ieee"


def test_scaled_mm_public_when_present_private_otherwise():
    fake, calls = _fake_torch(new_api=True, public_scaled_mm=True)
    assert torch_precision.scaled_mm(fake, "a", "b", 1, 2, "bf16") == "public"
    assert calls[0][0] == "scaled_mm" and calls[0][1] == ("a", "b", 1, "tensorwise", 2, "tensorwise")
    assert torch_precision.scaled_mm_name(fake) == "torch.nn.functional.scaled_mm"
    fake, calls = _fake_torch(new_api=True, public_scaled_mm=False)
    assert torch_precision.scaled_mm(fake, "a", "b", 1, 2, "bf16") == "private"
    assert calls[0][0] == "_scaled_mm" and torch_precision.has_scaled_mm(fake)


def _legacy_uses(paths):
    found = []
    for path in paths:
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if LEGACY.search(line):
                found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    return found


def test_no_legacy_tf32_or_private_scaled_mm_outside_the_shim():
    shim = ROOT / "gpucourse" / "measure" / "torch_precision.py"
    paths = [p for p in (ROOT / "gpucourse").rglob("*.py") if p != shim]
    paths += [ROOT / "notebooks" / "07_precision.py", ROOT / "instructor" / "07_precision.md"]
    paths += sorted((ROOT / "solutions" / "lab07_precision").rglob("*.py"))
    assert _legacy_uses(paths) == []


def test_the_grep_catches_a_legacy_call(tmp_path):  # the check above can fail
    bad = tmp_path / "bad.py"
    bad.write_text("import torch\ntorch.backends.cuda.matmul.allow_tf32 = True\ntorch._scaled_mm(a, b)\n")
    global ROOT
    old, ROOT = ROOT, tmp_path
    try:
        assert len(_legacy_uses([bad])) == 2
    finally:
        ROOT = old


def test_real_torch_round_trip():
    torch = pytest.importorskip("torch")
    before = torch_precision.get_matmul_tf32(torch)
    with torch_precision.matmul_tf32(not before):
        assert torch_precision.get_matmul_tf32(torch) is (not before)
    assert torch_precision.get_matmul_tf32(torch) is before
