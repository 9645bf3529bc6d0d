"""SGLang's expected-failure ledger: confirmed divergences from the SPEC, by version and device.

Every entry is a finding written up with a minimal reproducing input in
``docs/conformance/sglang-findings.md`` (ids F1..F7). Entries are strict xfails: when
SGLang fixes one, the run reports XPASS and the entry must go. A new divergence is not
in here and fails the gate.
"""

from __future__ import annotations

from conformance.contract import ExpectedFailure

FINDINGS = "docs/conformance/sglang-findings.md"

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


_ALL_VERSIONS = (
    _entry("test_S5_greedy_verify_hand_cases[S5/greedy/hand-cases]", "S5", _CAP0),
    _entry("test_S5_greedy_verify_matches_argmax_oracle[S5/greedy/random-V1000-l5]", "S5", _CAP0),
    _entry("test_S5_greedy_verify_matches_argmax_oracle[S5/greedy/random-ties-V16-l6]", "S5", _CAP0),
    _entry("test_S5_greedy_verify_matches_argmax_oracle[S5/greedy/production-V151936-l7]", "S5", _CAP0, ("cuda",)),
    _entry("test_S7_prefix_survival_is_cumulative_product[S7/prefix-survival/sigmoid-batched]", "S7", _SURVIVAL),
)

_FOLDED_GENERATION = (
    _entry("test_S2_sample_block_equals_teacher_forcing[S2/teacher-forcing/vanilla-mixed]", "S2", _TEACHER),
    _entry("test_S2_sample_block_equals_teacher_forcing[S2/teacher-forcing/gated-mixed]", "S2", _TEACHER),
    _entry("test_S4_folded_matches_eager_and_teacher_forcing[S4/folded-vs-eager/vanilla-float32]", "S4", _TEACHER),
    _entry("test_S4_folded_matches_eager_and_teacher_forcing[S4/folded-vs-eager/gated-float32]", "S4", _TEACHER),
    _entry("test_S4_folded_matches_eager_and_teacher_forcing[S4/folded-vs-eager/vanilla-bfloat16]", "S4", _TEACHER,
           ("cuda",)),
    _entry("test_S4_stage_applies_greedy_rule_and_temperature_clamp[S4/stage/greedy-rule-and-clamp]", "S4", _TEACHER),
    _entry("test_S3_zero_probability[S3/vocab-crop/neg-inf-zero-noise]", "S3", _ZERO_NOISE, ("cpu",)),
    *(
        _entry(f"test_S3_greedy_near_tie_at_high_temperature[S3/greedy/near-tie-hot-{cap}]", "S3", _HOT_GREEDY)
        for cap in ("StepSampler", "NoiseStepSampler")
    ),
)

_PHILOX_GENERATION = (
    _entry("test_S2_gamma_zero_returns_empty_block[S2/edge/gamma-zero-vanilla]", "S2", _GAMMA0),
    _entry("test_S2_gamma_zero_returns_empty_block[S2/edge/gamma-zero-rnn]", "S2", _GAMMA0),
    *(
        _entry(f"test_S4_folded_matches_eager_and_teacher_forcing[S4/folded-vs-eager/{head}-bfloat16]", "S4",
               _DTYPE, ("cuda",))
        for head in ("vanilla", "gated", "rnn")
    ),
)


def expected_failures(generation: str) -> tuple[ExpectedFailure, ...]:
    """The ledger for an API generation (``"folded"``: 0.5.17-0.5.21; ``"philox"``: 0.5.22+)."""
    return _ALL_VERSIONS + (_FOLDED_GENERATION if generation == "folded" else _PHILOX_GENERATION)
