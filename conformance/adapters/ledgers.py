"""The scaffolding of an engine's expected-failure ledger (shared by SGLang's and vLLM's).

A ledger lists confirmed divergences from the SPEC, each written up in a findings document,
as ``(test, section, reason, where)`` rows: ``where`` maps each engine version on which a
run confirmed the failure to the devices of those runs. The engine's ``ledger.py`` holds the
rows; this module turns them into strict expected failures and reads the switch that turns
the ledger off (how the committed matrices are made, every divergence showing as a failure).
"""

from __future__ import annotations

import os
from collections.abc import Collection, Iterable, Mapping

from conformance.contract import ExpectedFailure

__all__ = ["Row", "enabled", "on", "scoped"]

Row = tuple[str, str, str, Mapping[str, tuple[str, ...]]]


def enabled(variable: str) -> bool:
    """False when the environment variable ``variable`` is ``off`` (or ``0``); on otherwise.

    Raises:
        ValueError: any other value (names the variable and the accepted values).
    """
    value = os.environ.get(variable, "on").strip().lower()
    if value not in ("on", "1", "off", "0"):
        raise ValueError(f"{variable}={value!r}: expected 'on' or 'off'")
    return value in ("on", "1")


def on(devices: tuple[str, ...], *versions: str) -> dict[str, tuple[str, ...]]:
    """``where`` for rows confirmed on the same ``devices`` in each of ``versions``."""
    return {version: devices for version in versions}


def scoped(rows: Iterable[Row], version: str, findings: str,
           loses_cuda_context: Collection[tuple[str, str]] = ()) -> tuple[ExpectedFailure, ...]:
    """The rows confirmed for ``version`` as expected failures on the devices where they
    were measured, each reason followed by ``[findings]`` (the document that writes it up).
    ``loses_cuda_context``: the ``(test, version)`` pairs whose failure on CUDA was measured
    to be a lost CUDA context (an out-of-bounds access; ``conformance.cuda_context``)."""
    return tuple(
        ExpectedFailure(test, section, f"{reason} [{findings}]", where[version],
                        loses_cuda_context=(test, version) in loses_cuda_context)
        for test, section, reason, where in rows
        if version in where
    )
