"""IPython's hooks put back before a graded cell (grading/hooks.py) and the tamper scan's reading of them
(grading/scan.py): in this process, on a real InteractiveShell, with the hostile cells of labtools."""

from __future__ import annotations

import pytest
from labtools import IPYTHON_HOOKS

from gpucourse.tooling.grading import hooks
from gpucourse.tooling.grading.scan import scan_learner_code

# a test cell: it must fail when the answer is wrong, whatever an earlier cell installed
TEST_CELL = "answer = 41\nassert answer == 42, 'wrong'\ncheck(answer == 42)\n"


@pytest.fixture
def shell(monkeypatch):
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    monkeypatch.setattr(hooks, "_HOOKS", None)
    assert hooks.snapshot_hooks(shell)
    yield shell
    hooks.restore_hooks()


def _fails(shell) -> bool:
    shell.user_ns["check"] = lambda ok: None if ok else (_ for _ in ()).throw(AssertionError("hidden"))
    result = shell.run_cell(TEST_CELL)  # not silent: silent cells fire no pre_run_cell/post_run_cell
    return not result.success


@pytest.mark.parametrize("student", sorted(IPYTHON_HOOKS))
def test_a_hook_makes_a_wrong_test_cell_pass_until_the_restore(shell, student):
    assert _fails(shell), "the test cell must fail on its own"
    assert scan_learner_code(IPYTHON_HOOKS[student]) == ([], []), "only the restore can see these"
    assert shell.run_cell(IPYTHON_HOOKS[student], silent=True).success
    assert not _fails(shell), f"{student} should have made the test cell pass (else this test proves nothing)"
    changed = hooks.restore_hooks()
    assert {"hooks_ast": "ast_transformers", "hooks_input": "input_transformers_post",
            "hooks_events": "events.callbacks['pre_run_cell']"}[student] in changed, changed
    assert _fails(shell), f"after the restore the test cell must fail again ({student})"
    assert hooks.restore_hooks() == []  # nothing left to put back


def test_methods_replaced_on_the_instance_and_swapped_objects_are_put_back(shell):
    run_cell, pub, events = shell.run_cell, shell.display_pub, shell.events
    handler, caught = shell.CustomTB, shell.custom_exceptions
    shell.run_cell = lambda *args, **kwargs: None
    shell.transform_cell = lambda cell: "pass\n"
    shell.display_pub = object()
    shell.events = type(events)(shell, {"pre_run_cell": None})
    shell.input_transformer_manager.cleanup_transforms.insert(0, lambda lines: ["pass\n"])
    shell.set_custom_exc((AssertionError,), lambda *args, **kwargs: [])
    callbacks = events.callbacks  # the header's events object, whose table is put back too
    pre_run_cell = callbacks["pre_run_cell"]
    callbacks["pre_run_cell"] = [lambda info=None: None]  # a new list in the table
    changed = " ".join(hooks.restore_hooks())
    for name in ("run_cell", "transform_cell", "display_pub", "events", "CustomTB", "custom_exceptions"):
        assert name in changed, (name, changed)
    assert shell.run_cell.__func__ is run_cell.__func__ and "run_cell" not in vars(shell)
    assert shell.display_pub is pub and shell.events is events
    assert callbacks["pre_run_cell"] is pre_run_cell
    assert shell.CustomTB is handler and shell.custom_exceptions == caught
    assert _fails(shell)


def test_the_learners_own_rebinding_of_the_restorers_lists_does_not_fool_it(shell):
    # the reference copies are tuples in the module's private state: a learner who empties the list the
    # restorer would compare with still gets the header's transformers back
    saved = list(shell.ast_transformers)
    shell.ast_transformers = [object()]
    hooks.restore_hooks()
    assert list(shell.ast_transformers) == saved


def test_before_test_cell_answers_ready_and_names_what_it_put_back(shell):
    assert hooks.before_test_cell() == hooks.READY
    shell.events.register("pre_run_cell", lambda info: None)
    reply = hooks.before_test_cell()
    assert reply.startswith(hooks.READY + " hooks:"), reply
    assert eval(hooks.RESTORE_EXPRESSION, {"__builtins__": __builtins__}).startswith(hooks.READY)  # noqa: S307


SCANNED = [
    "get_ipython().ast_transformers.append(t)",
    "ip = get_ipython()\nip.ast_transformers.append(t)",
    "from IPython import get_ipython as g\ng().input_transformers_post.append(f)",
    "import IPython\nIPython.get_ipython().events.register('pre_run_cell', f)",
    "getattr(get_ipython(), 'ast_transformers').append(t)",
    "import sys\nsys.modules['IPython'].get_ipython().input_transformers_post.append(f)",
    "shell = get_ipython()\nshell.run_cell = lambda *a, **k: None",
    "get_ipython().set_custom_exc((AssertionError,), h)",
    "ip = get_ipython()\nip.input_transformers_cleanup.insert(0, f)",
    "ip = get_ipython()\nip.events.callbacks['post_run_cell'].append(f)",
    "ip = get_ipython()\nsetattr(ip, 'showtraceback', f)",
    "from IPython import get_ipython\nshell = get_ipython()\nshell.input_transformer_manager.line_transforms.append(f)",
]


@pytest.mark.parametrize("source", SCANNED + [
    source.replace('getattr(IPython, "get_" + "ipython")()', "IPython.get_ipython()").replace('" + "', "")
    for source in IPYTHON_HOOKS.values()])
def test_the_scan_reports_hooks_reached_through_any_alias_of_get_ipython(source):
    tampering, _ = scan_learner_code(source)
    assert any("IPython" in item for item in tampering), (source, tampering)


@pytest.mark.parametrize("source", [
    "%timeit sum(range(10))",
    "ip = get_ipython()\nip.run_line_magic('timeit', 'sum(range(10))')",
    "import atexit\natexit.register(print)",
    "events = []\nevents.append(1)\ntransformers = {}\n",
])
def test_the_scan_leaves_ordinary_uses_of_the_shell_alone(source):
    assert scan_learner_code(source) == ([], []), source


def test_hooks_found_again_after_a_graded_cell_are_hostile_unless_a_library_adds_them(shell):
    # what GuardedExecute's check after a graded cell counts as tampering (a thread or asyncio task that
    # put a hook back): transformers, methods replaced on the shell, callbacks run before a cell
    shell.ast_transformers.append(object())
    shell.events.register("pre_run_cell", lambda info=None: None)
    shell.run_code = lambda *args, **kwargs: None
    found = hooks.hostile(hooks.restore_hooks())
    assert any("ast_transformers" in f for f in found) and any("pre_run_cell" in f for f in found), found
    assert any("run_code" in f for f in found), found
    # a first `import matplotlib.pyplot` in a kernel registers a post_execute callback: not tampering
    shell.events.register("post_execute", lambda: None)
    assert hooks.hostile(hooks.restore_hooks()) == []
