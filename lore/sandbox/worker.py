"""The worker side of :mod:`lore.sandbox`, plus the static checker both sides share.

Two roles in one file, so that the parent and the worker apply the very same rules:

* imported by the parent (:mod:`lore.sandbox.runner`) for :func:`check_source` and the constants;
* loaded by path inside a fresh interpreter (``python -S -s -B -c <bootstrap>``) and run through
  :func:`main`, it becomes a worker: it hardens its own process (namespaces, chroot, uid drop,
  resource limits, seccomp), answers a handshake, then serves feature requests over its stdin/stdout
  pipes until stdin closes.

Standard library and numpy only: the worker runs without ``site`` processing, and must not import
``lore`` (whose package ``__init__`` may pull in torch).

Wire format, both directions: a 4-byte little-endian length, then the payload. Parent -> worker is a
pickle (the parent is trusted). Worker -> parent is JSON, because the parent must never unpickle
anything a possibly-compromised worker wrote.
"""

from __future__ import annotations

import ast
import ctypes
import json
import math
import os
import pickle
import re
import resource
import signal
import struct
import sys
import warnings

import numpy as np

# --------------------------------------------------------------------------- shared constants

MAX_SOURCE_BYTES = 20_000
"""Feature code longer than this (UTF-8 bytes) is rejected before parsing."""
MAX_AST_NODES = 5_000
MAX_MESSAGE_CHARS = 200
"""Error messages from the worker are cut to this length."""
MAX_NAME_CHARS = 64
"""Dict-result keys are cut to this length."""
FRAME_HEADER = struct.Struct("<I")
MAX_REQUEST_BYTES = 256 * 1024 * 1024

FAILURE_KINDS = (
    "rejected",
    "exception",
    "timeout",
    "memory",
    "nonfinite",
    "wrong_length",
    "wrong_type",
    "output_too_large",
    "worker_crashed",
    "disabled",
)
"""``disabled`` is given by the parent only: code dropped after too many failures in a row."""

ALLOWED_MODULES = ("math", "numpy")

# numpy functions and constants feature code may use (an allow-list: numpy has file I/O, ctypes and
# raw-memory entry points - np.load/save/fromfile/memmap, np.ctypeslib, np.lib.stride_tricks - and a
# deny-list would silently let the next release's additions through). No np.random: features must
# be a deterministic function of the observation.
NUMPY_ALLOWED = frozenset(
    """
    abs absolute add all allclose amax amin any append arange arccos arccosh arcsin arcsinh arctan
    arctan2 arctanh argmax argmin argsort argwhere around array array_equal asarray atleast_1d
    atleast_2d atleast_3d average bincount bitwise_and bitwise_not bitwise_or bitwise_xor bool bool_
    broadcast_to cbrt ceil clip column_stack concatenate copy cos cosh count_nonzero cross cumprod
    cumsum deg2rad degrees diag diagonal diff digitize divide dot dstack e einsum equal exp exp2 expand_dims expm1 eye fabs flatnonzero flip fliplr flipud float16 float32 float64
    floor floor_divide fmax fmin fmod full full_like gcd greater greater_equal heaviside histogram
    hstack hypot identity inf inner int8 int16 int32 int64 intp invert isclose isfinite isin isinf
    isnan kron lcm less less_equal linalg linspace log log10 log1p log2 logaddexp logical_and
    logical_not logical_or logical_xor matmul max maximum mean median meshgrid min minimum mod
    moveaxis multiply nan nan_to_num nanargmax nanargmin nanmax nanmean nanmedian nanmin nanpercentile
    nanquantile nanstd nansum nanvar ndim negative newaxis nonzero not_equal ones ones_like outer pad
    percentile pi positive power prod ptp quantile rad2deg radians ravel ravel_multi_index reciprocal
    remainder repeat reshape rint roll rot90 round searchsorted sign sin sinh size sort split sqrt
    square squeeze stack std subtract sum swapaxes take tan tanh tile trace transpose tril triu
    true_divide trunc uint8 uint16 uint32 uint64 unique unravel_index var vstack where zeros
    zeros_like
    """.split()
)
NUMPY_LINALG_ALLOWED = frozenset("cond det eigvals eigvalsh inv lstsq matrix_rank norm pinv solve".split())

SAFE_BUILTIN_NAMES = (
    "abs all any bool chr dict divmod enumerate filter float frozenset int isinstance iter len list "
    "map max min next ord pow range repr reversed round set slice sorted str sum tuple zip"
).split()
SAFE_EXCEPTION_NAMES = (
    "ArithmeticError AssertionError Exception FloatingPointError IndexError KeyError LookupError "
    "NotImplementedError OverflowError RuntimeError StopIteration TypeError ValueError "
    "ZeroDivisionError"
).split()

