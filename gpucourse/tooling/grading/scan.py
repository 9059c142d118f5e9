"""The tamper scan: what a learner's cell does to the grading machinery, read from its source (``ast``).

It recognises patterns (``np.allclose = …``, ``sys.modules``, ``exec``, frame internals, and attributes
reached by a name given as a string: ``getattr(f, "f_" + "back")``); changes it cannot read are put
back by the snapshot (``snapshot.py``) and, where they touch the course itself, caught when the hidden
tests run (``hidden.py``). Pure functions of the cells' text.
"""

from __future__ import annotations

import ast

PROTECTED_NAMES = ("check", "HiddenTestFailed", "run_hidden_tests")
# introspection that reaches into other code's frames, functions or objects
_FORBIDDEN_ATTRS = {"__code__", "__globals__", "__closure__", "__builtins__", "__subclasses__", "__bases__",
                    "__mro__", "__dict__", "__setattr__", "__delattr__", "_getframe", "f_back", "f_globals",
                    "f_locals", "f_builtins", "gi_frame", "tb_frame", "display_pub", "_current_frames",
                    "cr_frame", "ag_frame", "currentframe", "addaudithook", "settrace", "setprofile",
                    "get_referrers", "get_referents", "get_objects"}
# what an attribute read by a name given as a string (``getattr(f, "f_" + "back")``) must not reach: any
# dunder, and the frame internals above (plus a few that are harmless written out but not hidden)
_HIDDEN_REACH = _FORBIDDEN_ATTRS | {"f_code", "f_trace", "tb_next", "gi_code", "modules", "callbacks"}
# calls that read or write an attribute by a name: the name is their last positional argument
_BY_NAME = {"getattr", "setattr", "delattr", "attrgetter", "__getattribute__", "__getattr__"}
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
    tampering, notes, constructed = [], [], []

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
        if isinstance(node, ast.Call):
            found, unread = _by_constructed_name(node, line)
            tampering += found
            constructed += unread
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Call) and isinstance(
                node.value.func, ast.Name) and node.value.func.id == "vars" and node.value.args:
            key = _constant_string(node.slice)
            if isinstance(key, str) and _hidden_reach(key):
                tampering.append(f"line {line} reads `{_dotted(node)}`, a dunder or a frame internal")
            elif not isinstance(key, str):
                constructed.append(f"line {line} reads `{_dotted(node)}` by a name built at run time")
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
    if constructed and _builds_names(tree):  # else ordinary (``getattr(module, name)`` over the lab's names)
        tampering += [f"{item}, in a cell that builds strings like a hidden attribute's name" for item in constructed]
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


def _by_constructed_name(node: ast.Call, line: int) -> tuple[list[str], list[str]]:
    """(tampering, unread) for an attribute reached by a name given as a string: ``getattr``, ``setattr``,
    ``delattr``, ``operator.attrgetter``, ``__getattribute__``. A name that folds to a constant
    (``"f_" + "back"``, ``"".join([...])``, ``"kcab_f"[::-1]``) is tampering when it reaches a dunder or a
    frame internal; a name the scan cannot fold (built from variables at run time) is ``unread``: tampering
    in a cell that also builds such names (``_builds_names``), nothing otherwise (``getattr(module, name)``
    over a list of the lab's own names is ordinary; a name built in another cell is not seen)."""
    func = node.func
    called = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
    if called not in _BY_NAME or not node.args:
        return [], []
    if called in {"getattr", "setattr", "delattr"} and len(node.args) < 2:
        return [], []
    name_node = node.args[1] if called in {"getattr", "setattr", "delattr"} else node.args[-1]
    name = _constant_string(name_node)
    if name is None:
        return [], [f"line {line} calls `{called}()` with an attribute name built at run time "
                    f"(`{_dotted(name_node)}`)"]
    if isinstance(name, str) and _hidden_reach(name):
        return [f"line {line} reaches `{name}` through `{called}()`"], []
    return [], []


# calls that turn numbers or other objects' names into strings: with them any name can be spelled
_NAME_BUILDERS = {"chr", "bytes", "bytearray", "dir", "decode", "fromhex", "b64decode", "a85decode",
                  "unhexlify", "maketrans", "translate", "codecs", "__dir__"}


def _builds_names(tree) -> bool:
    """Whether a cell holds what spells a hidden attribute's name: a string constant of 3+ characters found
    inside one (``"ack"``, ``"f_"`` + …), a ``"__"``, or a call that turns numbers or names into strings."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            text = node.value
            if "__" in text or (len(text) >= 3 and any(text in name for name in _HIDDEN_REACH)) or (
                    text in {"f_", "gi_", "tb_", "cr_", "_"}):
                return True
        elif isinstance(node, ast.Call):
            func = node.func
            called = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
            if called in _NAME_BUILDERS:
                return True
    return False


def _hidden_reach(name: str) -> bool:
    return name in _HIDDEN_REACH or (name.startswith("__") and name.endswith("__"))


_STR_METHODS = {"join", "replace", "upper", "lower", "strip", "lstrip", "rstrip", "format", "capitalize",
                "swapcase", "removeprefix", "removesuffix", "casefold", "title", "zfill", "center", "ljust",
                "rjust", "translate", "encode", "decode"}


def _constant_string(node, depth: int = 0):
    """The value of an expression built from constants only (a string, or what builds one), else None."""
    if depth > 20:
        return None
    fold = lambda sub: _constant_string(sub, depth + 1)  # noqa: E731
    try:
        if isinstance(node, ast.Constant):
            return node.value if isinstance(node.value, str | bytes | int) else None
        if isinstance(node, ast.JoinedStr):
            parts = [fold(v) for v in node.values]
            return None if any(p is None for p in parts) else "".join(str(p) for p in parts)
        if isinstance(node, ast.FormattedValue):
            value = fold(node.value)
            return None if value is None or node.format_spec is not None else str(value)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add | ast.Mult | ast.Mod):
            left, right = fold(node.left), fold(node.right)
            if left is None or right is None:
                return None
            if isinstance(node.op, ast.Mult) and not isinstance(right, int) and not isinstance(left, int):
                return None
            return left + right if isinstance(node.op, ast.Add) else left * right if isinstance(
                node.op, ast.Mult) else left % right
        if isinstance(node, ast.Subscript):
            value = fold(node.value)
            key = node.slice
            if isinstance(key, ast.Slice):
                bounds = [None if b is None else fold(b) for b in (key.lower, key.upper, key.step)]
                return value[slice(*bounds)] if value is not None else None
            index = fold(key)
            return value[index] if value is not None and index is not None else None
        if isinstance(node, ast.List | ast.Tuple):
            items = [fold(e) for e in node.elts]
            return None if any(i is None for i in items) else items
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            value = fold(node.operand)
            return -value if isinstance(value, int) else None
        if isinstance(node, ast.Call) and not node.keywords:
            args = [fold(a) for a in node.args]
            if any(a is None for a in args):
                return None
            if isinstance(node.func, ast.Attribute) and node.func.attr in _STR_METHODS:
                owner = fold(node.func.value)
                if owner is None or len(args) > 3:
                    return None
                result = getattr(owner, node.func.attr)(*args)
                return result.decode() if isinstance(result, bytes) else result
            if isinstance(node.func, ast.Name) and node.func.id in {"chr", "str", "reversed", "list"}:
                result = {"chr": chr, "str": str, "reversed": lambda v: "".join(reversed(v)), "list": list}[
                    node.func.id](*args)
                return result
    except Exception:  # noqa: BLE001  (a fold that fails is a name the scan cannot read)
        return None
    return None


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
