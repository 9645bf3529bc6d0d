"""An engine's expected-failure ledger, scoped by PEP 440 version ranges and device.

A ledger lists confirmed divergences from the SPEC, each written up in a findings document.
An :class:`Entry` names the test, its SPEC section and the finding, and the :class:`Scope`
of releases and devices on which runs confirmed it: ``Scope(">=0.25.0,<=0.33.0", ("cpu",))``
says runs on CPU failed it at both ends of that range (``packaging.specifiers``).
:meth:`Ledger.expected_failures` turns the entries into strict expected failures for one
installed release:

* **inside a confirmed range**: the entry applies on that scope's devices (a patch release
  such as 0.25.1 inherits the entries confirmed on 0.25.0 and on a later release);
* **newer than the newest release measured on a device** (``Ledger.newest_measured``): an
  entry that applies to that newest release is *carried forward* to the device, its reason
  ending "carried forward from X, not confirmed on Y", so a release that fixed the finding
  shows a strict XPASS naming it, and one that did not shows the entry as unconfirmed;
* anywhere else (an older release, a device never measured on): no entry, so the failure
  shows as a failure.

Third-party ledgers follow the same rule (docs/VENDORS.md): one :class:`Ledger` per engine,
one :class:`Entry` per confirmed finding. The engine's ``ledger.py`` holds the entries and
names the environment variable that turns its ledger off (how the committed matrices are made,
every divergence showing as a failure); :func:`applied` is what an adapter hands the suite.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable, Mapping

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from conformance.contract import ExpectedFailure

__all__ = ["Entry", "Ledger", "Scope", "applied", "enabled", "replay_env"]

_DEVICES = ("cpu", "cuda")


def enabled(variable: str) -> bool:
    """False when the environment variable ``variable`` is ``off`` (or ``0``); on otherwise.

    Raises:
        ValueError: any other value (names the variable and the accepted values).
    """
    value = os.environ.get(variable, "on").strip().lower()
    if value not in ("on", "1", "off", "0"):
        raise ValueError(f"{variable}={value!r}: expected 'on' or 'off'")
    return value in ("on", "1")


def applied(ledger: Ledger, variable: str, version: str) -> tuple[tuple[ExpectedFailure, ...], str]:
    """``(expected failures, note)`` for an adapter of release ``version``: ``ledger``'s
    entries for that release and ``""`` while the switch ``variable`` is on; ``()`` and
    ``"; expected-failure ledger off (VARIABLE=off)"``, for the adapter's description, while
    it is off.

    Raises:
        ValueError: ``variable`` holds neither on nor off (:func:`enabled`), or ``version`` is
            not a PEP 440 version.
    """
    if not enabled(variable):
        return (), f"; expected-failure ledger off ({variable}=off)"
    return ledger.expected_failures(version), ""


def replay_env(variable: str) -> dict[str, str]:
    """``{variable: "off"}`` while the switch ``variable`` turns the ledger off, else ``{}``:
    the adapter's ``Adapter.replay_env``, so that a replay line runs with the ledger off too
    (without it, a failure the ledger expects replays as an expected failure and passes).

    Raises:
        ValueError: ``variable`` holds neither on nor off (:func:`enabled`).
    """
    return {} if enabled(variable) else {variable: "off"}


def _version(text: str, what: str) -> Version:
    try:
        return Version(text)
    except (InvalidVersion, TypeError) as exc:
        raise ValueError(f"{what}: expected a PEP 440 version, got {text!r}") from exc


@dataclasses.dataclass(frozen=True)
class Scope:
    """Releases and devices on which runs confirmed an entry.

    Attributes:
        releases: a PEP 440 specifier set whose ends were each confirmed by a run, e.g.
            ``">=0.25.0,<=0.33.0"`` or ``"==0.5.17"``.
        devices: the test devices of those runs (``"cpu"``, ``"cuda"``).
        loses_cuda_context: on CUDA the failure was measured to be a lost CUDA context
            (an out-of-bounds access; ``conformance.cuda_context``).

    Raises:
        ValueError: ``releases`` is not a specifier set, or ``devices`` is empty or names
            another device.
    """

    releases: str
    devices: tuple[str, ...]
    loses_cuda_context: bool = False

    def __post_init__(self) -> None:
        try:
            specifier = SpecifierSet(self.releases)
        except InvalidSpecifier as exc:
            raise ValueError(f"Scope.releases: expected a PEP 440 specifier set like '>=0.25.0,<=0.33.0', "
                             f"got {self.releases!r}") from exc
        if not str(specifier):
            raise ValueError("Scope.releases: expected a non-empty specifier set, got ''")
        if not self.devices or any(d not in _DEVICES for d in self.devices):
            raise ValueError(f"Scope.devices: expected a non-empty subset of {_DEVICES}, got {self.devices!r}")

    def contains(self, release: Version) -> bool:
        """Whether ``release`` lies in :attr:`releases` (pre-releases included)."""
        return SpecifierSet(self.releases).contains(release, prereleases=True)


@dataclasses.dataclass(frozen=True)
class Entry:
    """One confirmed divergence: the test (node name ``test_S3_...[case id]`` or function
    name), its SPEC section, the finding (``"V4: ..."``) and where it was confirmed."""

    test: str
    section: str
    reason: str
    scopes: tuple[Scope, ...]

    def __post_init__(self) -> None:
        if not self.scopes:
            raise ValueError(f"Entry {self.test!r}: expected at least one Scope")


@dataclasses.dataclass(frozen=True)
class Ledger:
    """An engine's entries and the newest release measured on each device.

    Attributes:
        findings: the document that writes the findings up (appended to every reason).
        entries: the confirmed divergences.
        newest_measured: device -> the newest release a run measured there (the ledger's
            entries were checked against it); a newer release gets the entries that apply
            to it carried forward.
    """

    findings: str
    entries: tuple[Entry, ...]
    newest_measured: Mapping[str, str]

    def __post_init__(self) -> None:
        for device, release in self.newest_measured.items():
            if device not in _DEVICES:
                raise ValueError(f"Ledger.newest_measured: {device!r} is not a device {_DEVICES}")
            _version(release, f"Ledger.newest_measured[{device!r}]")

    def expected_failures(self, version: str) -> tuple[ExpectedFailure, ...]:
        """The strict expected failures for the installed release ``version``
        (e.g. ``"0.33.0"``, ``"0.25.1"``, ``"0.34.0rc1"``), per device (module note).

        Raises:
            ValueError: ``version`` is not a PEP 440 version.
        """
        release = _version(version, "version")
        failures: list[ExpectedFailure] = []
        for entry in self.entries:
            for device in _DEVICES:
                failure = self._on(entry, device, release)
                if failure is not None:
                    failures.append(failure)
        return tuple(_merged(failures))

    def _on(self, entry: Entry, device: str, release: Version) -> ExpectedFailure | None:
        scope = _scope_on(entry.scopes, device, release)
        note = ""
        newest = self.newest_measured.get(device)
        if scope is None and newest is not None and release > Version(newest):
            scope = _scope_on(entry.scopes, device, Version(newest))
            note = f" (carried forward from {newest}, not confirmed on {release})"
        if scope is None:
            return None
        return ExpectedFailure(entry.test, entry.section, f"{entry.reason} [{self.findings}]{note}", (device,),
                               loses_cuda_context=scope.loses_cuda_context and device == "cuda",
                               carried_forward_from=newest if note else None)


def _scope_on(scopes: Iterable[Scope], device: str, release: Version) -> Scope | None:
    return next((s for s in scopes if device in s.devices and s.contains(release)), None)


def _merged(failures: list[ExpectedFailure]) -> list[ExpectedFailure]:
    """One failure per (test, reason, context) with the devices of each merged, in order."""
    merged: dict[tuple, ExpectedFailure] = {}
    for failure in failures:
        key = (failure.test, failure.reason, failure.loses_cuda_context)
        if key in merged:
            merged[key] = dataclasses.replace(merged[key], devices=merged[key].devices + failure.devices)
        else:
            merged[key] = failure
    return list(merged.values())
