"""SGLang's expected-failure ledger: confirmed divergences from the SPEC, by version and device.

Every entry is a finding written up with a minimal reproducing input in
``docs/conformance/sglang-findings.md`` (ids F1..F7). Entries are strict xfails: when
SGLang fixes one, the run reports XPASS and the entry must go. A new divergence is not
in here and fails the gate.
"""

from __future__ import annotations

import dataclasses
import os

from conformance.contract import ExpectedFailure

FINDINGS = "docs/conformance/sglang-findings.md"

#: ``DSPARK_SGLANG_LEDGER=off`` turns the ledger off, so every finding shows as a failure:
#: how the committed matrices in ``docs/conformance/`` are produced.
LEDGER_ENV = "DSPARK_SGLANG_LEDGER"


def ledger_enabled() -> bool:
    """False when ``DSPARK_SGLANG_LEDGER`` is ``off`` (or ``0``); on otherwise.

    Raises:
        ValueError: any other value (names the variable and the accepted values).
    """
    value = os.environ.get(LEDGER_ENV, "on").strip().lower()
    if value not in ("on", "1", "off", "0"):
        raise ValueError(f"{LEDGER_ENV}={value!r}: expected 'on' or 'off'")
    return value in ("on", "1")

_CAP0 = "F1: cap 0 gives accepted = -1 (min(raw, cap - 1) without the clamp at 0); IndexError on CPU"
_SURVIVAL = "F2: prefix survival computed in float32 (compute_sort_survival casts), error 4e-8 on float64 input"
_TEACHER = "F3: apply_block_logits adds the bias in one batched GEMM, 1 ulp from sample_block's step logits"
_ZERO_NOISE = "F4: torch path divides p / E with E = 0 on a -inf logit: 0/0 = NaN wins the argmax"
_HOT_GREEDY = "F7: greedy rows take argmax softmax(L / T); at T = 1e3 near-tied maxima collapse to the lowest id"
_GAMMA0 = "F5: draft_markov_block calls torch.stack([]) for gamma = 0"
_DTYPE = "F6: corrected logits kept in float32, not the LM-head dtype (SPEC S4.1)"

_BOTH = ("cpu", "cuda")


def _entry(test: str, section: str, reason: str, devices: tuple[str, ...] = _BOTH) -> ExpectedFailure:
    return ExpectedFailure(test, section, f"{reason} [{FINDINGS}]", devices)


#: Entries by finding (``devices``: where the test can show the divergence at all).
_ENTRIES: dict[str, tuple[ExpectedFailure, ...]] = {
    "F1": (
        _entry("test_S5_greedy_verify_hand_cases[S5/greedy/hand-cases]", "S5", _CAP0),
        _entry("test_S5_greedy_verify_matches_argmax_oracle[S5/greedy/random-V1000-l5]", "S5", _CAP0),
        _entry("test_S5_greedy_verify_matches_argmax_oracle[S5/greedy/random-ties-V16-l6]", "S5", _CAP0),
        _entry("test_S5_greedy_verify_matches_argmax_oracle[S5/greedy/production-V151936-l7]", "S5", _CAP0,
               ("cuda",)),
    ),
    "F2": (
        _entry("test_S7_prefix_survival_is_cumulative_product[S7/prefix-survival/sigmoid-batched]", "S7", _SURVIVAL),
    ),
    "F3": (
        _entry("test_S2_sample_block_equals_teacher_forcing[S2/teacher-forcing/vanilla-mixed]", "S2", _TEACHER),
        _entry("test_S2_sample_block_equals_teacher_forcing[S2/teacher-forcing/gated-mixed]", "S2", _TEACHER),
        _entry("test_S4_folded_matches_eager_and_teacher_forcing[S4/folded-vs-eager/vanilla-float32]", "S4",
               _TEACHER),
        _entry("test_S4_folded_matches_eager_and_teacher_forcing[S4/folded-vs-eager/gated-float32]", "S4", _TEACHER),
        _entry("test_S4_folded_matches_eager_and_teacher_forcing[S4/folded-vs-eager/vanilla-bfloat16]", "S4",
               _TEACHER, ("cuda",)),
        _entry("test_S4_stage_applies_greedy_rule_and_temperature_clamp[S4/stage/greedy-rule-and-clamp]", "S4",
               _TEACHER),
    ),
    "F4": (_entry("test_S3_zero_probability[S3/vocab-crop/neg-inf-zero-noise]", "S3", _ZERO_NOISE, ("cpu",)),),
    "F5": (
        _entry("test_S2_gamma_zero_returns_empty_block[S2/edge/gamma-zero-vanilla]", "S2", _GAMMA0),
        _entry("test_S2_gamma_zero_returns_empty_block[S2/edge/gamma-zero-rnn]", "S2", _GAMMA0),
    ),
    "F6": tuple(
        _entry(f"test_S4_folded_matches_eager_and_teacher_forcing[S4/folded-vs-eager/{head}-bfloat16]", "S4",
               _DTYPE, ("cuda",))
        for head in ("vanilla", "gated", "rnn")
    ),
    "F7": tuple(
        _entry(f"test_S3_greedy_near_tie_at_high_temperature[S3/greedy/near-tie-hot-{cap}]", "S3", _HOT_GREEDY)
        for cap in ("StepSampler", "NoiseStepSampler")
    ),
}

#: Where each finding was confirmed by a run: finding -> version -> devices measured. An
#: entry applies only there (a version or device not measured shows its failures).
_CONFIRMED: dict[str, dict[str, tuple[str, ...]]] = {
    "F1": {"0.5.21": _BOTH, "0.5.23": _BOTH},
    "F2": {"0.5.21": _BOTH, "0.5.23": _BOTH},
    "F3": {"0.5.21": _BOTH},
    "F4": {"0.5.21": _BOTH},
    "F5": {"0.5.23": _BOTH},
    "F6": {"0.5.23": _BOTH},
    "F7": {"0.5.21": _BOTH},
}


def expected_failures(version: str) -> tuple[ExpectedFailure, ...]:
    """The ledger entries confirmed for SGLang ``version`` (e.g. ``"0.5.21"``), each on the
    devices where it was measured and where its test can show the divergence."""
    entries = []
    for finding, confirmed in _CONFIRMED.items():
        measured = confirmed.get(version, ())
        for entry in _ENTRIES[finding]:
            devices = tuple(d for d in entry.devices if d in measured)
            if devices:
                entries.append(dataclasses.replace(entry, devices=devices))
    return tuple(entries)
