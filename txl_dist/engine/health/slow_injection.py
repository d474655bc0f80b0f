"""TXL_INJECT_SLOW=RANK:FACTOR[:SECTION]: one rank's step section made FACTOR times as long.

A fault injected through the real command, for tests and for trying the straggler detector
(docs/training.md, Slow ranks): rank RANK sleeps (FACTOR - 1) times the section's own time at
the section's end, before the communication that follows it, as a slower device would make it
late. SECTION is data, forward_backward (the default) or optimizer.
"""

from __future__ import annotations

import dataclasses
import os
import time

ENV = "TXL_INJECT_SLOW"
SECTIONS = ("data", "forward_backward", "optimizer")


@dataclasses.dataclass(frozen=True)
class SlowInjection:
    """The section of this rank to slow down, and by how much."""

    section: str
    factor: float

    def delay(self, section: str, seconds: float) -> None:
        """Sleep so that `section`, which took `seconds`, takes factor times as long."""
        if section == self.section:
            time.sleep((self.factor - 1) * seconds)


def from_env(rank: int) -> SlowInjection | None:
    """This rank's injection from TXL_INJECT_SLOW, None when it names another rank or is unset."""
    value = os.environ.get(ENV, "").strip()
    if not value:
        return None
    parts = value.split(":")
    try:
        target, factor = int(parts[0]), float(parts[1])
        section = parts[2] if len(parts) == 3 else "forward_backward"
        if len(parts) > 3 or section not in SECTIONS or factor < 1:
            raise ValueError(value)
    except (ValueError, IndexError):
        raise ValueError(
            f"{ENV}={value!r}: expected RANK:FACTOR[:SECTION], FACTOR >= 1 and SECTION one of "
            f"{', '.join(SECTIONS)} (e.g. 1:1.5:forward_backward)"
        ) from None
    return SlowInjection(section, factor) if target == rank else None
