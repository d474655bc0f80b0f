"""Secrets out of everything we write or print: configs, checkpoints, wandb, logs, errors.

One rule, applied wherever a config, a URL or a message built from them leaves the process:
- every string under `storage_options` (fsspec credentials hide under many names);
- the string value of any key whose name says key, secret, token, password or credential
  (numbers are never secrets, so `n_token: 267735` stays);
- the user-info of a URL (`http://user:pw@host` -> `http://***@host`) and query parameters
  whose name says so (presigned `...?X-Amz-Signature=...`).
"""

from __future__ import annotations

import re
from typing import Any

REDACTED = "***"
# Dicts whose every string is a secret candidate (credentials under backend-specific names).
SECRET_SECTIONS = frozenset({"storage_options", "out_options", "client_kwargs", "headers"})
_SECRET_WORDS = ("key", "secret", "token", "password", "passwd", "credential", "auth", "signature")
_NAME_PARTS = re.compile(r"[^A-Za-z0-9]+|(?<=[a-z0-9])(?=[A-Z])")
_URL_USERINFO = re.compile(r"([a-zA-Z][a-zA-Z0-9+.-]*://)[^/@\s'\"]+@")
_SECRET_QUERY = re.compile(
    r"([?&][^=&\s'\"#]*(?:" + "|".join(_SECRET_WORDS) + r")[^=&\s'\"#]*=)[^&\s'\"#]+",
    re.IGNORECASE,
)


def is_secret_name(name: str) -> bool:
    """Whether a key named `name` holds a secret: one of its words is a secret word."""
    words = [w.lower() for w in _NAME_PARTS.split(name) if w]
    return any(w.startswith(secret) for w in words for secret in _SECRET_WORDS)


def redact_text(text: str) -> str:
    """A message or URL with URL credentials and secret query parameters replaced by ***."""
    text = _URL_USERINFO.sub(rf"\g<1>{REDACTED}@", text)
    return _SECRET_QUERY.sub(rf"\g<1>{REDACTED}", text)


def redact(value: Any, secret: bool = False) -> Any:
    """A copy of a JSON-like value with every secret string replaced by ***."""
    if isinstance(value, dict):
        return {
            k: redact(v, secret or k in SECRET_SECTIONS or is_secret_name(str(k)))
            for k, v in value.items()
        }
    if isinstance(value, (list, tuple)):
        return type(value)(redact(v, secret) for v in value)
    if isinstance(value, str):
        return REDACTED if secret else redact_text(value)
    return value
