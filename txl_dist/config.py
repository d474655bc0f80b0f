"""Typed config sections from JSON: the one place that checks keys and value types.

Every section is a dataclass; `section_from_dict` refuses unknown keys (naming the closest valid
one) and values of the wrong type (naming the expected type), so a typo in a run config fails
before any process group or model is built.
"""

from __future__ import annotations

import dataclasses
import difflib
import types
import typing
from typing import Any, TypeVar

T = TypeVar("T")


class ConfigError(ValueError):
    """A config value or key is wrong; the message names it and says what to change."""


def section_from_dict(cls: type[T], values: dict[str, Any], section: str) -> T:
    """Build dataclass `cls` from `values`, checking keys and types; errors name `section.key`."""
    if not isinstance(values, dict):
        raise ConfigError(f"{section} must be a JSON object, got {type(values).__name__}")
    hints = typing.get_type_hints(cls)
    fields = {f.name for f in dataclasses.fields(cls)}
    for key, value in values.items():
        if key not in fields:
            raise ConfigError(f"unknown key {section}.{key}{_suggestion(key, section, fields)}")
        if not _matches(value, hints[key]):
            raise ConfigError(
                f"{section}.{key} must be {_type_name(hints[key])}, got {value!r} "
                f"({type(value).__name__})"
            )
    try:
        return cls(**values)
    except ValueError as err:
        raise ConfigError(str(err)) from err


def _suggestion(key: str, section: str, fields: set[str]) -> str:
    close = difflib.get_close_matches(key, sorted(fields), n=1)
    if close:
        return f" (did you mean {section}.{close[0]}?)"
    return f"; valid keys: {', '.join(sorted(fields))}"


def _matches(value: Any, hint: Any) -> bool:
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_matches(value, arm) for arm in typing.get_args(hint))
    if hint is type(None):
        return value is None
    if origin is list:
        (item,) = typing.get_args(hint)
        return isinstance(value, list) and all(_matches(v, item) for v in value)
    if origin is dict:
        return isinstance(value, dict)
    if hint is Any:
        return True
    if hint is float:
        # JSON has one number type: 1 is a fine float, True is not.
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, hint)


def _type_name(hint: Any) -> str:
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type_name(arm) for arm in typing.get_args(hint))
    if hint is type(None):
        return "null"
    if origin is not None:
        return str(hint).replace("typing.", "")
    return getattr(hint, "__name__", str(hint))
