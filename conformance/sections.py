"""The SPEC sections (docs/SPEC.md): one table of ids and topics, used by the case
registry, the plugin's records and every report."""

from __future__ import annotations

import re

__all__ = ["SECTIONS", "SECTION_TITLES", "section_of"]

SECTION_TITLES: dict[str, str] = {
    "S0": "numerics", "S1": "base logits", "S2": "Markov heads", "S3": "step sampling",
    "S4": "folded sampler", "S5": "chain verification", "S6": "simulated acceptance",
    "S7": "confidence / STS", "S8": "prefix scheduler", "S9": "end to end", "S10": "known real bugs",
}
SECTIONS: tuple[str, ...] = tuple(SECTION_TITLES)
_SECTION_RE = re.compile(r"test_(S\d+)")


def section_of(name: str) -> str:
    """SPEC section id cited by a test name (``test_S3_...`` -> ``"S3"``), else ``"-"``."""
    match = _SECTION_RE.search(name)
    return match.group(1) if match else "-"
