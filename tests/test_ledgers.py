"""The ledger rule (conformance.adapters.ledgers): entries scoped by PEP 440 release ranges and
device; a release inside a confirmed range inherits an entry, a release newer than the newest
measured gets it carried forward and marked, anything else gets none."""

from __future__ import annotations

import pytest

from conformance.adapters.ledgers import Entry, Ledger, Scope, applied, enabled, replay_env

_LEDGER = Ledger(
    "docs/findings.md",
    (
        Entry("test_S5_a[S5/x/a]", "S5", "X1: both devices", (Scope(">=1.0,<=1.4", ("cpu", "cuda")),)),
        Entry("test_S5_b[S5/x/b]", "S5", "X2: fixed in 1.3", (Scope(">=1.0,<=1.2", ("cuda",)),)),
        Entry("test_S3_c[S3/x/c]", "S3", "X3: cpu from 1.2, cuda lost context",
              (Scope(">=1.2,<=1.4", ("cpu",)), Scope("==1.4", ("cuda",), loses_cuda_context=True))),
    ),
    newest_measured={"cpu": "1.4", "cuda": "1.4"},
)


def _by_device(version: str) -> dict[tuple[str, str], object]:
    return {(e.test, d): e for e in _LEDGER.expected_failures(version) for d in e.devices}


def test_a_release_inside_a_confirmed_range_inherits_the_entry():
    inside = _by_device("1.1.1")  # measured neither at 1.1 nor 1.1.1: between confirmed ends
    assert set(inside) == {("test_S5_a[S5/x/a]", "cpu"), ("test_S5_a[S5/x/a]", "cuda"), ("test_S5_b[S5/x/b]", "cuda")}
    assert all(e.carried_forward_from is None and "carried" not in e.reason for e in inside.values())
    assert all(e.reason.endswith("[docs/findings.md]") for e in inside.values())


def test_a_release_outside_every_range_gets_no_entry():
    assert _LEDGER.expected_failures("0.9") == ()
    assert ("test_S5_b[S5/x/b]", "cuda") not in _by_device("1.3")  # fixed: its range ended at 1.2


def test_a_newer_release_carries_forward_what_applies_to_the_newest_measured():
    later = _by_device("1.5rc1")
    assert set(later) == set(_by_device("1.4"))
    for entry in later.values():
        assert entry.carried_forward_from == "1.4"
        assert entry.reason.endswith("(carried forward from 1.4, not confirmed on 1.5rc1)")
    # the lost CUDA context is carried with the entry, on CUDA only
    assert later[("test_S3_c[S3/x/c]", "cuda")].loses_cuda_context
    assert not later[("test_S3_c[S3/x/c]", "cpu")].loses_cuda_context


def test_carrying_forward_is_per_device():
    partial = Ledger(_LEDGER.findings, _LEDGER.entries, newest_measured={"cpu": "1.5", "cuda": "1.4"})
    later = {(e.test, d): e for e in partial.expected_failures("1.5") for d in e.devices}
    assert later[("test_S5_a[S5/x/a]", "cuda")].carried_forward_from == "1.4"
    assert ("test_S5_a[S5/x/a]", "cpu") not in later  # measured on CPU at 1.5 and not confirmed there


@pytest.mark.parametrize("make, message", [
    (lambda: Scope("0.25.0", ("cpu",)), "Scope.releases: expected a PEP 440 specifier set"),
    (lambda: Scope("", ("cpu",)), "Scope.releases: expected a non-empty specifier set"),
    (lambda: Scope(">=1", ("tpu",)), "Scope.devices: expected a non-empty subset"),
    (lambda: Entry("t", "S5", "r", ()), "expected at least one Scope"),
    (lambda: Ledger("f", (), {"cpu": "latest"}), r"newest_measured\['cpu'\]: expected a PEP 440 version"),
    (lambda: _LEDGER.expected_failures("nightly"), "version: expected a PEP 440 version, got 'nightly'"),
])
def test_bad_ledger_input_names_the_argument(make, message):
    with pytest.raises(ValueError, match=message):
        make()


_SWITCH = "DSPARK_TEST_LEDGER"


@pytest.mark.parametrize("value, on", [(None, True), ("on", True), ("1", True), ("OFF", False), ("0", False)])
def test_the_switch_turns_the_ledger_off_for_the_adapter(monkeypatch, value, on):
    if value is None:
        monkeypatch.delenv(_SWITCH, raising=False)
    else:
        monkeypatch.setenv(_SWITCH, value)
    assert enabled(_SWITCH) is on
    failures, note = applied(_LEDGER, _SWITCH, "1.4")
    if on:
        assert failures == _LEDGER.expected_failures("1.4") and failures and note == ""
    else:
        assert failures == () and note == f"; expected-failure ledger off ({_SWITCH}=off)"


def test_a_replay_repeats_the_switch_while_the_ledger_is_off(monkeypatch):
    # A new user's trial: with the ledger off a case failed, and its replay line (ledger on)
    # passed as an expected failure.
    monkeypatch.setenv(_SWITCH, "off")
    assert replay_env(_SWITCH) == {_SWITCH: "off"}
    monkeypatch.setenv(_SWITCH, "on")
    assert replay_env(_SWITCH) == {}


def test_the_switch_rejects_other_values(monkeypatch):
    monkeypatch.setenv(_SWITCH, "maybe")
    with pytest.raises(ValueError, match="DSPARK_TEST_LEDGER='maybe': expected 'on' or 'off'"):
        applied(_LEDGER, _SWITCH, "1.4")
