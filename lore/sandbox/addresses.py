"""Text without memory addresses: what feature code formats never shows ``" at 0x..."``.

The default text of functions, iterators, bound methods ... holds their address, which differs
between processes, so features built from it would not be a function of the observation. Two parts:
the rewrite of the checked syntax tree (:class:`AddressFreeFormatting`, applied by
:mod:`lore.sandbox.checker`) and the hooks and builtins that the rewritten code calls at run time
(:func:`address_free_builtins`, installed by :mod:`lore.sandbox.namespace`). Standard library and
numpy only: the worker process loads this module.
"""

from __future__ import annotations

import ast
import re

import numpy as np

# Hooks the rewritten code calls. Feature code cannot spell them: names starting with "__" are refused.
_FORMAT_HOOK = "__sandbox_format_value__"
_MOD_HOOK = "__sandbox_mod__"
_IMOD_HOOK = "__sandbox_imod__"
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


class AddressFreeFormatting(ast.NodeTransformer):
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


def address_free_builtins() -> dict:
    """The builtins that keep addresses out of text: ``repr``, ``str`` and the rewrite's hooks."""
    return {"repr": _address_free_repr, "str": _AddressFreeStr,
            _FORMAT_HOOK: _address_free, _MOD_HOOK: _mod, _IMOD_HOOK: _imod}
