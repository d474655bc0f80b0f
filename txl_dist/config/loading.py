"""A run config from its JSON file (any fsspec URL), `--set` and `TXL_SET` overrides, and
`model.n_token: "auto"` read from the data's manifest."""

from __future__ import annotations

import copy
import dataclasses
import json
import re
from typing import Any

from data_pipeline import redact_text
from txl_dist.config.sections import RunConfig, run_config_from_dict
from txl_dist.schema import ConfigError

TXL_SET = "TXL_SET"  # the environment variable of whitespace-separated overrides
_DOTTED_KEY = re.compile(r"[A-Za-z0-9_]+(?:\.[A-Za-z0-9_]+)+")


def apply_overrides(
    values: dict[str, Any], overrides: list[str], origin: str = "--set"
) -> dict[str, Any]:
    """Apply `section.key=value` strings (value parsed as JSON, else taken as a string); errors
    name them as `origin` (--set or TXL_SET)."""
    values = copy.deepcopy(values)
    for number, override in enumerate(overrides, 1):
        path, sep, raw = override.partition("=")
        if not sep or "." not in path:
            raise ConfigError(_malformed(override, origin, f"entry {number} of {len(overrides)}"))
        try:
            value = json.loads(raw)
        except json.JSONDecodeError as err:
            if raw.lstrip().startswith(("{", "[")):  # meant as JSON: a plain text it is not
                raise ConfigError(  # the value is not echoed: it may hold a secret
                    f"{origin} {path}: the value is not valid JSON ({err.msg} at character "
                    f"{err.pos}); quote it for the shell, e.g. --set '{path}={{\"key\": 1}}'"
                ) from None
            value = raw
        *parents, leaf = path.split(".")
        node = values
        for part in parents:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"{origin} {path}: {part} is not a section")
        node[leaf] = value
    return values


def _malformed(entry: str, origin: str, position: str) -> str:
    """The error for an entry that is not section.key=value. Only a leading `section.key` is
    echoed: the rest may be a secret, typed with a wrong separator (--set
    data.storage_options.secret:VALUE) or split off at a space by TXL_SET (`...=Bearer sk-...`)."""
    key = _DOTTED_KEY.match(entry)
    sections = {field.name for field in dataclasses.fields(RunConfig)}
    if key and key.group(0).partition(".")[0] in sections:
        shown = f"{key.group(0)}..."
    else:
        shown = "not shown: it may hold a secret"
    split = f"; {TXL_SET} splits at whitespace: set a value with spaces by --set"
    hint = split if origin == TXL_SET else ""
    return f"{origin} {position} ({shown}): expected section.key=value{hint}"


def naming_txl_set(message: str, env_overrides: list[str]) -> str:
    """`message`, saying where it came from when it names a key that TXL_SET set (a variable
    left set in a shell is easy to forget)."""
    keys = [entry.partition("=")[0] for entry in env_overrides]
    named = [k for k in keys if re.search(rf"(?<![\w.]){re.escape(k)}(?!\w)", message)]
    if not named:
        return message
    return f"{message} ({', '.join(named)} set by {TXL_SET} in the environment)"


def load_run_config(
    path: str, overrides: list[str] = (), env_overrides: list[str] = ()
) -> RunConfig:
    """Read a run config JSON file (any fsspec URL), apply --set overrides, then those of the
    TXL_SET environment variable, validate."""
    import fsspec

    try:
        with fsspec.open(path, "r") as f:
            values = json.load(f)
    except FileNotFoundError:  # not chained: fsspec's error holds the URL with any password
        raise ConfigError(f"config file {redact_text(path)} not found") from None
    except json.JSONDecodeError as err:
        raise ConfigError(f"config file {redact_text(path)} is not valid JSON: {err}") from err
    values = apply_overrides(values, list(overrides))
    values = apply_overrides(values, list(env_overrides), TXL_SET)
    return run_config_from_dict(resolve_vocab_size(values))


def _first_root(data: dict[str, Any]) -> str:
    """data.path, or the first mixed corpus's path (mixed corpora share one vocabulary)."""
    mix = data.get("mix")
    if isinstance(mix, list) and mix and isinstance(mix[0], dict):
        return str(mix[0].get("path"))
    return str(data.get("path"))


def _retry(data: dict[str, Any]):
    """data.read_attempts and read_timeout_s as a Retry, before the section is checked (values
    it refuses read with the defaults here, then get the section's own line)."""
    from data_pipeline.shards.storage import DEFAULT_RETRY, Retry

    attempts = data.get("read_attempts", DEFAULT_RETRY.attempts)
    timeout_s = data.get("read_timeout_s", DEFAULT_RETRY.timeout_s)
    try:
        return Retry(attempts=int(attempts), timeout_s=float(timeout_s))
    except (TypeError, ValueError):
        return DEFAULT_RETRY


def resolve_vocab_size(values: dict[str, Any]) -> dict[str, Any]:
    """Replace `model.n_token: "auto"` with the vocabulary size in the train split's manifest."""
    model, data = values.get("model"), values.get("data")
    if not isinstance(model, dict) or model.get("n_token") != "auto" or not isinstance(data, dict):
        return values
    from data_pipeline import DataError, load_manifest, manifest_url

    url = manifest_url(_first_root(data), data.get("train_split", "train"))
    options = data.get("storage_options") or {}
    if not isinstance(options, dict):  # not echoed: it may hold a secret
        raise ConfigError(
            f"data.storage_options must be a JSON object, got a {type(options).__name__}: "
            """give one, e.g. --set 'data.storage_options={"anon": true}'"""
        )
    try:
        vocab_size = load_manifest(url, options, _retry(data)).vocab_size
    except DataError as err:
        raise ConfigError(
            f"model.n_token=auto takes the vocabulary size from the data, but "
            f"{err}; prepare the data with txl-prepare, fix data.path, or set "
            "model.n_token to a number"
        ) from err
    return {**values, "model": {**model, "n_token": vocab_size}}
