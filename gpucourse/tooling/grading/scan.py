"""The tamper scan: what a learner's cell does to the grading machinery, read from its source (``ast``).

It recognises patterns (``np.allclose = …``, ``sys.modules``, ``exec``); changes it cannot read are put
back by the snapshot (``snapshot.py``) and, where they touch the course itself, caught when the hidden
tests run (``hidden.py``). Pure functions of the cells' text.
"""

from __future__ import annotations

import ast

PROTECTED_NAMES = ("check", "HiddenTestFailed", "run_hidden_tests")
# introspection that reaches into other code's frames, functions or objects
_FORBIDDEN_ATTRS = {"__code__", "__globals__", "__closure__", "__builtins__", "__subclasses__", "__bases__",
                    "__mro__", "__dict__", "__setattr__", "__delattr__", "_getframe", "f_back", "f_globals",
                    "f_locals", "f_builtins", "gi_frame", "tb_frame", "display_pub"}
_FORBIDDEN_CALLS = {"exec", "eval", "compile", "__import__"}
_FORBIDDEN_MODULES = {"ctypes", "gc", "inspect", "builtins", "importlib", "nbgrader", "nbclient",
                      "jupyter_client", "ipykernel"}
# IPython's hooks: what changes how a LATER cell is read, run or reported (``hooks.py`` puts them back
# before each graded cell). These names belong to the shell alone; the ambiguous ones (``events``,
# ``run_cell``) count only on the shell itself, reached through any alias of ``get_ipython()``.
_IPYTHON_HOOKS = {"ast_transformers", "input_transformers_post", "input_transformers_cleanup",
                  "input_transformer_manager", "input_splitter", "set_custom_exc", "CustomTB", "custom_exceptions",
                  "run_ast_nodes", "transform_cell", "transform_ast", "showtraceback", "_showtraceback",
                  "showsyntaxerror", "should_run_async", "user_expressions"}
_SHELL_ATTRS = {"events", "run_cell", "run_cell_async", "run_code", "displayhook", "display_formatter", "compile",
                "kernel", "ex", "ev", "__class__"}
_EVENTS = {"pre_execute", "pre_run_cell", "post_execute", "post_run_cell", "shell_initialized"}


def imported_names(sources) -> dict[str, str]:
    """Name → what it was imported as (``np`` → ``numpy``, ``check`` → ``gpucourse.tooling.grading.check``),
    for every import in these cells."""
    names: dict[str, str] = {}
    for source in sources:
        try:
            tree = ast.parse(_as_python(source))
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    top = alias.name.split(".")[0]
                    names[alias.asname or top] = alias.name if alias.asname else top
            elif isinstance(node, ast.ImportFrom):
                for alias in node.names:
                    names[alias.asname or alias.name] = f"{node.module or ''}.{alias.name}"
    return names


def lab_helpers(locked_sources, graded_sources) -> set[str]:
    """Functions and classes that the lab's locked cells define (``floats``, ``poisoned``, ``counts``) and
    its graded cells use: a learner who redefines one changes what the tests feed and compare."""
    defined: set[str] = set()
    for source in locked_sources:
        try:
            tree = ast.parse(_as_python(source))
        except SyntaxError:
            continue
        defined |= {node.name for node in tree.body if isinstance(node, ast.FunctionDef | ast.ClassDef)}
    used: set[str] = set()
    for source in graded_sources:
        try:
            used |= {n.id for n in ast.walk(ast.parse(_as_python(source))) if isinstance(n, ast.Name)}
        except SyntaxError:
            continue
    return defined & used


