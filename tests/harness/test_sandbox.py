"""The sandbox's bounds: what one operation may build, and what one render may build in all."""

from __future__ import annotations

import pytest
from jinja2.exceptions import SecurityError

from txl_dist.harness.sandbox import BoundedSandbox, bounded

NS = "{% set ns = namespace(s='a', l=[]) %}"
# Each grows past a bound a piece at a time; without the bounds each renders (or, with larger
# counts, allocates until memory runs out).
GROWING = {
    "joins in a loop": NS + "{% for i in range(30) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
    "sums in a loop": NS + "{% for i in range(30) %}{% set ns.s = ns.s + ns.s %}{% endfor %}",
    "list sums": NS
    + "{% for i in range(30) %}{% set ns.l = ns.l + ns.l + ['ab' * 9999] %}{% endfor %}",
    "appends": NS
    + "{% set big = 'a' * 10000000 %}{% for i in range(8) %}{{ ns.l.append(big) }}{% endfor %}",
    "set blocks into a list": NS
    + "{% for i in range(8) %}{% set piece %}{{ 'b' * 10000000 }}{% endset %}"
    + "{{ ns.l.append(piece) }}{% endfor %}",
    "a list of long strings repeated": "{{ (['a' * 1000000] * 100)|join|length }}",
    "the replace method": "{{ ('a' * 100000).replace('a', 'b' * 1000)|length }}",
    "the replace filter": "{{ ('a' * 100000)|replace('a', 'b' * 1000)|length }}",
}


def render(template: str, **bounds: int) -> str:
    return bounded(BoundedSandbox(**bounds)).from_string(template).render()


@pytest.mark.parametrize("template", GROWING)
def test_a_template_growing_past_the_bounds_a_piece_at_a_time_is_refused(template):
    with pytest.raises(SecurityError, match="a template may build|one render may build"):
        render(GROWING[template])


def test_loops_count_their_steps():
    # range's own cap is 100,000 steps a call; nested, the steps multiply
    loops = "{% for i in range(100) %}{% for j in range(1000) %}{% endfor %}{% endfor %}"
    assert render(loops, total_chars=100_100) == ""  # 100 + 100 * 1,000 steps
    with pytest.raises(SecurityError, match="a range takes .* past the 100,099 one render"):
        render(loops, total_chars=100_099)


def test_ordinary_templates_render_as_jinja_renders_them():
    template = (
        NS + "{% for w in ['a', 'b'] %}{% set ns.s = ns.s ~ w %}{{ ns.l.append(w) }}{% endfor %}"
        "{{ ns.s }} {{ ns.l|join(',') }} {{ 'a b'|replace(' ', '_') }} {{ [1] + [2] }}"
        "{% set block %}x{{ 1 + 2 }}{% endset %} {{ block }}"
    )
    assert render(template) == "NoneNoneaab a,b a_b [1, 2] x3"


def test_each_render_has_a_budget_of_its_own():
    # 32 M characters a render (two repetitions and their sum): 160 M in all, each under 64 Mi
    template = bounded(BoundedSandbox()).from_string("{{ ('a' * 8000000 + 'b' * 8000000)|length }}")
    assert [template.render() for _ in range(5)] == ["16000000"] * 5


class Counted(str):
    """A string that counts how often its length is taken: the sandbox's sizing visits."""

    visits = 0

    def __len__(self) -> int:
        Counted.visits += 1
        return super().__len__()


GROWN_BY_SUMS = (
    NS + "{% for i in range(n) %}{% set ns.l = ns.l + [w] %}{% endfor %}{{ ns.l|length }}"
)


def test_a_list_grown_by_sums_in_a_loop_is_sized_once_per_item():
    Counted.visits = 0
    template = bounded(BoundedSandbox()).from_string(GROWN_BY_SUMS)
    assert template.render(n=2000, w=Counted("ab")) == "2000"
    assert Counted.visits == 2000  # walking the list at each sum: 2000 * 2001 / 2


def test_a_list_grown_by_sums_is_charged_every_sum_whole():
    # 100 range steps, sums of 3 * i + 3 (the list's i items of 'ab' and the new one), output "100"
    charged = 100 + sum(3 * i + 3 for i in range(100)) + 3
    template = bounded(BoundedSandbox(total_chars=charged)).from_string(GROWN_BY_SUMS)
    assert template.render(n=100, w="ab") == "100"
    with pytest.raises(SecurityError, match="one render may build"):
        bounded(BoundedSandbox(total_chars=charged - 1)).from_string(GROWN_BY_SUMS).render(
            n=100, w="ab"
        )


def test_a_list_grown_in_place_after_a_sum_is_sized_anew():
    # after 5 M appended in place the list holds 5 M, not the 3 its sum built: the sums that
    # copy it charge 25 M, not 15 characters
    template = NS + (
        "{% set ns.l = ns.l + ['ab'] %}{% set big = 'a' * 5000000 %}{{ ns.l.append(big) }}"
        "{% set ns.m = ns.l + ns.l + ns.l %}"
    )
    with pytest.raises(SecurityError, match="a sum takes .* one render may build"):
        render(template, total_chars=20_000_000)
