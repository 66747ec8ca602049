"""Strict conversion between a nested mapping and the typed dataclass tree: an unknown key or a value of the
wrong type is a :class:`~lore.validation.ConfigError` that names the key."""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from typing import Any, Literal, Union

from lore.validation import ConfigError, show


def _check_value(tp: Any, value: Any, key: str) -> Any:
    origin = typing.get_origin(tp)
    if tp is Any:
        return value
    if origin is Literal:
        choices = typing.get_args(tp)
        if value not in choices:
            raise ConfigError(f"{key}: {show(value)} is not one of {list(choices)}")
        return value
    if origin in (Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _check_value(arg, value, key)
            except ConfigError as e:
                errors.append(str(e))
        raise ConfigError(errors[0] if errors else f"{key}: invalid value {show(value)}")
    if origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{key}: expected a list, got {type(value).__name__} {show(value)}")
        (item_tp, *_) = typing.get_args(tp) or (Any,)
        return [_check_value(item_tp, v, f"{key}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{key}: expected a mapping, got {type(value).__name__}")
        return dict(value)
    if dataclasses.is_dataclass(tp):
        return from_dict(tp, value, key)
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{key}: expected true/false, got {show(value)}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, float) and value.is_integer():
                return int(value)
            raise ConfigError(f"{key}: expected an integer, got {show(value)}")
        return value
    if tp is float:
        if isinstance(value, str):
            # YAML 1.1 reads "1e-3" (no dot) as a string; accept any float literal.
            try:
                value = float(value)
            except ValueError:
                raise ConfigError(f"{key}: expected a number, got {show(value)}") from None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{key}: expected a number, got {show(value)}")
        try:
            number = float(value)
        except OverflowError:  # an int beyond the float range (10**400)
            raise ConfigError(f"{key}: {show(value)} is out of range") from None
        if not math.isfinite(number):
            raise ConfigError(f"{key}: expected a finite number, got {show(value)}")
        return number
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"{key}: expected a string, got {show(value)}")
        return value
    raise ConfigError(f"{key}: unsupported type {tp}")


def from_dict(cls: type, data: Any, prefix: str = "") -> Any:
    """The dataclass ``cls`` built from the mapping ``data``, every key and type checked (a :class:`ConfigError`
    naming the key, ``prefix`` its dotted path); no range or cross-field check (:mod:`lore.config.validate`)."""
    if not isinstance(data, dict):
        raise ConfigError(f"{prefix or 'config'}: expected a mapping, got {type(data).__name__} {show(data)}")
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    for key in data:
        if key not in names:
            where = f"{prefix}.{key}" if prefix else key
            raise ConfigError(f"unknown config key '{where}' (valid: {', '.join(sorted(names))})")
    kwargs = {}
    for f in dataclasses.fields(cls):
        if f.name in data:
            where = f"{prefix}.{f.name}" if prefix else f.name
            kwargs[f.name] = _check_value(hints[f.name], data[f.name], where)
    return cls(**kwargs)


def to_dict(cfg: Any) -> dict:
    return dataclasses.asdict(cfg)
