"""dspark-mlx's expected-failure ledger: confirmed divergences from the SPEC, by release range and device.

Every entry is a finding written up with a minimal reproducing input in
``docs/conformance/dspark-mlx-findings.md`` (ids D1..), scoped to the dspark-mlx versions and
devices on which a run confirmed it (``_ENTRIES``; the rule: :mod:`conformance.adapters.ledgers`). Entries are strict xfails: when dspark-mlx
fixes one, the run reports XPASS and the entry's range must end. A new divergence is not in here and
fails. ``DSPARK_DSPARK_MLX_LEDGER=off`` turns the ledger off (how the committed matrices are made).
"""

from __future__ import annotations

from conformance.adapters import ledgers

FINDINGS = "docs/conformance/dspark-mlx-findings.md"
LEDGER_ENV = "DSPARK_DSPARK_MLX_LEDGER"

_RANK = "D1: markov_rank 0 raises ZeroDivisionError from MLX's nn.Embedding initialiser (no configuration check)"
_NAN_ROW = "D2: a sampled row holding one NaN logit draws id 0 (all-NaN softmax, argmax 0), even where id 0 is -inf"
_BAD_T = ("D3: NaN / +inf temperatures are neither rejected nor greedy (recipe.sample divides by max(T, 1e-5); "
          "the verifier accepts every draft under the NaN law)")
_ZERO_Q = "D4: a q(x) = 0 draft is accepted even where p(x) = 0 (verify.py: ratio = 1.0 if q <= 0)"
_Q_ABOVE_ONE = "D5: a handed-over q(x) slightly above 1 is not read as 1 (accept iff u < min(1, p / q))"
_GREEDY_RULE = "D6: only T == 0 is greedy (recipe.sample); 0 < T < 1e-5 samples at 1e-5, not the declared T < 1e-5"

_CPU = ledgers.Scope("==0.1.0", ("cpu",))

#: Each entry's scope: the releases and devices on which a run confirmed it (MLX 0.32.4's CPU
#: build on Linux; the whole suite, statistical cases included, ledger off: results/conformance/dspark-mlx/dspark-mlx-0.1.0-cpu.md).
_ENTRIES: tuple[ledgers.Entry, ...] = (
    ledgers.Entry("test_S2_nonpositive_rank_is_a_configuration_error[S2/edge/rank-nonpositive]", "S2", _RANK, (_CPU,)),
    ledgers.Entry("test_S3_nan_and_dead_rows[S3/degenerate/nan-rows-StepSampler]", "S3", _NAN_ROW, (_CPU,)),
    ledgers.Entry("test_S5_bad_temperatures_verify[S5/degenerate/temperature-nan-negative-inf]", "S5", _BAD_T, (_CPU,)),
    ledgers.Entry("test_S5_zero_q_draft_handed_over[S5/degenerate/zero-q-draft-handed-over]", "S5", _ZERO_Q, (_CPU,)),
    ledgers.Entry("test_S5_q_above_one_read_as_one[S5/degenerate/q-above-one]", "S5", _Q_ABOVE_ONE, (_CPU,)),
    ledgers.Entry("test_S3_greedy_rule_mixed[S3/greedy-rule/mixed-batch]", "S3", _GREEDY_RULE, (_CPU,)),
)

LEDGER = ledgers.Ledger(FINDINGS, _ENTRIES, newest_measured={"cpu": "0.1.0"})
