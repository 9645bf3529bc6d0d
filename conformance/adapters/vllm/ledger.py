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


#: (test, section, reason, where): ``where`` maps each vLLM version on which the failure was
#: confirmed by a run to the devices of those runs. Nothing applies elsewhere.
_LEDGER: tuple[tuple[str, str, str, Mapping[str, tuple[str, ...]]], ...] = ()


def expected_failures(version: str) -> tuple[ExpectedFailure, ...]:
    """The entries confirmed for vLLM ``version`` (e.g. ``"0.33.0"``), each on the devices
    where it was measured."""
    return tuple(
        ExpectedFailure(test, section, f"{reason} [{FINDINGS}]", where[version])
        for test, section, reason, where in _LEDGER
        if version in where
    )
