"""Files written into run directories replace a planted link instead of writing through it."""

from __future__ import annotations

import os

from txl_dist.files import open_new


def test_a_planted_link_is_replaced_and_its_target_left_alone(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("precious")
    link = tmp_path / "report.png"
    os.symlink(victim, link)
    with open_new(str(link)) as f:
        f.write("ours")
    assert victim.read_text() == "precious"
    assert not link.is_symlink() and link.read_text() == "ours"