# Names that give a way out of a restricted namespace or into the host. They are absent from the
# worker's builtins anyway; naming them here turns a runtime NameError into a clear rejection.
FORBIDDEN_NAMES = frozenset(
    """
    eval exec compile open getattr setattr delattr hasattr globals locals vars input breakpoint help
    exit quit memoryview type object super classmethod staticmethod property dir id hash print bytearray
    BaseException SystemExit KeyboardInterrupt GeneratorExit
    """.split()
)
# Attribute names refused on any object (the checker cannot know types). Besides everything that
# starts with "_" (dunders: __class__, __globals__, __subclasses__ ...) these reach frames, code,
# files or the modules of the host. `data`/`tobytes`/`tostring` give an array's raw bytes, which for
# an object array are its elements' memory addresses.
FORBIDDEN_ATTRIBUTES = frozenset(
    """
    format format_map mro tofile dump dumps ctypes data tobytes tostring load loads save savez
    savez_compressed savetxt loadtxt genfromtxt fromfile memmap lib ctypeslib testing distutils f2py
    setflags resize environ modules system popen spawn fork builtins globals locals getattr setattr
    import_module
    """.split()
)
FORBIDDEN_ATTRIBUTE_PREFIXES = ("_", "f_", "co_", "gi_", "cr_", "ag_", "tb_", "func_", "im_")

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


# --------------------------------------------------------------------------- static check


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
        tree = ast.fix_missing_locations(_AddressFreeFormatting().visit(tree))
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
    allowed = _math_public_names() if node.module == "math" else NUMPY_ALLOWED
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


def _math_public_names() -> frozenset[str]:
    return frozenset(n for n in dir(math) if not n.startswith("_"))


# --------------------------------------------------------------------------- address-free text

# Hooks the rewritten code calls. Feature code cannot spell them: names starting with "__" are refused.
_FORMAT_HOOK = "__sandbox_format_value__"
_MOD_HOOK = "__sandbox_mod__"
_IMOD_HOOK = "__sandbox_imod__"
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


class _AddressFreeFormatting(ast.NodeTransformer):
    """Sends every f-string field and every ``%`` through hooks that drop memory addresses from text.

    The default text of functions, iterators, bound methods ... holds their address
    (``<function f at 0x7f...>``), which differs between processes: features built from it would
    not be a function of the observation. ``repr``/``str`` are replaced in the builtins; f-strings and
    ``%`` format in C and need this rewrite. Runs after the check, on the checked tree.
    """

    def visit_FormattedValue(self, node: ast.FormattedValue) -> ast.AST:
        self.generic_visit(node)
        node.value = _hook_call(_FORMAT_HOOK, [node.value], node.value)
        return node

    def visit_BinOp(self, node: ast.BinOp) -> ast.AST:
        self.generic_visit(node)
        numeric_left = isinstance(node.left, ast.Constant) and not isinstance(node.left.value, (str, bytes))
        if not isinstance(node.op, ast.Mod) or numeric_left:
            return node
        return _hook_call(_MOD_HOOK, [node.left, node.right], node)

    def visit_AugAssign(self, node: ast.AugAssign) -> ast.AST:
        self.generic_visit(node)
        if not isinstance(node.op, ast.Mod):
            return node
        # The checker allows `%=` on plain names only: `x %= y` -> `x = __sandbox_imod__(x, y)`.
        current = ast.copy_location(ast.Name(node.target.id, ast.Load()), node.target)
        value = _hook_call(_IMOD_HOOK, [current, node.value], node)
        return ast.copy_location(ast.Assign([node.target], value), node)


def _hook_call(hook: str, args: list[ast.expr], where: ast.AST) -> ast.Call:
    call = ast.Call(ast.copy_location(ast.Name(hook, ast.Load()), where), args, [])
    return ast.copy_location(call, where)


def hide_addresses(text: str) -> str:
    """``"<function f at 0x7f3a...>"`` -> ``"<function f>"``."""
    return _ADDRESS.sub("", text)


def _is_plain(value) -> bool:
    """Values whose text never shows a memory address (numbers, strings, arrays without objects)."""
    if isinstance(value, (np.ndarray, np.generic)):
        return not value.dtype.hasobject
    return isinstance(value, (str, bytes, int, float, complex, type(None)))


