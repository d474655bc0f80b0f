"""Jinja's sandbox with a bound on what one template may build.

The sandbox keeps a template from code, not from memory: `{{ 'a' * 10**10 }}`,
`{{ 'a'|center(10**10) }}` or `'%10000000000s'` allocate gigabytes in one operation, and a
template's output grows with its loops, and a loop can grow a string or a list a piece at a time
(`~`, `+`, `.append`, a `{% set %}` block). Here the operations that build a string, list or
number (repetition, joins and sums, replacing, powers, widths of padding and formatting,
lipsum's paragraphs) are checked against MAX_CHARS before they run, the output is joined only up
to MAX_CHARS, and what one render builds in all (those operations, the items appended to lists,
the ranges its loops count through) against TOTAL_CHARS. Loops over what was already built are
not counted: they take time, not memory.
"""

from __future__ import annotations

import functools
import re
import string
from collections.abc import Callable, Iterable
from typing import Any

from jinja2.compiler import CodeGenerator
from jinja2.environment import Template
from jinja2.exceptions import SecurityError
from jinja2.runtime import markup_join, str_join
from jinja2.sandbox import SandboxedEnvironment, safe_range

MAX_CHARS = 1 << 24
"""The most characters (items, or bytes of a number) one template operation or output may make:
16 Mi, far above any prompt, far below what would exhaust memory."""
TOTAL_CHARS = 1 << 26
"""The most characters (items, range steps) one render may build in all: 64 Mi."""
PRINTF_WIDTHS = re.compile(r"%(?:\([^)]*\))?[-#0 +]*(\*|\d*)(?:\.(\*|\d*))?")
WIDTH_FILTERS = ("center", "indent", "format")
"""Filters that pad to a width or format (their counts checked like a padding method's)."""
PADDING = frozenset({"center", "ljust", "rjust", "zfill", "expandtabs"})
"""String methods that pad to a width."""
GROWING = frozenset({"append", "extend", "insert"})
"""List methods that add to a list in place."""
SEQUENCES = (str, bytes, list, tuple)


class Budget:
    """What one render has built so far, against `total` (TOTAL_CHARS)."""

    def __init__(self, total: int) -> None:
        self.spent, self.total = 0, total
        self.last_sum: tuple[list | tuple, int] | None = None
        """The sequence the last sum built and its chars(), so that a loop growing a list by
        sums (`l = l + [x]`) does not walk the whole list again at each step."""

    def size(self, value: Any) -> int:
        """chars(value), the last sum's without a walk."""
        if self.last_sum is not None and value is self.last_sum[0]:
            return self.last_sum[1]
        return chars(value)

    def built(self, value: Any, size: int) -> Any:
        """`value`, which a sum built at chars() `size`, remembered to be sized without a walk
        (a string's len() is no walk)."""
        if isinstance(value, (list, tuple)):
            self.last_sum = (value, size)
        return value

    def mutated(self) -> None:
        """A list changed in place: the last sum's size may be stale (it may hold that list)."""
        self.last_sum = None

    def spend(self, size: int, what: str) -> None:
        check_size(size, what)
        self.spent += size
        if self.spent > self.total:
            raise SecurityError(
                f"{what} takes what the template built past the {self.total:,} one render may build"
            )


class BoundedCodeGenerator(CodeGenerator):
    """Jinja's code generator, its `~` joins made through the environment's `bounded_join`."""

    def visit_Concat(self, node, frame) -> None:  # noqa: N802 -- Jinja's visitor name
        self.write("environment.bounded_join(context.eval_ctx, (")
        for arg in node.nodes:
            self.visit(arg, frame)
            self.write(", ")
        self.write("))")


class BoundedTemplate(Template):
    """A template whose every render starts with a fresh budget."""

    def render(self, *args: Any, **kwargs: Any) -> str:
        self.environment.budget = Budget(self.environment.budget.total)
        return super().render(*args, **kwargs)


