"""IPython's own hooks, as the grader's header saw them, put back before every graded cell runs.

A hidden block guards itself (``hidden.run_hidden_tests``), but only once it runs: a learner's cell can
install an IPython hook that changes every *later* cell before it runs — an AST transformer that drops
``assert`` statements and the hidden-test call, an input transformer that rewrites the source, an event
callback (``pre_run_cell``), a custom exception handler, a replaced ``run_cell``. So the header remembers
the shell's hooks (``snapshot_hooks``), and before each graded cell the grader asks the kernel, outside
any cell (an empty execute request whose ``user_expressions`` call ``before_test_cell``: IPython evaluates
them with a plain ``eval``, past every transformer and event), to put them back and to put the snapshot
back (``snapshot.restore_snapshot``). The reply must carry ``READY``; without it the grader treats the
notebook as tampered with (``execute.GuardedExecute``).

The reference copies live in this module's private state, taken before any learner code ran, as tuples
(the contents of each list, dict and instance dictionary); the restorer's own functions are course code,
which ``restore_snapshot`` puts back and reports when changed.

Runs in the learner's kernel: standard library only.
"""

from __future__ import annotations

import contextlib
import sys

from gpucourse.tooling.grading.snapshot import of_the_course, restore_snapshot

READY = "gpucourse-hooks-restored"
# what the grader sends as the empty request's user expression (evaluated in the learner's namespace)
RESTORE_EXPRESSION = "__import__('gpucourse.tooling.grading.hooks', fromlist=['_']).before_test_cell()"

# attributes of the shell that decide how a cell is read, run and reported
SHELL_HOOKS = ("ast_transformers", "input_transformers_post", "input_transformer_manager", "input_splitter",
               "events", "displayhook", "display_pub", "display_formatter", "CustomTB", "custom_exceptions",
               "compile", "payload_manager")
# Methods a learner may replace on the instance (``shell.run_cell = …``, ``run_cell_async``, ``run_ast_nodes``,
# ``run_code``, ``transform_cell``, ``showtraceback``, ``user_expressions``, the kernel's ``do_execute``): any
# instance attribute of the shell, its hook objects or the kernel that shadows a callable of its class is
# removed. Every event's callbacks (pre_execute, pre_run_cell, post_execute, post_run_cell) are put back.

_HOOKS: dict | None = None


def _shell():
    with contextlib.suppress(Exception):
        from IPython import get_ipython

        return get_ipython()
    return None


def snapshot_hooks(shell=None) -> bool:
    """Called once by the grader's header (after ``snapshot_environment``), before any learner code.
    ``shell``: the InteractiveShell (default: the running one). False when there is none."""
    global _HOOKS
    shell = shell if shell is not None else _shell()
    if shell is None:
        return False
    attrs = []  # (object, name, value): put back with setattr when it is no longer that object
    for name in SHELL_HOOKS:
        with contextlib.suppress(Exception):
            attrs.append((shell, name, getattr(shell, name)))
    objects = [shell] + [value for _, _, value in attrs if not isinstance(value, list | tuple | type(None))]
    kernel = getattr(shell, "kernel", None)
    if kernel is not None:
        objects.append(kernel)
    containers = []  # (what, the list or dict, its contents): its contents put back in place
    for owner_name in ("input_transformer_manager", "input_splitter"):  # the legacy lists too
        owner = getattr(shell, owner_name, None)
        for name, value in list(vars(owner).items()) if hasattr(owner, "__dict__") else ():
            if type(value) is list:
                containers.append((f"{owner_name}.{name}", value, tuple(value)))
    for name in ("ast_transformers", "input_transformers_post"):
        value = getattr(shell, name, None)
        if type(value) is list:
            containers.append((name, value, tuple(value)))
    events = getattr(shell, "events", None)
    callbacks = getattr(events, "callbacks", None)
    if type(callbacks) is dict:
        attrs.append((events, "callbacks", callbacks))
        containers.append(("events.callbacks", callbacks, tuple(callbacks.items())))
        containers += [(f"events.callbacks[{event!r}]", value, tuple(value))
                       for event, value in callbacks.items() if type(value) is list]
    handlers = getattr(kernel, "shell_handlers", None)
    if type(handlers) is dict:
        attrs.append((kernel, "shell_handlers", handlers))
        containers.append(("kernel.shell_handlers", handlers, tuple(handlers.items())))
    instances = [(obj, tuple(vars(obj).items())) for obj in objects if hasattr(obj, "__dict__")]
    _HOOKS = {"shell": shell, "attrs": attrs, "containers": containers, "instances": instances,
              "user_ns": getattr(shell, "user_ns", None)}
    return True