class _AddressFree:
    """Stands in for one value being formatted: its text, without addresses."""

    __slots__ = ("_value",)

    def __init__(self, value) -> None:
        self._value = value

    def __repr__(self) -> str:
        return hide_addresses(repr(self._value))

    def __str__(self) -> str:
        return hide_addresses(str(self._value))

    def __format__(self, spec: str) -> str:
        return hide_addresses(format(self._value, spec))


def _address_free(value):
    return value if _is_plain(value) else _AddressFree(value)


def _format_args(args):
    """The right operand of ``text % args`` with every non-plain value replaced by its stand-in."""
    if isinstance(args, tuple):
        return tuple(_address_free(a) for a in args)
    if isinstance(args, dict) and all(_is_plain(k) for k in args):
        return {k: _address_free(v) for k, v in args.items()}
    return _address_free(args)


def _mod(left, right):
    if isinstance(left, (str, bytes)):
        return left % _format_args(right)
    return left % right


def _imod(left, right):
    if isinstance(left, (str, bytes)):
        return left % _format_args(right)
    left %= right  # in place for arrays, as `%=` is
    return left


def _address_free_repr(value) -> str:
    text = repr(value)
    return text if _is_plain(value) else hide_addresses(text)


class _StrType(type):
    """Metaclass of the ``str`` feature code sees: ``isinstance(x, str)``, ``str.join`` and
    ``dtype=str`` work as usual; calling it gives text without addresses."""

    def __instancecheck__(cls, value) -> bool:
        return isinstance(value, str)

    def __call__(cls, *args, **kwargs) -> str:
        text = str(*args, **kwargs)
        return text if not args or _is_plain(args[0]) else hide_addresses(text)

    def __getattr__(cls, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(str, name)

    def __repr__(cls) -> str:
        return "<class 'str'>"


class _AddressFreeStr(metaclass=_StrType):
    dtype = np.dtype(str)  # np.array(..., dtype=str) keeps meaning a unicode array


# --------------------------------------------------------------------------- restricted namespace


class _ReadOnlyNamespace:
    """Module stand-in exposing only allow-listed attributes; assignment to it fails."""

    __slots__ = ("_label", "_attrs")

    def __init__(self, label: str, attrs: dict) -> None:
        object.__setattr__(self, "_label", label)
        object.__setattr__(self, "_attrs", dict(attrs))

    def __getattr__(self, name: str):
        try:
            return self._attrs[name]
        except KeyError:
            raise AttributeError(f"{self._label}.{name} is not available in the feature sandbox") from None

    def __setattr__(self, name: str, value) -> None:
        raise AttributeError(f"{self._label} is read-only in the feature sandbox")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"{self._label} is read-only in the feature sandbox")

    def __repr__(self) -> str:
        return f"<sandboxed module {self._label}>"


def build_restricted_globals_factory():
    """-> a function returning a fresh globals dict for one execution of feature code."""
    import builtins

    numpy_attrs = {name: getattr(np, name) for name in NUMPY_ALLOWED if name != "linalg" and hasattr(np, name)}
    numpy_attrs["linalg"] = _ReadOnlyNamespace(
        "numpy.linalg", {name: getattr(np.linalg, name) for name in NUMPY_LINALG_ALLOWED})
    numpy_ns = _ReadOnlyNamespace("numpy", numpy_attrs)
    math_ns = _ReadOnlyNamespace("math", {name: getattr(math, name) for name in _math_public_names()})
    # loaded already: this very module starts with `from __future__ import annotations`
    future_ns = _ReadOnlyNamespace("__future__", {"annotations": sys.modules["__future__"].annotations})
    modules = {"math": math_ns, "numpy": numpy_ns, "__future__": future_ns}

    def safe_import(name, globals=None, locals=None, fromlist=(), level=0):  # noqa: A002
        # Feature code can only write `import math` / `import numpy` (static check), which get the
        # stand-ins. numpy's C code also imports its own submodules lazily through the *calling
        # frame's* __import__ (e.g. ndarray.sum -> numpy._core._methods): those, already loaded, pass.
        if level == 0 and name in modules:
            return modules[name]
        if level == 0 and name.startswith("numpy.") and name in sys.modules:
            return sys.modules[name]
        raise ImportError(f"import of '{name}' is not allowed in the feature sandbox")

    safe_builtins = {name: getattr(builtins, name) for name in SAFE_BUILTIN_NAMES + SAFE_EXCEPTION_NAMES}
    safe_builtins.update({
        "__import__": safe_import, "repr": _address_free_repr, "str": _AddressFreeStr,
        _FORMAT_HOOK: _address_free, _MOD_HOOK: _mod, _IMOD_HOOK: _imod,
    })

    def fresh_globals() -> dict:
        return {"__builtins__": safe_builtins, "__name__": "lore_features", "np": numpy_ns, "math": math_ns}

    return fresh_globals


