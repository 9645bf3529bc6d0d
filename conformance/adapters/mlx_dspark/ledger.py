"""mlx-dspark's expected-failure ledger: confirmed divergences from the SPEC, by release range and device.

Every entry is a finding written up with a minimal reproducing input in
``docs/conformance/mlx-dspark-findings.md`` (ids M1..), scoped to the mlx-dspark versions and
devices on which a run confirmed it (``_ENTRIES``; the rule: :mod:`conformance.adapters.ledgers`). Entries are strict xfails: when mlx-dspark
fixes one, the run reports XPASS and the entry's range must end. A new divergence is not in here and
fails. ``DSPARK_MLX_DSPARK_LEDGER=off`` turns the ledger off (how the committed matrices are made).
"""

from __future__ import annotations

from conformance.adapters import ledgers

FINDINGS = "docs/conformance/mlx-dspark-findings.md"
LEDGER_ENV = "DSPARK_MLX_DSPARK_LEDGER"

_RANK = "M1: markov_rank <= 0 silently builds a drafter with no Markov head (no configuration error)"
_NAN_ROW = "M2: a sampled row holding one NaN logit draws id 0 (NaN law), even where id 0 is -inf"
_Q_ABOVE_ONE = "M3: a handed-over q(x) slightly above 1 is not read as 1 (accept iff u < min(1, p / max(q, 1e-9)))"
_D2T = ("M4: a reduced vocabulary's d2t is not validated (set_draft_vocab_map): a short map reads past its end, "
        "ids outside [0, V) and duplicates are accepted")
_GREEDY_RULE = "M5: only T <= 0 is greedy (_sample_arr: T > 0.0 samples, unclamped), not the declared T < 1e-5"

#: M1-M4 by the exact cases, ledger off, on 0.8.0 (the oldest release the adapter loads), 0.14.0
#: (strict xfails of the gate) and 0.20.3 (results/conformance/mlx-dspark/); M5 by the greedy-rule
#: statistical case run alone (--case) on 0.8.0 and 0.20.3.
_CPU = ledgers.Scope(">=0.8.0,<=0.20.3", ("cpu",))

#: Each entry's scope: the releases and devices on which a run confirmed it (MLX 0.32.4's CPU
#: build on Linux).
_ENTRIES: tuple[ledgers.Entry, ...] = (
    ledgers.Entry("test_S2_nonpositive_rank_is_a_configuration_error[S2/edge/rank-nonpositive]", "S2", _RANK,
                  (_CPU,)),
    ledgers.Entry("test_S3_nan_and_dead_rows[S3/degenerate/nan-rows-StepSampler]", "S3", _NAN_ROW, (_CPU,)),
    ledgers.Entry("test_S5_q_above_one_read_as_one[S5/degenerate/q-above-one]", "S5", _Q_ABOVE_ONE, (_CPU,)),
    ledgers.Entry("test_S1_d2t_is_validated[S1/vocab/d2t-validated]", "S1", _D2T, (_CPU,)),
    ledgers.Entry("test_S3_greedy_rule_mixed[S3/greedy-rule/mixed-batch]", "S3", _GREEDY_RULE, (_CPU,)),
)

LEDGER = ledgers.Ledger(FINDINGS, _ENTRIES, newest_measured={"cpu": "0.20.3"})