def _shadows_a_method(obj, name: str) -> bool:
    return any(callable(vars(cls).get(name)) or isinstance(vars(cls).get(name), property)
               for cls in type(obj).__mro__)


def restore_hooks() -> list[str]:
    """Put the shell's hooks back as the header saw them; what had changed (empty without a snapshot)."""
    hooks = _HOOKS
    if hooks is None:
        return []
    changed = []
    for obj, name, value in hooks["attrs"]:
        try:
            now = getattr(obj, name)
        except Exception:  # noqa: BLE001
            now = None
        if now is not value:
            with contextlib.suppress(Exception):
                object.__setattr__(obj, name, value)  # a trait's own descriptor still validates it
            changed.append(f"{type(obj).__name__}.{name}")
    for obj, contents in hooks["instances"]:
        saved = dict(contents)
        current = vars(obj)
        for name in [n for n in current if n not in saved and _shadows_a_method(obj, n)]:
            dict.pop(current, name, None)
            changed.append(f"{type(obj).__name__}.{name} (replaced on the instance)")
        for name, value in contents:
            if callable(value) and dict.get(current, name) is not value:
                dict.__setitem__(current, name, value)
                changed.append(f"{type(obj).__name__}.{name} (replaced on the instance)")
    for what, container, contents in hooks["containers"]:
        if type(container) is list:
            if len(container) != len(contents) or any(a is not b for a, b in zip(container, contents, strict=False)):
                list.__setitem__(container, slice(None), list(contents))
                changed.append(what)
        elif dict.__len__(container) != len(contents) or any(
                dict.get(container, key) is not value for key, value in contents):
            dict.clear(container)
            dict.update(container, contents)
            changed.append(what)
    return sorted(set(changed))


# What only hostile code changes while a graded cell runs or while the kernel waits between requests (a
# thread or an asyncio task that puts a hook back after the restore): a transformer, a method replaced on
# an instance, an exception handler, a callback run before a cell. (A first ``import matplotlib.pyplot``
# registers a ``post_execute`` callback: not on this list.)
CHANGES_LATER_CELLS = ("ast_transformers", "input_transformers_post", "input_transformer_manager.",
                       "input_splitter.", "(replaced on the instance)", "CustomTB", "custom_exceptions",
                       "events.callbacks['pre_", "events.callbacks ", "ZMQInteractiveShell.events",
                       "InteractiveShell.events", "EventManager.callbacks", "shell_handlers")


def hostile(changed: list[str]) -> list[str]:
    """Of the hooks ``restore_hooks`` put back, those in ``CHANGES_LATER_CELLS``."""
    return [item for item in changed if any(mark in item or item.endswith(mark.strip()) for mark in
                                             CHANGES_LATER_CELLS)]


def before_test_cell() -> str:
    """What the grader calls, outside any cell, before each graded cell: the snapshot and IPython's hooks
    put back. ``READY``, then the course's own code that had changed (tampering), if any."""
    course = of_the_course(restore_snapshot(_HOOKS["user_ns"] if _HOOKS and _HOOKS["user_ns"] is not None
                                            else {}))
    hooks = restore_hooks()
    sys.settrace(None)
    sys.setprofile(None)
    reply = READY + (" hooks: " + ", ".join(hooks) if hooks else "")
    return reply + (" | course: " + ", ".join(course[:3]) if course else "")
