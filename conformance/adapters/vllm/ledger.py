"""vLLM's expected-failure ledger: confirmed divergences from the SPEC, by version and device.

Every entry is a finding written up with a minimal reproducing input in
``docs/conformance/vllm-findings.md`` (ids V1..), scoped to the vLLM versions and devices
on which a run confirmed it (``_LEDGER``). Entries are strict xfails: when vLLM fixes one,
the run reports XPASS and the entry must go. A new divergence is not in here and fails.
``DSPARK_VLLM_LEDGER=off`` turns the ledger off (how the committed matrices are made).
"""

from __future__ import annotations

import os
from typing import Mapping

from conformance.contract import ExpectedFailure

FINDINGS = "docs/conformance/vllm-findings.md"
LEDGER_ENV = "DSPARK_VLLM_LEDGER"


def ledger_enabled() -> bool:
    """False when ``DSPARK_VLLM_LEDGER`` is ``off`` (or ``0``); on otherwise.

    Raises:
        ValueError: any other value (names the variable and the accepted values).
    """
    value = os.environ.get(LEDGER_ENV, "on").strip().lower()
    if value not in ("on", "1", "off", "0"):
        raise ValueError(f"{LEDGER_ENV}={value!r}: expected 'on' or 'off'")
    return value in ("on", "1")


_HOT = "V1: request temperatures above 2 are rejected (SamplingParams: 'temperature must be in [0, 2]')"

_SYNTHETIC_RANGE = ("V4: a synthetic acceptance length outside [1, n + 1] is rejected, not clamped "
                    "(SpeculativeConfig: 'synthetic_acceptance_length must be in [1, n + 1]')")

_CPU = ("cpu",)
_RELEASES = ("0.25.0", "0.28.0", "0.29.0", "0.33.0")


def _on(devices: tuple[str, ...], *versions: str) -> dict[str, tuple[str, ...]]:
    return {version: devices for version in versions}


#: (test, section, reason, where): ``where`` maps each vLLM version on which the failure was
#: confirmed by a run to the devices of those runs. Nothing applies elsewhere: an unmeasured
#: version or device shows its failures.
_LEDGER: tuple[tuple[str, str, str, Mapping[str, tuple[str, ...]]], ...] = (
    ("test_S3_zero_probability[S3/vocab-crop/neg-inf-never-drawn]", "S3", _HOT,
     _on(_CPU, *_RELEASES)),
    *((f"test_S6_match_expected_degenerate_values[S6/match-expected/{name}]", "S6", _SYNTHETIC_RANGE,
       _on(_CPU, *_RELEASES)) for name in ("clamp-low-0.2", "clamp-low-negative", "clamp-high-9.5", "max-len-1")),
    ("test_S6_lengths_stay_in_range[S6/range/match-expected]", "S6", _SYNTHETIC_RANGE, _on(_CPU, *_RELEASES)),
)


def expected_failures(version: str) -> tuple[ExpectedFailure, ...]:
    """The entries confirmed for vLLM ``version`` (e.g. ``"0.33.0"``), each on the devices
    where it was measured."""
    return tuple(
        ExpectedFailure(test, section, f"{reason} [{FINDINGS}]", where[version])
        for test, section, reason, where in _LEDGER
        if version in where
    )
