"""Layer 1: the static check of untrusted feature code, shared by the parent and the worker.

The parent checks before it sends code anywhere; the worker checks again (and compiles) rather than
take the parent's word for it. The check runs nothing: it parses, walks the syntax tree against an
allow-list of syntax and the names in :mod:`lore.sandbox.rules`, rewrites formatting so that text
holds no memory addresses (:mod:`lore.sandbox.addresses`), and compiles. Standard library and numpy
only: the worker process loads this module.
"""

from __future__ import annotations

import ast

from lore.sandbox.addresses import AddressFreeFormatting
from lore.sandbox.rules import (
    ALLOWED_MODULES,
    FORBIDDEN_ATTRIBUTE_PREFIXES,
    FORBIDDEN_ATTRIBUTES,
    FORBIDDEN_NAMES,
    NUMPY_ALLOWED,
    NUMPY_LINALG_ALLOWED,
    SAFE_EXCEPTION_NAMES,
    math_public_names,
)

MAX_SOURCE_BYTES = 20_000
"""Feature code longer than this (UTF-8 bytes) is rejected before parsing."""
MAX_AST_NODES = 5_000

_ALLOWED_NODE_TYPES = (
    ast.Module, ast.FunctionDef, ast.arguments, ast.arg, ast.Return, ast.Assign, ast.AugAssign,
    ast.AnnAssign, ast.For, ast.While, ast.If, ast.Break, ast.Continue, ast.Pass, ast.Expr, ast.Try,
    ast.ExceptHandler, ast.Raise, ast.Assert, ast.Import, ast.ImportFrom, ast.alias, ast.Delete,
    ast.BoolOp, ast.BinOp, ast.UnaryOp, ast.Lambda, ast.IfExp, ast.Dict, ast.Set, ast.ListComp,
    ast.SetComp, ast.DictComp, ast.GeneratorExp, ast.comprehension, ast.Compare, ast.Call,
    ast.keyword, ast.Constant, ast.JoinedStr, ast.FormattedValue, ast.Attribute, ast.Subscript,
    ast.Slice, ast.Starred, ast.Name, ast.List, ast.Tuple, ast.NamedExpr,
    ast.expr_context, ast.operator, ast.unaryop, ast.cmpop, ast.boolop,
)
_FORBIDDEN_NODE_REASONS = {
    "ClassDef": "class definitions are not allowed",
    "AsyncFunctionDef": "async functions are not allowed",
    "Global": "'global' is not allowed",
    "Nonlocal": "'nonlocal' is not allowed",
    "Yield": "generators ('yield') are not allowed",
    "YieldFrom": "generators ('yield from') are not allowed",
    "Await": "'await' is not allowed",
    "With": "'with' statements are not allowed",
    "AsyncWith": "'async with' is not allowed",
    "AsyncFor": "'async for' is not allowed",
    "Match": "'match' statements are not allowed",
    "TryStar": "'except*' is not allowed",
}


def check_source(source: object) -> str | None:
    """Static check of untrusted feature code; the reason it is refused, or None when it passes.

    The message is short and names the offending construct and line, e.g.
    ``"import of 'os' is not allowed (only math and numpy) (line 1)"``.
    """
    result = compile_checked(source)
    return result if isinstance(result, str) else None


def compile_checked(source: object):
    """Check, then compile (compiling runs nothing; it also catches e.g. ``break`` outside a loop).

    Returns the code object, or the reason the source is refused.
    """
    if not isinstance(source, str):
        return f"features_code must be a str, got {type(source).__name__}"
    size = len(source.encode("utf-8", "surrogatepass"))
    if size > MAX_SOURCE_BYTES:
        return f"source is {size} bytes, more than the {MAX_SOURCE_BYTES}-byte limit"
    try:
        tree = ast.parse(source, filename="<features>", mode="exec")
    except SyntaxError as e:
        return f"syntax error: {e.msg} (line {e.lineno})"
    except (ValueError, RecursionError, MemoryError) as e:
        return f"cannot parse: {type(e).__name__}: {str(e)[:80]}"
    try:
        error = _Checker().run(tree)
    except RecursionError:
        return "code is nested too deeply"
    if error:
        return error
    try:
        tree = ast.fix_missing_locations(AddressFreeFormatting().visit(tree))
        return compile(tree, "<features>", "exec", dont_inherit=True)
    except SyntaxError as e:
        return f"cannot compile: {e.msg} (line {e.lineno})"
    except (ValueError, RecursionError, MemoryError) as e:
        return f"cannot compile: {type(e).__name__}: {str(e)[:80]}"