# --------------------------------------------------------------------------- result conversion


def max_output_items(n_features: int) -> int:
    """Results with more items than this are ``output_too_large`` (not merely ``wrong_length``)."""
    return 4 * n_features + 64


def _to_float(value, index: int) -> tuple[float | None, str | None]:
    if isinstance(value, (bool, np.bool_)):
        return float(value), None
    if isinstance(value, int):
        try:
            return float(value), None
        except OverflowError:
            return (math.inf if value > 0 else -math.inf), None
    if isinstance(value, float):
        return float(value), None
    if isinstance(value, (np.generic, np.ndarray)) and value.dtype.kind in "biuf" and value.size == 1 \
            and value.ndim == 0:
        return float(value), None
    return None, f"feature {index} is {type(value).__name__}, expected a number"


def convert_result(result, n_features: int) -> tuple[str, str, list[float] | None, list[str] | None]:
    """What ``compute_features`` returned -> ``(kind, message, values, names)``; kind "ok" or a failure.

    Accepts a list/tuple of numbers, a 1-D numeric ndarray, or a dict of str -> number (taken in
    insertion order). Finiteness is judged by the parent, which also re-checks the length.
    """
    limit = max_output_items(n_features)
    names: list[str] | None = None
    if isinstance(result, dict):
        if len(result) > limit:
            return "output_too_large", f"dict with {len(result)} entries (expected {n_features})", None, None
        if not all(isinstance(k, str) for k in result):
            return "wrong_type", "dict keys must be strings", None, None
        names = [clean_text(k, MAX_NAME_CHARS) for k in result]
        items = list(result.values())
    elif isinstance(result, (list, tuple)):
        if len(result) > limit:
            return "output_too_large", f"{len(result)} values (expected {n_features})", None, None
        items = list(result)
    elif isinstance(result, np.ndarray):
        if result.ndim != 1:
            return "wrong_type", f"array of shape {result.shape}, expected 1-D", None, None
        if result.size > limit:
            return "output_too_large", f"{result.size} values (expected {n_features})", None, None
        if result.dtype.kind not in "biuf":
            return "wrong_type", f"array of dtype {result.dtype}, expected numbers", None, None
        items = result.astype(np.float64).tolist()
    else:
        return ("wrong_type", f"compute_features returned {type(result).__name__}; expected a list, "
                "tuple, 1-D array or dict of numbers", None, None)
    if len(items) != n_features:
        return "wrong_length", f"{len(items)} values, expected {n_features}", None, None
    values = []
    for i, item in enumerate(items):
        number, error = _to_float(item, i)
        if error:
            return "wrong_type", error, None, None
        values.append(number)
    return "ok", "", values, names


# --------------------------------------------------------------------------- hardening (worker only)

_CLONE_NEWNS = 0x00020000
_CLONE_NEWUTS = 0x04000000
_CLONE_NEWIPC = 0x08000000
_CLONE_NEWUSER = 0x10000000
_CLONE_NEWNET = 0x40000000
_CLONE_THREAD = 0x00010000
_PR_SET_NO_NEW_PRIVS = 38
_PR_SET_SECCOMP = 22
_SECCOMP_MODE_FILTER = 2
_AUDIT_ARCH_X86_64 = 0xC000003E
_X32_SYSCALL_BIT = 0x40000000
_SECCOMP_RET_KILL_PROCESS = 0x80000000
_SECCOMP_RET_ERRNO = 0x00050000
_SECCOMP_RET_ALLOW = 0x7FFF0000
_EPERM, _ENOSYS = 1, 38
_NOBODY = 65534

