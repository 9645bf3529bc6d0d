"""SGLang's DSpark implementation behind the adapter contract: ``--dspark-impl sglang``.

The adapter calls the installed PyPI package's own functions and classes (never a copy):
:mod:`.loader` imports SGLang's DSpark modules without its server stack, and one module per
API generation maps the capabilities:

* 0.5.17-0.5.21 (folded-sampling generation): :mod:`.v0517` (0.5.17-0.5.18 have no
  ``SpecTpSync`` and probe free memory themselves; see there);
* 0.5.22+ (Philox-keyed draft): :mod:`.v0522` (``BlockwiseRejection`` from 0.5.23), and the
  simulated bonus (``SimulatedBonus``, :mod:`.simulated`);

Measured on CPU: every release 0.5.17-0.5.23 (``results/conformance/sglang/sglang-<version>-cpu.md``);
on an H200: 0.5.21 and 0.5.23 (whole suite), 0.5.17-0.5.20 (without the statistical cases). ``DSPARK_SGLANG_LEDGER=off`` drops the expected-failure
ledger (:mod:`.ledger`) so that known divergences show as failures.
* both: the bonus-anchor layout from 0.5.19 (:mod:`.layouts`), verification (:mod:`.verify`,
  with the truncated target law), one speculative
  round with SGLang's own drafter, handoff and verifier (:mod:`.speculative_round`),
  simulated acceptance (:mod:`.simulated`), the confidence head with STS
  (:mod:`.confidence`), the production scheduler (SPEC S8's production variant: the
  planner's budget and the top-k fill, :mod:`.scheduler`) and one tensor-parallel round
  per rank with a multi-rank ``SpecTpSync`` over the suite's group
  (:mod:`.tensor_parallel`; 0.5.17-0.5.18 ship none: ``NotImplementedError``, a skip).

Not offered (skipped by the suite, naming the capability): ``PrefixScheduler`` (SGLang's
verify-budget planner is the production variant, not Algorithm 1: an argmax of the
throughput over all budgets, no early stop, fed with confidences two steps old; it is
offered as ``ProductionScheduler``),
``SpeculativeLoop`` (needs the whole worker and a model runner), ``TruncatedStepSampler``
(the DSpark draft samples the full softmax), ``NoiseStepSampler`` and ``FoldGate`` in
0.5.22+ (see :mod:`.v0522`).

Conventions: greedy iff ``top_k <= 1`` in every version (SGLang's draft staging;
0.5.22+'s kernel then argmaxes the rows staged at temperature 0), lowest-index ties; a
top-k cut keeps exactly k tokens (``torch.topk``: ``top_k_ties = "lowest"``, though which
tied ones is torch.topk's order, F9); the drafter never truncates (``draft_truncates =
False``: it samples the full tempered softmax, the verifier truncates the target law).

Run: ``pip install --no-deps --target DIR 'sglang==X' msgspec`` then
``PYTHONPATH=DIR pytest --dspark-impl sglang`` (add ``TRITON_INTERPRET=1`` on CPU for the
Triton chain kernel). ``--dspark-impl conformance.adapters.sglang:make_blockwise_adapter``
selects 0.5.23+'s block-parallel rejection sampler for verification.
"""

from __future__ import annotations

from typing import Any

from conformance import contract as c
from conformance.adapters import ledgers
from conformance.loading import AdapterLoadError

from . import (
    confidence,
    layouts,
    ledger,
    loader,
    scheduler,
    simulated,
    speculative_round,
    tensor_parallel,
    v0517,
    v0522,
    verify,
)
from .loader import SGLangModules, load_sglang

__all__ = ["make_adapter", "make_blockwise_adapter", "capabilities", "requirements", "INSTALL_EXTRAS"]

#: What the loader needs beside ``pip install --no-deps sglang==X`` (its DSpark modules import
#: msgspec); the drift check (``conformance.drift``) installs them with the engine.
INSTALL_EXTRAS: tuple[str, ...] = ("msgspec",)

GREEDY_RULE = "top_k"
#: Verification cuts top-k with ``torch.topk`` (``build_dflash_verify_target_probs``;
#: 0.5.23: ``build_speculative_verify_target_probs``): exactly k tokens, never every tied one.
#: Which tied ones torch.topk keeps is its own order (not the lowest ids on CPU): F9.
TOP_K_TIES = "lowest"
#: The drafter samples the full ``softmax(L / T)``: ``sample_draft_block`` reads only the
#: temperatures and the greedy mask of ``sampling_info``.
DRAFT_TRUNCATES = False


#: NaN, negative and infinite temperatures: SGLang rejects them when a request is admitted
#: (``SamplingParams.verify``: "temperature must be a non-negative finite number"); its DSpark
#: components below that check take them unchecked (F14).
BAD_TEMPERATURES = "error"
#: Logits rows with NaN or all -inf: the samplers return an id in [0, V) (``torch.argmax`` of
#: NaN keys: the NaN token; of an all -inf row: 0), never raise.
DEGENERATE_ROWS = "tolerated"
#: The first release whose chain kernel accepts only where ``0 < q <= 1``
#: (``reject_sampling.py``: ``q_is_prob & (coin * q < p)``), so a q(x) = 0 draft is rejected;
#: before it the test is ``coin * q < p`` alone (accepted iff p(x) > 0).
ZERO_Q_REJECTED_SINCE = (0, 5, 21)