class _Checker:
    """Walks the whole tree once; the first violation found is the answer."""

    def __init__(self) -> None:
        self.numpy_aliases: set[str] = set()

    def run(self, tree: ast.Module) -> str | None:
        nodes = list(ast.walk(tree))
        if len(nodes) > MAX_AST_NODES:
            return f"code has {len(nodes)} syntax nodes, more than the {MAX_AST_NODES} limit"
        # Aliases first, so `np.foo` is judged against the numpy allow-list wherever it appears.
        for node in nodes:
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name == "numpy":
                        self.numpy_aliases.add(alias.asname or "numpy")
        self.numpy_aliases.add("np")  # pre-bound even without an import
        error = self._check_top_level(tree)
        if error:
            return error
        for node in nodes:
            error = self._check_node(node)
            if error:
                line = getattr(node, "lineno", None)
                return f"{error} (line {line})" if line else error
        return None

    def _check_top_level(self, tree: ast.Module) -> str | None:
        has_entry = False
        for i, stmt in enumerate(tree.body):
            where = f"(line {stmt.lineno})"
            if isinstance(stmt, (ast.Import, ast.ImportFrom)):
                continue
            if isinstance(stmt, ast.FunctionDef):
                error = _check_definition_time(stmt)
                if error:
                    return f"{error} {where}"
                if stmt.name == "compute_features":
                    args = stmt.args
                    if not (args.posonlyargs or args.args or args.vararg):
                        return f"compute_features must take the observation as an argument {where}"
                    has_entry = True
                continue
            if i == 0 and isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
                continue  # module docstring
            if isinstance(stmt, (ast.Assign, ast.AnnAssign)):
                targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                if not all(isinstance(t, ast.Name) or isinstance(t, (ast.Tuple, ast.List))
                           and all(isinstance(e, ast.Name) for e in t.elts) for t in targets):
                    return f"top-level assignments must bind plain names {where}"
                if stmt.value is None or not _is_constant_expression(stmt.value):
                    return f"top-level assignments must be constants (no calls) {where}"
                if isinstance(stmt, ast.AnnAssign) and not _is_type_expression(stmt.annotation):
                    return f"{_ANNOTATION_RULE} {where}"
                continue
            return (f"only imports, function definitions and constant assignments are allowed at "
                    f"top level, found {type(stmt).__name__} {where}")
        if not has_entry:
            return "code must define a top-level function compute_features(obs)"
        return None

    def _check_node(self, node: ast.AST) -> str | None:
        kind = type(node).__name__
        if kind in _FORBIDDEN_NODE_REASONS:
            return _FORBIDDEN_NODE_REASONS[kind]
        if not isinstance(node, _ALLOWED_NODE_TYPES):
            return f"syntax '{kind}' is not allowed"
        if isinstance(node, ast.Name):
            return _check_name(node.id)
        if isinstance(node, ast.Attribute):
            return self._check_attribute(node)
        if isinstance(node, ast.Import):
            return _check_aliases(node.names, ALLOWED_MODULES, "import of '{}' is not allowed (only math and numpy)")
        if isinstance(node, ast.ImportFrom):
            return _check_import_from(node)
        if isinstance(node, (ast.FunctionDef, ast.Lambda)):
            if isinstance(node, ast.FunctionDef):
                if node.decorator_list:
                    return "decorators are not allowed"
                if node.name.startswith("__"):
                    return f"name '{node.name}' is not allowed"
            return None
        if isinstance(node, ast.arg):
            return f"name '{node.arg}' is not allowed" if node.arg.startswith("__") else None
        if isinstance(node, ast.ExceptHandler):
            return _check_handler(node)
        if isinstance(node, ast.AugAssign) and isinstance(node.op, ast.Mod) \
                and not isinstance(node.target, ast.Name):
            return "'%=' is only allowed on a plain name; write 'a[i] = a[i] % x'"
        if isinstance(node, ast.keyword) and node.arg is not None and node.arg.startswith("__"):
            return f"keyword '{node.arg}' is not allowed"
        return None

    def _check_attribute(self, node: ast.Attribute) -> str | None:
        attr = node.attr
        if not isinstance(node.ctx, ast.Load):
            return f"assigning or deleting attributes is not allowed ('.{attr}')"
        if attr.startswith(FORBIDDEN_ATTRIBUTE_PREFIXES) or attr in FORBIDDEN_ATTRIBUTES:
            return f"attribute '.{attr}' is not allowed"
        base = node.value
        if isinstance(base, ast.Name):
            if base.id in self.numpy_aliases and attr not in NUMPY_ALLOWED:
                return f"numpy function '{base.id}.{attr}' is not allowed"
        elif (isinstance(base, ast.Attribute) and base.attr == "linalg" and isinstance(base.value, ast.Name)
              and base.value.id in self.numpy_aliases and attr not in NUMPY_LINALG_ALLOWED):
            return f"numpy function '{base.value.id}.linalg.{attr}' is not allowed"
        return None


