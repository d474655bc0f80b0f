"""Secrets out of everything we write or print: configs, checkpoints, wandb, logs, errors.

One rule, applied wherever a config, a URL or a message built from them leaves the process:
- every string under a storage section (`storage_options` and the like: fsspec credentials
  hide under many names);
- the string value of a key whose name is a credential's: one of its words holds secret,
  password or the like, the whole name is a known one (`key`, `token`, `sig`, ...), or it
  ends in a known name of several words (`aws_session_token`, `wandb_api_key`). Names are
  matched by whole words, never by prefix, so ordinary settings (`n_token`, `max_tokens`,
  `tokenizer`, `sort_key`) keep their values, and numbers are never secrets;
- the user-info of a URL (`http://user:p@ss@host` -> `http://***@host`, up to the host's last
  `@`; a password holding `/`, `?`, `#` or a space, which ends a URL's authority, up to the
  line's last `@`) and query or fragment parameters whose name, percent-decoded, is a
  credential's (`?X-Amz-Signature=`, `?sig=`, `#access_token=`, `;jsessionid=`) or merely
  holds one of the stems key, token, secret, passw(or)d, pwd, sig(nature), credential, auth
  anywhere (`?subscription-key=`, `?accesstoken=`, `?clientsecret=`): services name their
  credentials freely, and a plain parameter hidden in an error line costs nothing.

Every pattern runs in time linear in the text: messages quote fields of untrusted files.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import unquote_plus

REDACTED = "***"
# Dicts whose every string is a secret candidate (credentials under backend-specific names).
SECRET_SECTIONS = frozenset({"storage_options", "out_options", "client_kwargs", "headers"})
# A name with one of these inside any of its words names a secret (`aws_secret_access_key`,
# `X-Amz-Credential`, `clientsecret`, `dbpasswd`): no ordinary setting holds them.
SECRET_STEMS = ("secret", "passw", "passphrase", "credential", "signature", "jwt", "hmac")
# Names (words joined by `_`, lower case) of credentials that hold no such word: a name is one
# of them, or ends in one of several words (`my_api_key`; but `n_token` is not `token`).
CREDENTIAL_NAMES = frozenset(
    {
        "key", "token", "auth", "authorization", "sig", "sas", "code", "pw", "pwd", "apikey",
        "hf_token", "api_key", "api_token", "access_key", "access_key_id", "secret_key",
        "private_key", "account_key", "sas_token", "access_token", "refresh_token",
        "session_token", "security_token", "auth_token", "bearer_token", "id_token",
        "connection_string", "private_token", "auth_key", "session", "session_id",
        "sessionid", "jsessionid", "session_key", "ticket", "cookie",
    }
)  # fmt: skip
_COMPOUND_NAMES = tuple(f"_{name}" for name in CREDENTIAL_NAMES if "_" in name)
_NAME_PARTS = re.compile(r"[^A-Za-z0-9]+|(?<=[a-z0-9])(?=[A-Z])")
# The authority after `://` ends at the first /, ?, # or space.
_AUTHORITY_END = re.compile(r"[/?#\s]")
# `?name=value`, `&name=value`, `#name=value` (a fragment's, as OAuth's), `;name=value`: a name
# never holds ?, &, # or ;, so each try stops at the next one. A value ends before a colon
# that ends a word (`?token=abc: not found`), so the message's own colon stays.
_QUERY_PARAMETER = re.compile(r"([?&#;])([^?&#;=\s'\"]*)=((?:[^?&#;:\s'\"]|:(?=[^\s]))*)")
# A URL parameter's name holding one of these anywhere names a credential (by pattern, not by
# a list of names: `Ocp-Apim-Subscription-Key`, `authtoken`, `X-Goog-Credential`).
_SECRET_PARAMETER = re.compile(r"key|token|secret|passw|pwd|sig|credential|auth", re.I)


def is_secret_name(name: str) -> bool:
    """Whether a key or query parameter named `name` holds a secret."""
    words = [w.lower() for w in _NAME_PARTS.split(name) if w]
    joined = "_".join(words)
    return (
        joined in CREDENTIAL_NAMES
        or joined.endswith(_COMPOUND_NAMES)
        or any(stem in w for w in words for stem in SECRET_STEMS)
    )


def is_secret_parameter(name: str) -> bool:
    """Whether a URL's query or fragment parameter `name` (percent-decoded) holds a secret."""
    return bool(_SECRET_PARAMETER.search(name)) or is_secret_name(name)


def redact_text(text: str) -> str:
    """A message or URL with URL credentials and secret query parameters replaced by ***."""
    first, *urls = text.split("://")  # each scanned once: linear in the text
    text = "://".join([first, *map(_without_userinfo, urls)])
    return _QUERY_PARAMETER.sub(_redact_parameter, text)


def _without_userinfo(rest: str) -> str:
    """What follows a `://`, its user-info (if any) replaced by ***."""
    at = _userinfo_end(rest)
    return rest if at < 0 else REDACTED + rest[at:]


def _userinfo_end(rest: str) -> int:
    """The index of the @ that ends the user-info at the start of `rest`, or -1 for none: the
    authority's last @ (a password may hold @ or a quote); else, when the authority reads
    `user:password` (not `host:port`), the last @ of the line, as a password holding /, ?, # or
    a space ends the authority early (`http://u:p/ss@host`) and would otherwise show."""
    found = _AUTHORITY_END.search(rest)
    authority_end = found.start() if found else len(rest)
    at = rest.rfind("@", 0, authority_end)
    colon = rest.find(":", 0, authority_end)
    if at >= 0 or colon < 0 or rest[colon + 1 : authority_end].isdigit():
        return at
    line_end = rest.find("\n", authority_end)
    return rest.rfind("@", authority_end, len(rest) if line_end < 0 else line_end)


def _redact_parameter(match: re.Match) -> str:
    mark, name, value = match.groups()
    secret = value and is_secret_parameter(unquote_plus(name))  # `access%5Ftoken` too
    return f"{mark}{name}={REDACTED if secret else value}"


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
