"""gpu-report's pytest plugin (``-p gpucourse.tooling.tierplugin``): one row per GPU test in the tier's
``expectations.json``: lesson, claim, outcome, seconds, every passing assert with its values (``checked``), the
``ratio`` and ``threshold`` a test records, and **every** ``record_property`` it records (``properties``: a matmul
ladder, a best rung's fraction of cuBLAS, a bf16/fp32 rate …), made JSON-safe, so that a recording keeps what the
tier computed (gpu-recordings review §4)."""

from __future__ import annotations

import json
import math
import numbers
from pathlib import Path


def json_safe(value, depth: int = 0):
    """A recorded property as JSON can hold it: numbers (NaN and infinities as text), strings, lists and dicts
    of them; NumPy scalars and arrays, tuples and sets become numbers and lists; anything else its text."""
    if depth > 6:
        return str(value)
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        value = float(value)
        return value if math.isfinite(value) else str(value)
    if hasattr(value, "tolist") and callable(value.tolist):  # NumPy arrays and scalars
        return json_safe(value.tolist(), depth + 1)
    if hasattr(value, "to_dict") and callable(value.to_dict):  # a pandas Series or frame
        return json_safe(value.to_dict(), depth + 1)
    if isinstance(value, dict):
        return {str(k): json_safe(v, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [json_safe(v, depth + 1) for v in value]
    return str(value)


def pytest_addoption(parser):
    parser.addoption("--gpureport-json", default=None, help="write the GPU tier's expectations here")


_ROWS: dict[str, dict] = {}  # the plugin's expectations, by test id (one pytest run per process)
_PATH: list[str] = []  # where the plugin writes them (after every test: a killed tier keeps what ran)


def pytest_configure(config):
    _ROWS.clear()
    _PATH[:] = [p for p in [config.getoption("--gpureport-json", default=None)] if p]


def _claim(item) -> tuple[str, str]:
    module_doc = (getattr(item.module, "__doc__", None) or "").strip()
    lesson = module_doc.split(":", 1)[0].splitlines()[0] if module_doc else item.module.__name__
    doc = (getattr(item.function, "__doc__", None) or "").strip()
    claim = doc.splitlines()[0] if doc else item.name.removeprefix("test_").replace("_", " ")
    return lesson, claim


def pytest_collection_modifyitems(session, config, items):
    for item in items:
        if "gpu" in item.keywords:
            lesson, claim = _claim(item)
            _ROWS[item.nodeid] = {"test": item.nodeid, "lesson": lesson, "claim": claim,
                                  "outcome": "not run", "ratio": None, "threshold": None, "properties": {},
                                  "checked": [], "message": "", "seconds": None}


def pytest_deselected(items):
    for item in items:
        if item.nodeid in _ROWS:
            _ROWS[item.nodeid]["message"] = "deselected (slow GPU tests are not part of a quick report)"


def pytest_collectreport(report):
    if report.failed:  # a module that did not import: its tests are missing, so it gets a row of its own
        text = str(report.longrepr)
        last = [line for line in text.splitlines() if line.startswith("E ")] or text.splitlines()[-1:]
        _ROWS[report.nodeid] = {"test": report.nodeid, "lesson": report.nodeid, "claim": "(the module's tests)",
                                "outcome": "collection error", "ratio": None, "threshold": None, "properties": {},
                                "checked": [], "message": " ".join(" ".join(last[-1:]).split())[:300], "seconds": None}
        _write_rows()


def pytest_assertion_pass(item, lineno, orig, expl):
    """Each passing assert of a GPU test with its values, e.g. "1234 <= (0.35 * 3500)": the measured
    side and the threshold (pytest calls this with ``-o enable_assertion_pass_hook=true``)."""
    row = _ROWS.get(item.nodeid)
    if row is not None:
        row["checked"].append(" ".join(expl.splitlines()[0].split())[:200])


def pytest_runtest_logreport(report):
    row = _ROWS.get(report.nodeid)
    if row is None:
        return
    properties = {str(name): json_safe(value) for name, value in report.user_properties}
    row.setdefault("properties", {}).update(properties)
    row["ratio"] = properties.get("ratio", row["ratio"])
    row["threshold"] = properties.get("threshold", row["threshold"])
    row["seconds"] = round((row["seconds"] or 0.0) + report.duration, 2)
    if report.when == "call" or report.outcome != "passed":
        row["outcome"] = report.outcome
        if report.outcome != "passed" and report.longrepr is not None:
            text = str(getattr(report.longrepr, "reprcrash", None) and report.longrepr.reprcrash.message
                       or report.longrepr)
            row["message"] = " ".join(text.split())[:300]
    if report.when == "teardown":
        _write_rows()


def pytest_sessionfinish(session):
    _write_rows()


def _write_rows() -> None:
    if _PATH:
        Path(_PATH[0]).write_text(json.dumps(list(_ROWS.values()), indent=1, default=str))