def conventions(modules: SGLangModules | None = None) -> c.Conventions:
    """SGLang's declared conventions; with the loaded ``modules``, also those that depend on
    the release: the layouts it drafts in (:func:`.layouts.layouts_of`; without: anchor-first
    only) and the q(x) = 0 choice (without: the newest releases' ``"reject"``)."""
    found = {} if modules is None else {"layouts": layouts.layouts_of(modules)}
    release = ZERO_Q_REJECTED_SINCE if modules is None else modules.release
    zero_q = "reject" if release >= ZERO_Q_REJECTED_SINCE else "accept"
    return c.Conventions(greedy_rule=GREEDY_RULE, top_k_ties=TOP_K_TIES, draft_truncates=DRAFT_TRUNCATES,
                         bad_temperatures=BAD_TEMPERATURES, degenerate_rows=DEGENERATE_ROWS, zero_q_drafts=zero_q,
                         **found)


def capabilities(modules: SGLangModules, *, blockwise: bool = False) -> dict[type, Any]:
    """The capability mapping for the loaded SGLang (see the module note for what is left out)."""
    if modules.generation == "folded":
        offered = {
            c.StepSampler: v0517.StepSampler(modules),
            c.NoiseStepSampler: v0517.NoiseStepSampler(modules),
            c.MarkovBlock: v0517.MarkovBlock(modules),
            c.FoldedDraft: v0517.FoldedDraft(modules),
            c.FoldGate: v0517.FoldGate(modules),
        }
        draft_params, draft_block = v0517.draft_params, v0517.draft_block
    else:
        offered = {
            c.StepSampler: v0522.StepSampler(modules),
            c.MarkovBlock: v0522.MarkovBlock(modules),
            c.FoldedDraft: v0522.FoldedDraft(modules),
        }
        draft_params, draft_block = v0522.draft_params, v0522.draft_block
    offered[c.DraftLayouts] = layouts.DraftLayouts(modules, offered[c.MarkovBlock])
    offered[c.ChainVerifier] = verify.ChainVerifier(modules, draft_params, blockwise=blockwise)
    offered[c.TruncatedChainVerifier] = verify.TruncatedChainVerifier(modules, draft_params, blockwise=blockwise)
    offered[c.SpeculativeRound] = speculative_round.SpeculativeRound(modules, draft_block, blockwise=blockwise)
    offered[c.GreedyVerifier] = verify.GreedyVerifier(modules)
    offered[c.SimulatedAcceptance] = simulated.SimulatedAcceptance(modules)
    if modules.generation == "philox":  # sample_simulated_bonus first shipped in 0.5.22
        offered[c.SimulatedBonus] = simulated.SimulatedBonus(modules)
    offered[c.Confidence] = confidence.Confidence(modules)
    offered[c.ProductionScheduler] = scheduler.ProductionScheduler(modules)
    offered[c.TensorParallelRound] = tensor_parallel.TensorParallelRound(modules, draft_block)
    return offered


def requirements(modules: SGLangModules) -> dict[type, c.Requirement]:
    """Where the capabilities of the loaded SGLang cannot run everywhere (``require`` skips
    them elsewhere, naming the reason): 0.5.22+'s ``DsparkDraftSampler`` asks
    ``torch.cuda.is_current_stream_capturing()`` when it sizes its step-logits buffer, which
    a CPU-only torch build cannot answer (:mod:`.v0522`)."""
    if modules.generation == "folded":
        return {}
    return {c.FoldedDraft: v0522.FOLDED_REQUIREMENT}


def make_adapter() -> c.Adapter:
    """The adapter for the installed SGLang, named ``sglang==<version>``.

    Raises:
        AdapterLoadError: SGLang missing, too old, or a DSpark module failed to load.
    """
    modules = load_sglang()
    description = f"SGLang {modules.version} DSpark ({modules.generation} API), loaded without its server"
    failures, off_note = ledgers.applied(ledger.LEDGER, ledger.LEDGER_ENV, modules.version)
    return c.Adapter(
        name=f"sglang=={modules.version}",
        conventions=conventions(modules),
        capabilities=capabilities(modules),
        requirements=requirements(modules),
        expected_failures=failures,
        description=description + off_note,
        replay_env=ledgers.replay_env(ledger.LEDGER_ENV),
    )


def make_blockwise_adapter() -> c.Adapter:
    """As :func:`make_adapter`, verifying with 0.5.23+'s ``BlockwiseRejection``.

    Raises:
        AdapterLoadError: as :func:`make_adapter`, or an SGLang older than 0.5.23 (0.5.22
            ships no ``blockwise_rejection`` module).
    """
    modules = load_sglang()
    if "blockwise" not in modules:
        raise AdapterLoadError(
            f"sglang=={modules.version}: BlockwiseRejection "
            f"({loader.DSPARK_MODULES['philox']['blockwise']}) first shipped in sglang 0.5.23"
        )
    return c.Adapter(
        name=f"sglang=={modules.version}+blockwise",
        conventions=conventions(modules),
        capabilities=capabilities(modules, blockwise=True),
        requirements=requirements(modules),
        description=f"SGLang {modules.version} DSpark, verify through BlockwiseRejection",
    )