class BoundedSandbox(SandboxedEnvironment):
    """Jinja's sandbox, refusing what would build more than MAX_CHARS (SecurityError)."""

    intercepted_binops = frozenset({"*", "**", "%", "+"})
    code_generator_class = BoundedCodeGenerator
    template_class = BoundedTemplate

    def __init__(self, *args: Any, total_chars: int = TOTAL_CHARS, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.budget = Budget(total_chars)
        self.concat = self.bounded_concat
        self.globals["range"] = self.counted_range

    def call_binop(self, context, operator: str, left: Any, right: Any) -> Any:
        if operator == "*":
            check_repeat(left, right, self.budget)
            check_repeat(right, left, self.budget)
        elif operator == "+" and isinstance(left, SEQUENCES) and isinstance(right, SEQUENCES):
            size = self.budget.size(left) + self.budget.size(right)
            self.budget.spend(size, "a sum")
            return self.budget.built(super().call_binop(context, operator, left, right), size)
        elif operator == "**" and isinstance(left, int) and isinstance(right, int):
            self.budget.spend(abs(right) * max(abs(left).bit_length() - 1, 0) // 8, "a power")
        elif operator == "%" and isinstance(left, str):
            args = right if isinstance(right, tuple) else (right,)
            check_format(left, printf_widths(left), args, self.budget)
        return super().call_binop(context, operator, left, right)

    def call(__self, __context, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N805
        owner, name = getattr(__obj, "__self__", None), getattr(__obj, "__name__", "")
        given = (*args, *kwargs.values())
        if (isinstance(owner, str) and name in PADDING) or __obj is __self.globals.get("lipsum"):
            check_counts(name, given, __self.budget)
        elif isinstance(owner, str) and name == "replace" and len(args) >= 2:
            check_replace(owner, args[0], args[1], __self.budget)
        elif isinstance(owner, list) and name in GROWING:
            __self.budget.spend(sum(chars(arg) for arg in given), f"a list's {name}")
        if isinstance(owner, list):
            __self.budget.mutated()
        return super().call(__context, __obj, *args, **kwargs)

    def counted_range(self, *args: int) -> range:
        """The sandbox's range, its steps counted against the render's budget."""
        steps = safe_range(*args)
        self.budget.spend(len(steps), "a range")
        return steps

    def bounded_join(self, eval_ctx, pieces: tuple) -> str:
        """A `~` join, refused where it would build past the bounds."""
        self.budget.spend(sum(chars(piece) for piece in pieces), "a join")
        return (markup_join if eval_ctx.volatile or eval_ctx.autoescape else str_join)(pieces)

    def bounded_concat(self, pieces: Iterable[str]) -> str:
        """A template's output (or a `{% set %}` block's), refused once it passes MAX_CHARS."""
        kept, size = [], 0
        for piece in pieces:
            size += len(piece)
            check_size(size, "an output")
            kept.append(piece)
        self.budget.spend(size, "an output")
        return "".join(kept)

    def wrap_str_format(self, value: Any) -> Callable[..., str] | None:
        wrapped = super().wrap_str_format(value)
        if wrapped is None:
            return None
        fields = list(string.Formatter().parse(value.__self__))
        widths = [int(n) for _, _, spec, _ in fields if spec for n in re.findall(r"\d+", spec)]

        def checked(*args: Any, **kwargs: Any) -> str:
            check_format(value.__self__, widths, (*args, *kwargs.values()), self.budget)
            return wrapped(*args, **kwargs)

        return checked


def bounded(environment: BoundedSandbox) -> BoundedSandbox:
    """`environment` with its width-taking and replacing filters checked (filters are called
    directly, not through `call`)."""
    for name in WIDTH_FILTERS:
        environment.filters[name] = counted_filter(name, environment.filters[name], environment)
    environment.filters["replace"] = replacing_filter(environment.filters["replace"], environment)
    return environment


def counted_filter(
    name: str, apply: Callable[..., Any], environment: BoundedSandbox
) -> Callable[..., Any]:
    def checked(value: Any, *args: Any, **kwargs: Any) -> Any:
        if name != "format":
            check_counts(f"the {name} filter", (*args, *kwargs.values()), environment.budget)
        elif isinstance(value, str):
            given = (*args, *kwargs.values())
            check_format(value, printf_widths(value), given, environment.budget)
        return apply(value, *args, **kwargs)

    return checked


def replacing_filter(apply: Callable[..., Any], environment: BoundedSandbox) -> Callable[..., Any]:
    @functools.wraps(apply)  # keeps Jinja's mark that the filter takes the evaluation context
    def checked(eval_ctx: Any, value: Any, old: Any, new: Any, *args: Any) -> Any:
        check_replace(value, old, new, environment.budget)
        return apply(eval_ctx, value, old, new, *args)

    return checked


def printf_widths(template: str) -> list[int]:
    """The widths and precisions written in a printf-style format."""
    found = (n for match in PRINTF_WIDTHS.finditer(template) for n in match.groups())
    return [int(n) for n in found if n and n.isdigit()]


def check_format(template: str, widths: list[int], args: Iterable[Any], budget: Budget) -> None:
    """A format's written widths, and the counts it may take from its arguments, bounded."""
    budget.spend(max(widths, default=0), "a format's width")
    if "*" in template or "{" in template.partition(":")[2]:  # widths taken from arguments
        check_counts("a format", args, budget)


def check_counts(what: str, args: Iterable[Any], budget: Budget) -> None:
    """Counts passed where they set a width, a repetition or a length, bounded."""
    for arg in args:
        if isinstance(arg, int) and not isinstance(arg, bool):
            budget.spend(abs(arg), f"{what}'s count")


def check_repeat(sequence: Any, times: Any, budget: Budget) -> None:
    if isinstance(sequence, SEQUENCES) and isinstance(times, int):
        budget.spend(chars(sequence) * max(times, 0), "a repetition")


def check_replace(text: Any, old: Any, new: Any, budget: Budget) -> None:
    """A replacement's result, bounded: each match of `old` (each gap, for an empty one) grows
    the text by `new`."""
    if isinstance(text, str) and isinstance(old, str) and isinstance(new, str):
        matches = text.count(old) if old else len(text) + 1
        budget.spend(len(text) + matches * max(len(new) - len(old), 0), "a replacement")


def chars(value: Any, depth: int = 4) -> int:
    """The characters (items) a value holds: a string's, a list's items' and their own (to a
    depth: a list may hold itself)."""
    if isinstance(value, (str, bytes)):
        return len(value)
    if isinstance(value, (list, tuple)):
        inner = (chars(item, depth - 1) for item in value) if depth else ()
        return len(value) + sum(inner)
    return 1


def check_size(size: int, what: str) -> None:
    if size > MAX_CHARS:
        raise SecurityError(f"{what} of {size:,} is past the {MAX_CHARS:,} a template may build")