def _check_name(name: str) -> str | None:
    if name.startswith("__"):
        return f"name '{name}' is not allowed"
    if name in FORBIDDEN_NAMES:
        return f"use of '{name}' is not allowed"
    return None


def _check_import_from(node: ast.ImportFrom) -> str | None:
    if node.module == "__future__" and not node.level:
        # Harmless (annotations stay strings that nothing evaluates) and a common LLM habit.
        if all(alias.name == "annotations" and alias.asname is None for alias in node.names):
            return None
        return "only 'from __future__ import annotations' is allowed from __future__"
    if node.level or node.module not in ALLOWED_MODULES:
        return f"import from '{node.module}' is not allowed (only math and numpy)"
    allowed = math_public_names() if node.module == "math" else NUMPY_ALLOWED
    return _check_aliases(node.names, allowed, f"'from {node.module} import {{}}' is not allowed")


def _check_aliases(aliases: list[ast.alias], allowed, refusal: str) -> str | None:
    """Each imported name must be in ``allowed`` and may not be bound to a dunder name."""
    for alias in aliases:
        if alias.name not in allowed:
            return refusal.format(alias.name)
        if alias.asname and alias.asname.startswith("__"):
            return f"name '{alias.asname}' is not allowed"
    return None


def _check_handler(node: ast.ExceptHandler) -> str | None:
    # A bare `except:` would swallow the sandbox's own timeout, and a handler naming something
    # outside the allowed exceptions could turn it into a catchable NameError.
    if node.type is None:
        return "bare 'except:' is not allowed; name the exception (e.g. 'except Exception:')"
    names = node.type.elts if isinstance(node.type, ast.Tuple) else [node.type]
    for name in names:
        if not (isinstance(name, ast.Name) and name.id in SAFE_EXCEPTION_NAMES):
            shown = name.id if isinstance(name, ast.Name) else type(name).__name__
            return f"'except {shown}' is not allowed (allowed: {', '.join(SAFE_EXCEPTION_NAMES)})"
    return None


_ANNOTATION_RULE = ("annotations of top-level definitions may only name types, e.g. 'list[float]' "
                    "(they are evaluated when the module body runs)")


def _check_definition_time(function: ast.FunctionDef) -> str | None:
    """Default values and annotations of a top-level ``def`` are evaluated when the module body runs
    (before ``compute_features`` is called): constants and type names only, so that nothing runs then."""
    args = function.args
    for default in args.defaults + [d for d in args.kw_defaults if d is not None]:
        if not _is_constant_expression(default):
            return (f"default values of top-level functions must be constants (no calls; they are "
                    f"evaluated when the module body runs): '{function.name}'")
    every_arg = args.posonlyargs + args.args + args.kwonlyargs + [a for a in (args.vararg, args.kwarg) if a]
    annotations = [a.annotation for a in every_arg] + [function.returns]
    if not all(a is None or _is_type_expression(a) for a in annotations):
        return f"{_ANNOTATION_RULE}: '{function.name}'"
    return None


def _is_type_expression(node: ast.AST) -> bool:
    """``int``, ``np.ndarray``, ``"Obs"``, ``list[float]``, ``dict[str, float] | None``: no calls."""
    if isinstance(node, (ast.Constant, ast.Name)):
        return True
    if isinstance(node, ast.Attribute):
        return _is_type_expression(node.value)
    if isinstance(node, ast.Subscript):
        return _is_type_expression(node.value) and _is_type_expression(node.slice)
    if isinstance(node, (ast.Tuple, ast.List)):
        return all(_is_type_expression(e) for e in node.elts)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        return _is_type_expression(node.left) and _is_type_expression(node.right)
    return False


def _is_constant_expression(node: ast.AST) -> bool:
    if isinstance(node, (ast.Constant, ast.Name, ast.Attribute)):
        return True
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return all(_is_constant_expression(e) for e in node.elts)
    if isinstance(node, ast.Dict):
        return all(k is not None and _is_constant_expression(k) for k in node.keys) and all(
            _is_constant_expression(v) for v in node.values)
    if isinstance(node, ast.UnaryOp):
        return _is_constant_expression(node.operand)
    if isinstance(node, ast.BinOp):
        return _is_constant_expression(node.left) and _is_constant_expression(node.right)
    return False

