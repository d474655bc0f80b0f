"""Jinja's sandbox with a bound on what one template may build.

The sandbox keeps a template from code, not from memory: `{{ 'a' * 10**10 }}`,
`{{ 'a'|center(10**10) }}` or `'%10000000000s'` allocate gigabytes in one operation, and a
template's output grows with its loops. Here the operations that build a string, list or number
from a count (repetition, powers, widths of padding and formatting, lipsum's paragraphs) are
checked against MAX_CHARS before they run, and the output is joined only up to MAX_CHARS.
"""

from __future__ import annotations

import re
import string
from collections.abc import Callable, Iterable
from typing import Any

from jinja2.exceptions import SecurityError
from jinja2.sandbox import SandboxedEnvironment

MAX_CHARS = 1 << 24
"""The most characters (items, or bytes of a number) one template operation or output may make:
16 Mi, far above any prompt, far below what would exhaust memory."""
PRINTF_WIDTHS = re.compile(r"%(?:\([^)]*\))?[-#0 +]*(\*|\d*)(?:\.(\*|\d*))?")
WIDTH_FILTERS = ("center", "indent", "format")
"""Filters that pad to a width or format (their counts checked like a padding method's)."""
PADDING = frozenset({"center", "ljust", "rjust", "zfill", "expandtabs"})
"""String methods that pad to a width."""


class BoundedSandbox(SandboxedEnvironment):
    """Jinja's sandbox, refusing what would build more than MAX_CHARS (SecurityError)."""

    intercepted_binops = frozenset({"*", "**", "%"})

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.concat = bounded_concat

    def call_binop(self, context, operator: str, left: Any, right: Any) -> Any:
        if operator == "*":
            check_repeat(left, right)
            check_repeat(right, left)
        elif operator == "**" and isinstance(left, int) and isinstance(right, int):
            check_size(abs(right) * max(abs(left).bit_length() - 1, 0) // 8, "a power")
        elif operator == "%" and isinstance(left, str):
            check_format(left, printf_widths(left), right if isinstance(right, tuple) else (right,))
        return super().call_binop(context, operator, left, right)

    def call(__self, __context, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N805
        padding = isinstance(getattr(__obj, "__self__", None), str) and __obj.__name__ in PADDING
        if padding or __obj is __self.globals.get("lipsum"):
            check_counts(__obj.__name__, (*args, *kwargs.values()))
        return super().call(__context, __obj, *args, **kwargs)

    def wrap_str_format(self, value: Any) -> Callable[..., str] | None:
        wrapped = super().wrap_str_format(value)
        if wrapped is None:
            return None
        fields = list(string.Formatter().parse(value.__self__))
        widths = [int(n) for _, _, spec, _ in fields if spec for n in re.findall(r"\d+", spec)]

        def checked(*args: Any, **kwargs: Any) -> str:
            check_format(value.__self__, widths, (*args, *kwargs.values()))
            return wrapped(*args, **kwargs)

        return checked


def bounded(environment: BoundedSandbox) -> BoundedSandbox:
    """`environment` with its width-taking filters checked (filters are called directly)."""
    for name in WIDTH_FILTERS:
        environment.filters[name] = counted_filter(name, environment.filters[name])
    return environment


def counted_filter(name: str, apply: Callable[..., Any]) -> Callable[..., Any]:
    def checked(value: Any, *args: Any, **kwargs: Any) -> Any:
        if name != "format":
            check_counts(f"the {name} filter", (*args, *kwargs.values()))
        elif isinstance(value, str):
            check_format(value, printf_widths(value), (*args, *kwargs.values()))
        return apply(value, *args, **kwargs)

    return checked


def printf_widths(template: str) -> list[int]:
    """The widths and precisions written in a printf-style format."""
    found = (n for match in PRINTF_WIDTHS.finditer(template) for n in match.groups())
    return [int(n) for n in found if n and n.isdigit()]


def check_format(template: str, widths: list[int], args: Iterable[Any]) -> None:
    """A format's written widths, and the counts it may take from its arguments, bounded."""
    check_size(max(widths, default=0), "a format's width")
    if "*" in template or "{" in template.partition(":")[2]:  # widths taken from arguments
        check_counts("a format", args)


def check_counts(what: str, args: Iterable[Any]) -> None:
    """Counts passed where they set a width, a repetition or a length, bounded."""
    for arg in args:
        if isinstance(arg, int) and not isinstance(arg, bool):
            check_size(abs(arg), f"{what}'s count")


def check_repeat(sequence: Any, times: Any) -> None:
    if isinstance(sequence, (str, bytes, list, tuple)) and isinstance(times, int):
        check_size(len(sequence) * times, "a repetition")


def check_size(size: int, what: str) -> None:
    if size > MAX_CHARS:
        raise SecurityError(f"{what} of {size:,} is past the {MAX_CHARS:,} a template may build")


def bounded_concat(pieces: Iterable[str]) -> str:
    """A template's output joined, refused once it passes MAX_CHARS."""
    kept, size = [], 0
    for piece in pieces:
        size += len(piece)
        check_size(size, "an output")
        kept.append(piece)
    return "".join(kept)