# x86_64 syscalls refused outright (EPERM): new processes/programs, sockets, signalling or tracing
# other processes, namespace/mount/root changes, filesystem mutation, privilege and limit changes,
# and kernel attack surface feature code never needs.
_X86_64_DENIED_SYSCALLS = {
    "fork": 57, "vfork": 58, "execve": 59, "execveat": 322,
    "socket": 41, "socketpair": 53, "connect": 42, "accept": 43, "accept4": 288, "bind": 49, "listen": 50,
    "kill": 62, "tkill": 200, "tgkill": 234, "rt_sigqueueinfo": 129, "rt_tgsigqueueinfo": 297,
    "pidfd_open": 434, "pidfd_send_signal": 424, "pidfd_getfd": 438,
    "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311,
    "mount": 165, "umount2": 166, "unshare": 272, "setns": 308, "chroot": 161, "pivot_root": 155,
    "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433,
    "mount_setattr": 442, "name_to_handle_at": 303, "open_by_handle_at": 304,
    "creat": 85, "unlink": 87, "unlinkat": 263, "rename": 82, "renameat": 264, "renameat2": 316,
    "mkdir": 83, "mkdirat": 258, "rmdir": 84, "link": 86, "linkat": 265, "symlink": 88, "symlinkat": 266,
    "chmod": 90, "fchmod": 91, "fchmodat": 268, "chown": 92, "fchown": 93, "lchown": 94, "fchownat": 260,
    "truncate": 76, "ftruncate": 77, "mknod": 133, "mknodat": 259, "utime": 132, "utimes": 235,
    "utimensat": 280, "futimesat": 261, "setxattr": 188, "lsetxattr": 189, "fsetxattr": 190,
    "removexattr": 197, "lremovexattr": 198, "fremovexattr": 199,
    "setuid": 105, "setgid": 106, "setreuid": 113, "setregid": 114, "setresuid": 117, "setresgid": 119,
    "setgroups": 116, "setfsuid": 122, "setfsgid": 123, "capset": 126, "setrlimit": 160, "prctl": 157,
    "personality": 135,
    "memfd_create": 319, "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
    "bpf": 321, "perf_event_open": 298, "userfaultfd": 323, "keyctl": 250, "add_key": 248,
    "request_key": 249, "init_module": 175, "finit_module": 313, "delete_module": 176, "kexec_load": 246,
    "kexec_file_load": 320, "reboot": 169, "swapon": 167, "swapoff": 168, "acct": 163, "quotactl": 179,
    "settimeofday": 164, "clock_settime": 227, "adjtimex": 159, "sethostname": 170, "setdomainname": 171,
    "iopl": 172, "ioperm": 173, "lookup_dcookie": 212, "vmsplice": 278, "fanotify_init": 300,
    "inotify_init": 253, "inotify_init1": 294, "landlock_create_ruleset": 444,
}
_SYS_CLONE, _SYS_CLONE3, _SYS_OPEN, _SYS_OPENAT, _SYS_OPENAT2, _SYS_PRLIMIT64 = 56, 435, 2, 257, 437, 302
# O_WRONLY | O_RDWR | O_CREAT | O_TRUNC | O_APPEND: opening for anything but reading.
_OPEN_WRITE_FLAGS = 0x1 | 0x2 | 0x40 | 0x200 | 0x400

# classic BPF opcodes
_LD_W_ABS = 0x20
_JEQ_K = 0x15
_JGE_K = 0x35
_JSET_K = 0x45
_RET_K = 0x06


def _seccomp_program() -> list[tuple[int, int, int, int]]:
    """The x86_64 seccomp filter as ``(code, jt, jf, k)`` instructions (see the table above)."""

    def arg_low(i: int) -> int:  # offset of the low 32 bits of syscall argument i in seccomp_data
        return 16 + 8 * i

    deny = _SECCOMP_RET_ERRNO | _EPERM
    allow = _SECCOMP_RET_ALLOW
    prog = [
        (_LD_W_ABS, 0, 0, 4),  # arch
        (_JEQ_K, 1, 0, _AUDIT_ARCH_X86_64),
        (_RET_K, 0, 0, _SECCOMP_RET_KILL_PROCESS),
        (_LD_W_ABS, 0, 0, 0),  # syscall number
        (_JGE_K, 0, 1, _X32_SYSCALL_BIT),  # the x32 ABI aliases every call: refuse it wholesale
        (_RET_K, 0, 0, deny),
    ]
    for number in sorted(set(_X86_64_DENIED_SYSCALLS.values())):
        prog += [(_JEQ_K, 0, 1, number), (_RET_K, 0, 0, deny)]
    # clone: threads only (numpy may start BLAS threads), never a new process.
    prog += [(_JEQ_K, 0, 4, _SYS_CLONE), (_LD_W_ABS, 0, 0, arg_low(0)), (_JSET_K, 1, 0, _CLONE_THREAD),
             (_RET_K, 0, 0, deny), (_RET_K, 0, 0, allow)]
    # clone3/openat2 pass their flags in a struct the filter cannot read; ENOSYS makes libc fall back.
    prog += [(_JEQ_K, 0, 1, _SYS_CLONE3), (_RET_K, 0, 0, _SECCOMP_RET_ERRNO | _ENOSYS)]
    prog += [(_JEQ_K, 0, 1, _SYS_OPENAT2), (_RET_K, 0, 0, _SECCOMP_RET_ERRNO | _ENOSYS)]
    # open/openat: read-only opens only.
    for number, flags_arg in ((_SYS_OPEN, 1), (_SYS_OPENAT, 2)):
        prog += [(_JEQ_K, 0, 4, number), (_LD_W_ABS, 0, 0, arg_low(flags_arg)),
                 (_JSET_K, 0, 1, _OPEN_WRITE_FLAGS), (_RET_K, 0, 0, deny), (_RET_K, 0, 0, allow)]
    # prlimit64: reading limits is fine, setting them (new_limit != NULL) is not.
    prog += [(_JEQ_K, 0, 6, _SYS_PRLIMIT64), (_LD_W_ABS, 0, 0, arg_low(2)), (_JEQ_K, 0, 2, 0),
             (_LD_W_ABS, 0, 0, arg_low(2) + 4), (_JEQ_K, 1, 0, 0), (_RET_K, 0, 0, deny),
             (_RET_K, 0, 0, allow)]
    prog.append((_RET_K, 0, 0, allow))
    return prog


