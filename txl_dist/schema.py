"""Dataclasses from JSON objects: the one place that checks keys and value types.

`section_from_dict` refuses unknown keys (naming the closest valid one), missing required keys and
values of the wrong type (naming the expected type), and builds fields that are dataclasses
themselves from nested objects, so every error names the full `section.key`. The run config
(txl_dist.config) and the model config (txl_dist.model.config) both build through it.
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


def section_from_dict(cls: type[T], values: dict[str, Any], section: str = "") -> T:
    """Build dataclass `cls` from `values`, checking keys and types; errors name `section.key`
    (`section` is the dotted path of `values`, "" at the top). Every unknown key, wrong type,
    missing key and refused value of sections that could be built is reported at once: one
    ConfigError, its problems one a line after the first when there are several."""
    problems: list[str] = []
    built = _build(cls, values, section, problems)
    if len(problems) == 1:
        raise ConfigError(problems[0])
    if problems:
        raise ConfigError(
            f"{len(problems)} problems in the config:\n" + "\n".join(f"  {p}" for p in problems)
        )
    return built


def _build(cls: type[T], values: Any, section: str, problems: list[str]) -> T | None:
    """`cls` from `values`, or None after adding what is wrong to `problems`."""
    if not isinstance(values, dict):
        problems.append(f"{section} must be a JSON object, got {type(values).__name__}")
        return None
    known = len(problems)
    hints = typing.get_type_hints(cls)
    fields = {f.name for f in dataclasses.fields(cls)}
    built = {}
    for key, value in values.items():
        name = f"{section}.{key}" if section else key
        if key not in fields:
            problems.append(f"unknown key {name}{_suggestion(key, section, fields)}")
        elif dataclasses.is_dataclass(hints[key]):
            built[key] = _build(hints[key], value, name, problems)
        elif (item := _dataclass_items(hints[key])) is not None and isinstance(value, list):
            built[key] = [_build(item, v, f"{name}[{i}]", problems) for i, v in enumerate(value)]
        elif not _matches(value, hints[key]):
            # Imported when a value is shown, never at import: the model builds its config here
            # and needs torch only. From its module, not the pipeline's front door (which
            # imports numpy's data stack); an HF export ships it (txl_dist/hf/export.py).
            from data_pipeline.redact import redact

            shown = redact({key: value})[key]  # never echo a secret
            problems.append(
                f"{name} must be {_type_name(hints[key])}, got {shown!r} ({type(value).__name__})"
            )
        else:
            built[key] = value
    required = [
        f.name
        for f in dataclasses.fields(cls)
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    ]
    if missing := [key for key in required if key not in values]:
        prefix = f"{section}." if section else ""
        problems.append(f"missing key {', '.join(prefix + k for k in missing)}")
    if len(problems) > known:  # its own values are checked once its keys and types are right
        return None
    try:
        return cls(**built)
    except ValueError as err:
        problems.append(str(err))
        return None


def _dataclass_items(hint: Any) -> type | None:
    """The item class of a `list[SomeDataclass]` hint (optional or not), else None."""
    union = typing.get_origin(hint) in (typing.Union, types.UnionType)
    for arm in typing.get_args(hint) if union else (hint,):
        if typing.get_origin(arm) is list and dataclasses.is_dataclass(typing.get_args(arm)[0]):
            return typing.get_args(arm)[0]
    return None


def _suggestion(key: str, section: str, fields: set[str]) -> str:
    close = difflib.get_close_matches(key, sorted(fields), n=1)
    if close:
        return f" (did you mean {section + '.' if section else ''}{close[0]}?)"
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
    if origin is dict:
        return "a JSON object"
    if origin is not None:
        return str(hint).replace("typing.", "")
    return getattr(hint, "__name__", str(hint))
