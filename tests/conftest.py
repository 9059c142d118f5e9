import gc
import os
import sys
from pathlib import Path

import pytest

os.environ.setdefault("PLOTLY_RENDERER", "json")

from gpucourse.measure import runtime  # noqa: E402  (decides the mode before numba is imported)

# The repository the imported gpucourse lives in (this file may be a copy elsewhere: tests/test_gpureport.py),
# found as gpureport finds it: not tooling.build's ROOT (it imports jupytext, which a site's bare stack running
# the GPU tier lacks), nor gpureport's own (importing gpureport imports numba.cuda: about 1 s of CPU in every
# pytest start-up, which the mutation pass makes over a hundred times; issue 50).
ROOT = Path(runtime.__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
import suite_times  # noqa: E402


def pytest_configure(config):
    # the run's wall time and slowest tests, printed at its end and kept in build/test-times.json
    # (issue 50); on xdist's controller only, which receives every worker's reports
    if not hasattr(config, "workerinput"):
        config.pluginmanager.register(suite_times.SuiteTimes(config), "suite_times")


def pytest_collection_finish(session):
    # what the collection made (every test module and what it imported, every test item) lives until the run
    # ends: frozen, the collector's full passes during the tests need not walk it again (issue 50: about 12 %
    # less CPU on in-process unit tests). Objects the tests make are collected as before
    # (tests/test_suite_speed.py).
    gc.freeze()


@pytest.fixture(scope="session", autouse=True)
def _one_generated_course_a_run(tmp_path_factory):
    """The lab tests' generated course (labtools.course_copy) is made once a run: in the run's temporary folder,
    which xdist's workers share (each one's own is a folder of it)."""
    labtools = sys.modules.get("labtools")
    if labtools is not None:
        base = tmp_path_factory.getbasetemp()
        labtools.RUN_FOLDER = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):
    """xdist's controller reads the tests' latest times once and hands them to every worker: both order
    their collection alike (xdist stops a run whose workers collected in different orders) even if the
    file changes while they start."""
    node.workerinput["suite_durations"] = suite_times.recorded_seconds(node.config.rootpath)


@pytest.fixture(scope="session")
def gpu_report_rehearsal(tmp_path_factory):
    """`make gpu-report REHEARSAL=1` once per run (about two minutes of CPU): its report is what
    tests/test_gpureport.py reads, and its `make record` step, inside the same rehearsal, is what
    tests/test_rehearsal.py reads. Both modules are the xdist group "rehearsal", so one worker makes it."""
    from gpucourse.tooling import gpureport

    return gpureport.build(tmp_path_factory.mktemp("gpu-report"), practice=True)


@pytest.fixture(scope="session", autouse=True)
def fresh_ceilings():
    """On a GPU every ceiling a test compares with is measured once per session (or handed on by the
    gpu-report that runs the tier: ceilings.HANDED_ON_ENV), never read from another day's cache."""
    if not runtime.is_gpu():
        yield
        return
    from gpucourse.measure import ceilings

    with ceilings.fresh():
        yield


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    # `make gpu-report` collects only the files that say so (gpureport.gpu_test_files): each file read once
    gpu_files = {item.path for item in items if item.get_closest_marker("gpu")}
    if gpu_files:
        from gpucourse.tooling.gpureport import GPU_MARK
    for path in gpu_files:
        if GPU_MARK not in path.read_text(encoding="utf-8"):
            raise pytest.UsageError(f"{path.name} holds a GPU test but not `{GPU_MARK}`: mark it there "
                                    "(pytestmark or a decorator) so that `make gpu-report` finds it")
    if not runtime.is_gpu():
        skip = pytest.mark.skip(
            reason=f"needs an NVIDIA GPU ({runtime.SIM_REASON}); run `pytest -m gpu` on a GPU machine")
        for item in items:
            if "gpu" in item.keywords:
                item.add_marker(skip)
    for item in items:
        # Tests that share a module-scoped fixture of their own module (the website build, a graded
        # batch, a rehearsal) form one xdist group, so the fixture is made once per run, not per worker.
        module = item.getparent(pytest.Module)
        if module is not None and item.get_closest_marker("xdist_group") is None and any(
                d.scope == "module" and str(d.baseid) == module.nodeid
                for defs in item._fixtureinfo.name2fixturedefs.values() for d in defs):
            item.add_marker(pytest.mark.xdist_group(module.path.stem))
    if getattr(config.option, "loadgroup", False):  # set on xdist's workers by `--dist loadgroup`
        for item in items:
            _hold_group(item)
    # Longest first, so that no worker is left alone with a long test at the end (`make test` passes
    # --no-loadscope-reorder so xdist hands out work in this order): the slow tests, the groups that
    # share a fixture first among them, then the many quick ones; within each, by the seconds the last
    # run took (build/test-durations.json: a group by its tests' sum; a test it did not run goes first).
    # Otherwise the collection's order.
    workerinput = getattr(config, "workerinput", {})  # on xdist's workers: what the controller read (below)
    recorded = workerinput.get("suite_durations") or suite_times.recorded_seconds(config.rootpath)
    cost = _unit_seconds(items, recorded)
    items.sort(key=lambda item: ("slow" not in item.keywords, item.get_closest_marker("xdist_group") is None,
                                 -cost.get(_unit(item), float("inf"))))


def _unit(item) -> str:
    """What xdist hands out whole: the test's group, or the test itself."""
    groups = sorted(str(m.args[0] if m.args else m.kwargs.get("name", "default"))
                    for m in item.iter_markers("xdist_group"))
    return "@" + "_".join(groups) if groups else suite_times.plain_id(item.nodeid)


def _unit_seconds(items, recorded: dict[str, float]) -> dict[str, float]:
    """Each unit's seconds in the last run; a unit with a test that run did not time is left out."""
    cost: dict[str, float] = {}
    unknown = set()
    for item in items:
        unit, seconds = _unit(item), recorded.get(suite_times.plain_id(item.nodeid))
        if seconds is None:
            unknown.add(unit)
        else:
            cost[unit] = cost.get(unit, 0.0) + seconds
    return {unit: s for unit, s in cost.items() if unit not in unknown}


def _hold_group(item) -> None:
    """xdist's loadgroup puts tests whose node ids end in the same ``@group`` on one worker. xdist 3.8
    appends that suffix to ``item._nodeid``, which pytest 9.2's nodes no longer read (their id is
    ``item._id``): the groups silently fell apart and the website was built on both workers. Append
    it here for either pytest, and stop the run if it does not take."""
    names = {str(m.args[0] if m.args else m.kwargs.get("name", "default")) for m in item.iter_markers("xdist_group")}
    if not names:
        return
    suffix = "@" + "_".join(sorted(names))
    if item.nodeid.endswith(suffix):
        return
    wanted = item.nodeid + suffix
    if hasattr(item, "_id"):
        from _pytest.nodeid import NodeId

        item._id = NodeId.parse(wanted)
    else:
        item._nodeid = wanted
    if item.nodeid != wanted:
        raise pytest.UsageError(f"cannot put {item.nodeid} in its xdist group: this pytest names nodes differently")


@pytest.fixture
def no_recordings(tmp_path, monkeypatch):
    """An empty data/reference/: the lessons' charts as they are where the course holds no recording."""
    from gpucourse.measure import reference

    empty = tmp_path / "no-recordings"
    empty.mkdir()
    monkeypatch.setattr(reference, "REFERENCE_ROOT", empty)
    return empty