class _SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte), ("jf", ctypes.c_ubyte), ("k", ctypes.c_uint)]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_SockFilter))]


def _libc():
    return ctypes.CDLL(None, use_errno=True)


def _install_seccomp(libc) -> str | None:
    """Install the filter; None on success, else why not."""
    if os.uname().machine != "x86_64":
        return f"seccomp filter only written for x86_64, this is {os.uname().machine}"
    prog = _seccomp_program()
    array = (_SockFilter * len(prog))(*[_SockFilter(*ins) for ins in prog])
    fprog = _SockFprog(len(prog), ctypes.cast(array, ctypes.POINTER(_SockFilter)))
    ulong = ctypes.c_ulong
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, ulong(1), ulong(0), ulong(0), ulong(0)) != 0:
        return f"PR_SET_NO_NEW_PRIVS failed: {os.strerror(ctypes.get_errno())}"
    if libc.prctl(_PR_SET_SECCOMP, ulong(_SECCOMP_MODE_FILTER), ctypes.byref(fprog), ulong(0), ulong(0)) != 0:
        return f"PR_SET_SECCOMP failed: {os.strerror(ctypes.get_errno())}"
    return None


def _drop_capabilities(libc) -> str | None:
    """Clear every capability of this process (used inside an unprivileged user namespace)."""

    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                    ("inheritable", ctypes.c_uint32)]

    header = Header(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3
    data = (Data * 2)()
    if libc.syscall(ctypes.c_long(126), ctypes.byref(header), ctypes.byref(data)) != 0:  # capset
        return f"capset failed: {os.strerror(ctypes.get_errno())}"
    return None


def _is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
        return True
    except OSError:
        return False


def _vm_size_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")


def harden(config: dict) -> dict:
    """Confine this process before any untrusted code runs; returns what was achieved.

    Order matters: namespaces and chroot need privileges that the uid drop removes; the resource
    limits come after the uid drop (RLIMIT_NPROC is per user); seccomp comes last because it forbids
    the calls made before it.
    """
    libc = _libc()
    report: dict = {"uid_before": os.getuid(), "notes": []}
    notes = report["notes"]
    vm_baseline = _vm_size_bytes()
    open_fds = [fd for fd in map(int, os.listdir("/proc/self/fd")) if _is_open(fd)]
    is_root = os.geteuid() == 0

    flags = _CLONE_NEWNET | _CLONE_NEWNS | _CLONE_NEWIPC | _CLONE_NEWUTS
    if not is_root:
        flags |= _CLONE_NEWUSER  # unprivileged user namespaces give the other namespaces without root
    in_namespaces = libc.unshare(ctypes.c_int(flags)) == 0
    if not in_namespaces:
        notes.append(f"unshare failed: {os.strerror(ctypes.get_errno())}")
    report["netns"] = in_namespaces

    report["chroot"] = False
    if config.get("root_dir") and (is_root or in_namespaces):
        try:
            os.chroot(config["root_dir"])
            os.chdir("/")
            report["chroot"] = True
        except OSError as e:
            notes.append(f"chroot failed: {e}")

    if is_root:
        try:
            os.setgroups([])
            os.setgid(_NOBODY)
            os.setuid(_NOBODY)
        except OSError as e:
            notes.append(f"dropping to uid {_NOBODY} failed: {e}")
    elif in_namespaces:
        error = _drop_capabilities(libc)
        if error:
            notes.append(error)
    report["uid"] = os.getuid()

    memory_bytes = vm_baseline + int(config["memory_mb"]) * 1024 * 1024
    cpu_s = int(config["cpu_lifetime_s"])
    limits = {
        "RLIMIT_CORE": (0, 0),
        "RLIMIT_FSIZE": (0, 0),
        "RLIMIT_NOFILE": (max(open_fds) + 1, max(open_fds) + 1),
        "RLIMIT_AS": (memory_bytes, memory_bytes),
        "RLIMIT_CPU": (cpu_s, cpu_s + 1),
        "RLIMIT_NPROC": (0, 0),
    }
    applied = {}
    for name, value in limits.items():
        try:
            resource.setrlimit(getattr(resource, name), value)
            applied[name] = value[0]
        except (OSError, ValueError) as e:
            notes.append(f"{name} not set: {e}")
    report["rlimits"] = applied
    report["vm_baseline_mb"] = round(vm_baseline / 2**20, 1)

    error = _install_seccomp(libc)
    report["seccomp"] = error is None
    if error:
        notes.append(error)
    report["network_isolated"] = bool(report["netns"] or report["seccomp"])
    report["environ_keys"] = sorted(os.environ)
    return report


# --------------------------------------------------------------------------- serving (worker only)


class _Timeout(BaseException):
    """Raised into feature code by SIGALRM; BaseException so `except Exception` cannot catch it."""


class _Alarm:
    """One-shot wall-clock alarm around each feature call.

    ``fired`` stays set until the next ``arm``: code can swallow the raised ``_Timeout`` (a ``return``
    in ``finally:`` discards it), but not the record that time ran out.
    """

    def __init__(self) -> None:
        self.armed = False
        self.fired = False
        signal.signal(signal.SIGALRM, self._fire)

    def _fire(self, signum, frame) -> None:
        if self.armed:
            self.armed = False
            self.fired = True
            raise _Timeout()

    def arm(self, seconds: float) -> None:
        self.fired = False
        self.armed = True
        signal.setitimer(signal.ITIMER_REAL, seconds)

    def disarm(self) -> None:
        self.armed = False
        signal.setitimer(signal.ITIMER_REAL, 0)


def clean_text(text: str, limit: int) -> str:
    """One line, at most ``limit`` characters, valid UTF-8 (lone surrogates replaced)."""
    text = " ".join(text[: 4 * limit].split())
    text = text.encode("utf-8", "replace").decode("utf-8")
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _short(text: str) -> str:
    return clean_text(text, MAX_MESSAGE_CHARS)


def _describe(error: Exception) -> str:
    try:
        text = str(error)[: 4 * MAX_MESSAGE_CHARS]
    except Exception:  # str() of an odd payload can itself fail (or run out of memory)
        text = "<unprintable>"
    return _short(hide_addresses(f"{type(error).__name__}: {text}"))


class _Server:
    def __init__(self) -> None:
        self.fresh_globals = build_restricted_globals_factory()
        self.alarm = _Alarm()
        self.compiled: dict[str, object] = {}

    def compile(self, code_id: str, source: str):
        """-> code object, or a rejection message. Checked again here: the worker does not take the
        parent's word for it."""
        if code_id in self.compiled:
            return self.compiled[code_id]
        code = compile_checked(source)
        if isinstance(code, str):
            return code
        if len(self.compiled) >= 64:
            self.compiled.pop(next(iter(self.compiled)))
        self.compiled[code_id] = code
        return code

    def run_one(self, code, obs: dict, n_features: int, timeout_s: float) -> list:
        entry = self._run_with_alarm(code, obs, n_features, timeout_s)
        if self.alarm.fired:  # whatever the code made of the timeout (`finally: return ...`), it is one
            return _timeout_entry(timeout_s)
        return entry

    def _run_with_alarm(self, code, obs: dict, n_features: int, timeout_s: float) -> list:
        try:
            self.alarm.arm(timeout_s)
            try:
                namespace = self.fresh_globals()
                exec(code, namespace)
                function = namespace.get("compute_features")
                if not callable(function):
                    return ["rejected", "compute_features is not a function", None, None]
                result = function(obs)
            finally:
                self.alarm.disarm()
            kind, message, values, names = convert_result(result, n_features)
            return [kind, _short(message), values, names]
        except _Timeout:
            self.alarm.disarm()
            return _timeout_entry(timeout_s)
        except MemoryError:
            self.alarm.disarm()
            return ["memory", "MemoryError: feature code exceeded its memory limit", None, None]
        except Exception as e:  # anything the untrusted code raised
            self.alarm.disarm()
            return ["exception", _describe(e), None, None]

    def handle(self, request: dict) -> dict:
        observations = unpack_observations(request["obs"])
        code = self.compile(request["code_id"], request["source"])
        if isinstance(code, str):
            return {"results": [["rejected", _short(code), None, None]] * len(observations)}
        results = [self.run_one(code, private_copy(obs), request["n_features"], request["timeout_s"])
                   for obs in observations]
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return {"results": results, "cpu_s": usage.ru_utime + usage.ru_stime}


def _timeout_entry(timeout_s: float) -> list:
    return ["timeout", f"feature code ran longer than {timeout_s:g} s", None, None]


def private_copy(obs: dict) -> dict:
    """One observation as fresh arrays that share memory with nothing: the unpacked arrays are views
    into the whole batch (and pickle shares an array sent twice), so ``obs[k].base`` would let one
    observation's code rewrite the observations after it."""
    return {key: value.copy() for key, value in obs.items()}


def unpack_observations(packed: dict) -> list[dict]:
    """Inverse of the parent's packing: a list of observation dicts (views into stacked arrays;
    :func:`private_copy` each one before feature code sees it)."""
    if "list" in packed:
        return packed["list"]
    stacked = packed["stacked"]
    # `[i, ...]` keeps 0-d entries as 0-d arrays, exactly what the parent sent.
    return [{k: v[i, ...] for k, v in stacked.items()} for i in range(packed["n"])]


def _read_exact(fd: int, n: int) -> bytes | None:
    chunks = []
    while n:
        chunk = os.read(fd, min(n, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def _read_frame(fd: int) -> bytes | None:
    header = _read_exact(fd, FRAME_HEADER.size)
    if header is None:
        return None
    (length,) = FRAME_HEADER.unpack(header)
    if length > MAX_REQUEST_BYTES:
        raise ValueError(f"request of {length} bytes")
    return _read_exact(fd, length)


def _write_frame(fd: int, payload: bytes) -> None:
    data = memoryview(FRAME_HEADER.pack(len(payload)) + payload)
    while data:
        written = os.write(fd, data)
        data = data[written:]


def _warm_up(server: _Server) -> str | None:
    """Touch everything lazily loaded (pickle of arrays, numpy helpers) while files are still reachable."""
    sample = {"grid": np.zeros((5, 5, 3), np.uint8), "agent_pos": np.array([1, 2]), "agent_dir": np.array(0)}
    for protocol in (4, 5):
        pickle.loads(pickle.dumps(sample, protocol=protocol))
    stacked = {k: np.stack([v, v]) for k, v in sample.items()}
    packed = pickle.loads(pickle.dumps({"stacked": stacked, "n": 2}, protocol=5))
    sample = private_copy(unpack_observations(packed)[1])
    source = (
        "import math\nimport numpy as np\n"
        "def compute_features(obs):\n"
        "    g = np.asarray(obs['grid'], dtype=np.float64)\n"
        "    a = [g.sum(), g.mean(), g.std(), np.median(g), np.percentile(g, 50), np.unique(g).size,\n"
        "         np.linalg.norm(g[..., 0]), np.argwhere(g > 0).size, np.pad(g, 1).sum(), math.sqrt(4),\n"
        "         np.sort(g.ravel())[0], np.histogram(g.ravel(), bins=3)[0].sum(), np.isin(g, [1]).sum(),\n"
        "         len(f'{g.sum():.1f}{compute_features!r}' + '%s' % (np.sum,) + str(g[0, 0]) + repr(len))]\n"
        "    return {str(i): float(v) for i, v in enumerate(a)}\n"
    )
    code = server.compile("warmup", source)
    outcome = ["rejected", code] if isinstance(code, str) else server.run_one(code, sample, 14, 5.0)
    if not isinstance(code, str):
        server.run_one(code, sample, 2, 5.0)  # the wrong_length path
    json.dumps({"x": [1.0, math.nan]})
    server.compiled.clear()
    return None if outcome[0] == "ok" else f"warm-up feature code failed: {outcome[0]}: {outcome[1]}"


def main(config_text: str) -> None:
    config = json.loads(config_text)
    warnings.simplefilter("ignore")
    np.seterr(all="ignore")
    sys.setrecursionlimit(int(config.get("recursion_limit", 1000)))
    stdin_fd, stdout_fd = 0, 1
    server = _Server()
    warm_up_problem = _warm_up(server)
    report = harden(config)
    if warm_up_problem:
        report["notes"].append(warm_up_problem)
    report.update(ready=True, pid=os.getpid())
    _write_frame(stdout_fd, json.dumps(report).encode())
    while True:
        frame = _read_frame(stdin_fd)
        if frame is None:
            return  # parent closed the pipe
        reply = server.handle(pickle.loads(frame))
        _write_frame(stdout_fd, json.dumps(reply, allow_nan=True, ensure_ascii=False).encode())
