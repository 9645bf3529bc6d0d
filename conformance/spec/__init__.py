"""The SPEC's constants (docs/SPEC.md), each written once, in :mod:`.constants`, next to the
paragraph it comes from. Oracles, inputs and tests import them from here; nothing here
imports ``dspark_ref`` (``tests/test_layers.py``).

To add one: a SPEC number read in more than one place (a floor, a threshold), with a comment
naming its SPEC section and the sentence it reads.
"""

from .constants import GREEDY_TEMPERATURE_BELOW, GREEDY_TOP_K_AT_MOST, RESIDUAL_MASS_FLOOR, TEMPERATURE_FLOOR

__all__ = ["GREEDY_TEMPERATURE_BELOW", "GREEDY_TOP_K_AT_MOST", "RESIDUAL_MASS_FLOOR", "TEMPERATURE_FLOOR"]
