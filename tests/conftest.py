import os

import pytest

os.environ.setdefault("PLOTLY_RENDERER", "json")

from gpucourse.measure import runtime  # noqa: E402  (decides the mode before numba is imported)


def pytest_collection_modifyitems(config, items):
    if runtime.is_gpu():
        return
    skip = pytest.mark.skip(reason=f"needs an NVIDIA GPU ({runtime.SIM_REASON}); run `pytest -m gpu` on a GPU machine")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