def scan_learner_code(source: str, imported=None, locked: dict[str, str] | None = None,
                      helpers=()) -> tuple[list[str], list[str]]:
    """(tampering, notes) for one cell written by a learner.

    Tampering makes every graded cell of the notebook score 0: modifying an imported module or
    object (``np.allclose = …``, ``gpucourse.tooling.grading.check = …``, ``check.__code__ = …``);
    rebinding a name that a locked cell imported (``np = fake``: hidden tests would use it);
    running code the grader cannot read (``exec``, ``eval``); importing ``ctypes``, ``gc``,
    ``inspect``, ``builtins``, ``importlib``; reaching into frames, function internals or
    ``sys.modules``. Redefining ``check`` is only noted: hidden tests use the grader's own.

    ``imported``: names imported by any cell (``imported_names``); ``locked``: those imported by
    the notebook's locked cells, with what they were imported as; ``helpers``: the lab's own test
    helpers (``lab_helpers``): redefining one is tampering too.
    """
    try:
        tree = ast.parse(_as_python(source))
    except SyntaxError:
        return [], []  # it fails when it runs; that is its verdict
    locked = dict(locked or {})
    mine = imported_names([source])
    protected_names = set(imported or ()) | set(mine) | set(locked) | set(PROTECTED_NAMES) | {"__builtins__"}
    sys_names = {"sys"} | {name for name, what in {**locked, **mine}.items() if what == "sys"}
    tampering, notes = [], []

    def root_of(expr):
        while isinstance(expr, ast.Attribute | ast.Subscript | ast.Call):
            expr = expr.func if isinstance(expr, ast.Call) else expr.value
        return expr

    def protected(expr) -> bool:
        root = root_of(expr)
        return isinstance(root, ast.Name) and (root.id in protected_names or root.id in {
            "globals", "vars", "locals", "get_ipython", "type"})

    for node in ast.walk(tree):
        line = getattr(node, "lineno", 0)
        targets = []
        if isinstance(node, ast.Assign | ast.Delete):
            targets = node.targets
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = [node.target]
        for target in targets:
            for sub in ast.walk(target):
                if isinstance(sub, ast.Attribute | ast.Subscript) and protected(sub):
                    if isinstance(sub, ast.Subscript) and _is_plain_binding(sub):
                        continue  # globals()["x"] = … binds a name (checked below)
                    tampering.append(f"line {line} modifies `{_dotted(sub)}`")
                    break
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            if node.func.id in _FORBIDDEN_CALLS:
                tampering.append(f"line {line} calls `{node.func.id}()`")
            elif node.func.id in {"setattr", "delattr"} and node.args and protected(node.args[0]):
                tampering.append(f"line {line} calls `{node.func.id}()` on `{_dotted(node.args[0])}`")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr in {"update", "pop", "popitem", "setdefault", "clear", "__setitem__",
                                  "__delitem__"} and isinstance(root_of(node.func.value), ast.Name) and (
                    root_of(node.func.value).id in {"globals", "vars", "locals", "__builtins__"}):
                tampering.append(f"line {line} calls `{_dotted(node.func)}()`")
        if isinstance(node, ast.Attribute) and (node.attr in _FORBIDDEN_ATTRS or (
                node.attr == "modules" and isinstance(node.value, ast.Name) and node.value.id in sys_names)):
            tampering.append(f"line {line} uses `.{node.attr}`")
        if isinstance(node, ast.Name) and node.id == "__builtins__":
            tampering.append(f"line {line} uses `__builtins__`")
        if isinstance(node, ast.Global):
            tampering += [f"line {line} rebinds `{name}`, imported by the lab" for name in node.names
                          if name in locked and name not in PROTECTED_NAMES]
            tampering += [f"line {line} rebinds `{name}`, a helper the lab's tests use" for name in node.names
                          if name in helpers]
        if isinstance(node, ast.Import | ast.ImportFrom):
            modules = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            for module in modules:
                if module.split(".")[0] in _FORBIDDEN_MODULES:
                    tampering.append(f"line {line} imports `{module}`")
    tampering += _ipython_hooks(tree, {**locked, **mine})
    for name, how in _top_level_bindings(tree).items():
        if name in PROTECTED_NAMES:
            notes.append(f"your notebook defines `{name}`, a name the hidden tests use; the grader used its own")
        elif name in locked and how != locked[name]:
            tampering.append(f"rebinds `{name}`, which the lab imported")
        elif name in helpers:
            tampering.append(f"redefines `{name}`, a helper that the lab's locked cells define and its tests use")
    return sorted(set(tampering)), sorted(set(notes))


def _ipython_hooks(tree, imported: dict[str, str]) -> list[str]:
    """IPython hooks a cell reaches: ``_IPYTHON_HOOKS`` anywhere (as an attribute or a ``getattr`` name),
    ``_SHELL_ATTRS`` on the shell (``get_ipython()``, under any name it is imported or bound as, or
    ``IPython.get_ipython()``), and event names passed or looked up (``register("pre_run_cell", …)``)."""
    getters = {"get_ipython"} | {name for name, what in imported.items() if what.endswith(".get_ipython")}
    shells: set[str] = set()

    def is_shell(expr) -> bool:
        if isinstance(expr, ast.Name):
            return expr.id in shells
        if isinstance(expr, ast.Call):
            func = expr.func
            return (isinstance(func, ast.Name) and func.id in getters) or (
                isinstance(func, ast.Attribute) and func.attr == "get_ipython")
        return False

    for _ in range(3):  # ip = get_ipython(); shell = ip
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign | ast.AnnAssign | ast.NamedExpr) and node.value is not None \
                    and is_shell(node.value):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                shells |= {t.id for t in targets if isinstance(t, ast.Name)}
    found = []
    for node in ast.walk(tree):
        line = getattr(node, "lineno", 0)
        name = None
        if isinstance(node, ast.Attribute) and (node.attr in _IPYTHON_HOOKS or (
                node.attr in _SHELL_ATTRS and is_shell(node.value))):
            name = node.attr
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in {
                "getattr", "setattr", "delattr"} and len(node.args) > 1 and isinstance(node.args[1], ast.Constant):
            attr = node.args[1].value
            if attr in _IPYTHON_HOOKS or (attr in _SHELL_ATTRS and is_shell(node.args[0])):
                name = attr
        elif isinstance(node, ast.Constant) and node.value in _EVENTS:
            name = f"{node.value}"
        if name:
            found.append(f"line {line} reaches IPython's `{name}`, a hook that changes how later cells run")
    return found


def _is_plain_binding(node) -> bool:
    """``globals()["name"]`` with a constant identifier that is not a dunder name."""
    key = node.slice
    return (isinstance(node.value, ast.Call) and isinstance(node.value.func, ast.Name)
            and node.value.func.id in {"globals", "vars", "locals"} and isinstance(key, ast.Constant)
            and isinstance(key.value, str) and key.value.isidentifier() and not key.value.startswith("__"))


def _as_python(source: str) -> str:
    """IPython syntax (magics, `!cmd`) as plain Python, so `ast` can read it."""
    try:
        from IPython.core.inputtransformer2 import TransformerManager

        return TransformerManager().transform_cell(source)
    except Exception:
        return source


def _dotted(node) -> str:
    try:
        return ast.unparse(node)[:60]
    except Exception:
        return type(node).__name__


def _top_level_bindings(tree) -> dict[str, str]:
    """Names a cell binds at the top level → what to: an import's source, or "" for anything else."""
    names: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names[node.name] = ""
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names.update(imported_names([ast.unparse(node)]))
        else:
            for sub in ast.walk(node):
                if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store | ast.Del):
                    names[sub.id] = ""
                elif isinstance(sub, ast.Subscript) and _is_plain_binding(sub):
                    names[str(sub.slice.value)] = ""  # globals()["check"] = …
                elif isinstance(sub, ast.NamedExpr):
                    names[sub.target.id] = ""
    return names
