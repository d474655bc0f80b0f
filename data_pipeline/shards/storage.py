"""Remote storage that rides out transient failures: one file system per URL, retries configured.

Shards and manifests are read over fsspec. A week-long run sees connection resets, 5xx answers and
stalled reads from HTTP servers and object stores; each read retries them with exponential backoff
up to ``Retry.attempts`` tries, then fails (the caller's error names the URL and the sample).

- S3 (s3fs on botocore): botocore's own retries, ``config_kwargs={"retries": {"mode": "standard",
  "total_max_attempts": N}}`` (connection errors, 5xx, throttling; jittered backoff, at most 20 s;
  botocore's ``max_attempts`` would count retries only); s3fs itself retries a body cut midway.
- HTTP (fsspec on aiohttp, which has no retries of its own): one aiohttp client middleware,
  given through fsspec's ``client_kwargs``, retries connection errors, timeouts and 5xx.

Settings already in ``storage_options`` win over these defaults.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
from dataclasses import dataclass
from typing import TYPE_CHECKING

import fsspec

if TYPE_CHECKING:  # imported where HTTP is read: local runs skip its 0.1-0.2 s at every start
    import aiohttp

# Answers that say "try again later", not "no": timeout, throttled, server and gateway errors.
TRANSIENT_STATUS = frozenset({408, 429, 500, 502, 503, 504})


def transient_errors() -> tuple[type[BaseException], ...]:
    """Failures of the connection or of the transfer, not of the request: worth another try."""
    import aiohttp

    return aiohttp.ClientConnectionError, aiohttp.ClientPayloadError, TimeoutError


@dataclass(frozen=True)
class Retry:
    """How remote reads ride out transient failures before they give up."""

    attempts: int = 6
    """Tries per request, the first included; 1 turns retries off."""
    first_wait_s: float = 0.25
    """Longest wait before the first HTTP retry; doubles at each retry (S3: botocore's backoff)."""
    max_wait_s: float = 8.0
    """Longest wait between two HTTP tries."""
    timeout_s: float = 60.0
    """Seconds a connect or a read may stall before the try counts as failed."""

    def __post_init__(self) -> None:
        if self.attempts < 1 or min(self.first_wait_s, self.max_wait_s) < 0 or self.timeout_s <= 0:
            raise ValueError(f"need attempts >= 1, waits >= 0 and timeout_s > 0; got {self}")

    def wait(self, retry: int) -> float:
        """Seconds to wait before retry number ``retry`` (1, 2, ...): half of the backoff, plus
        up to as much again at random, so that many ranks cut off together do not retry in step."""
        backoff = min(self.first_wait_s * 2 ** (retry - 1), self.max_wait_s)
        return backoff * (0.5 + 0.5 * random.random())


DEFAULT_RETRY = Retry()


@dataclass(frozen=True)
class RetryMiddleware:
    """aiohttp client middleware: a request that fails transiently is sent again after a wait."""

    retry: Retry
    """Attempts and backoff."""

    async def __call__(self, request: aiohttp.ClientRequest, handler) -> aiohttp.ClientResponse:
        for retry in range(1, self.retry.attempts):
            try:
                response = await self.send(request, handler)
                if response.status not in TRANSIENT_STATUS:
                    return response
                response.release()
            except transient_errors():
                pass
            await asyncio.sleep(self.retry.wait(retry))
        return await self.send(request, handler)

    @staticmethod
    async def send(request: aiohttp.ClientRequest, handler) -> aiohttp.ClientResponse:
        """One try; a ranged body is read inside it, so a connection cut mid-body is retried too
        (the body is bounded, and fsspec reads a ranged body whole anyway)."""
        response = await handler(request)
        if response.status == 206:
            await response.read()
        return response


def with_retries(url: str, storage_options: dict | None, retry: Retry) -> dict:
    """``storage_options`` plus this protocol's retry and timeout settings (given ones win)."""
    options = dict(storage_options or {})
    protocol = fsspec.utils.get_protocol(url)
    if protocol in ("http", "https"):
        client = dict(options.get("client_kwargs") or {})
        client.setdefault("middlewares", (RetryMiddleware(retry),))
        import aiohttp

        stall = aiohttp.ClientTimeout(sock_connect=retry.timeout_s, sock_read=retry.timeout_s)
        client.setdefault("timeout", stall)
        options["client_kwargs"] = client
    elif protocol in ("s3", "s3a"):
        config = dict(options.get("config_kwargs") or {})
        config.setdefault("retries", {"mode": "standard", "total_max_attempts": retry.attempts})
        config.setdefault("connect_timeout", retry.timeout_s)
        config.setdefault("read_timeout", retry.timeout_s)
        options["config_kwargs"] = config
    return options


def filesystem(url: str, storage_options: dict | None = None, retry: Retry = DEFAULT_RETRY):
    """(file system, path) of ``url``, reads retried as ``retry`` says."""
    return fsspec.core.url_to_fs(url, **with_retries(url, storage_options, retry))


def transient(err: BaseException) -> bool:
    """Whether a read failed for a reason that retrying later could fix (the retries ran out)."""
    import aiohttp

    if isinstance(err, aiohttp.ClientResponseError):
        return err.status in TRANSIENT_STATUS
    return isinstance(err, transient_errors() + botocore_transient_errors())


def botocore_transient_errors() -> tuple[type[BaseException], ...]:
    """botocore's connection and transfer errors, if the optional S3 support is installed."""
    try:
        from botocore.exceptions import ConnectionError, HTTPClientError
    except ImportError:
        return ()
    return ConnectionError, HTTPClientError


def parse_options(pairs: list[str]) -> dict:
    """``--...-option KEY=VALUE`` strings -> storage options (values parsed as JSON when possible,
    else strings)."""
    options = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            # The value may be a secret: name neither it nor the text around it.
            raise argparse.ArgumentTypeError("a storage option is not KEY=VALUE")
        try:
            options[key] = json.loads(value)
        except ValueError:
            options[key] = value
    return options
