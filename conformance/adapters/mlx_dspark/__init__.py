"""mlx-dspark's DSpark implementation behind the adapter contract: ``--dspark-impl mlx-dspark``.

mlx-dspark (PyPI ``mlx-dspark``, an MLX DSpark server for Apple Silicon by another author) runs
on Linux through MLX's CPU build. :mod:`.loader` imports its DSpark modules without its package
``__init__`` and with mlx-lm / mlx-vlm stubbed (none of their code is called); the adapter
calls mlx-dspark's own functions, converting torch tensors to ``mx.array`` at the boundary only
(:mod:`conformance.adapters.mlx_arrays`):

* ``StepSampler``, ``TruncatedStepSampler`` (S3): ``generate._sample_arr`` row by row, top-k /
  top-p (no min-p) (:mod:`.sampling`);
* ``MarkovBlock`` (S2): ``DSparkDrafter.sample_block`` (greedy) / ``sample_block_probs``
  (sampled) around ``model.VanillaMarkov``, vanilla head only (:mod:`.markov`, :mod:`.drafter`);
* ``DraftLayouts`` (S1): the same samplers with ``head_slice`` (anchor-first, bonus-anchor)
  and a reduced vocabulary (``set_draft_vocab_map``, ``to_target_ids``) (:mod:`.layouts`);
* ``ChainVerifier``, ``TruncatedChainVerifier`` (S5): ``generate._spec_sample_accept`` row by
  row, sampling rows only (:mod:`.verify`);
* ``SpeculativeRound`` (S9): ``sample_block_probs`` feeding ``_spec_sample_accept`` its ``q``,
  as ``speculative_generate``'s sampled path does (:mod:`.round`);
* ``Confidence`` (S7, confidences without STS): ``model.ConfidenceHead`` (:mod:`.confidence`).

Not offered (skipped by the suite, naming the capability): ``GreedyVerifier`` (the greedy
accept is inline in ``speculative_generate``, no function), ``NoiseStepSampler`` (the draw is
``mx.random.categorical``'s own), ``FoldedDraft`` / ``FoldGate`` / ``FoldRouting`` (no folded
sampler), ``PrefixScheduler`` / ``ProductionScheduler`` (a confidence-threshold cut and a cost
controller, not Algorithm 1 or the budget variant), ``SimulatedAcceptance*`` /
``SimulatedBonus``, ``TensorParallelRound`` (single device), ``SpeculativeLoop``:
``generate.speculative_generate`` (one request, greedy and sampled; prefill draw first, then
rounds, as the contract counts them) drives an mlx-lm target through its KV cache
(``make_cache``, ``verify``, ``rollback``) and a tokenizer, and drafts with the drafter's own
attention backbone over its context caches (``drafter.backbone(noise, n_cached,
ctx_caches)``), with n-gram lookup drafts and a 2-token cap on by default. The suite's tiny
GRU target and ``TinyDSparkDraft`` backbone have no counterpart in mlx-dspark: running the
loop on them means replacing the drafter's backbone and writing the target and its cache in
the adapter, so the drafts under test would be the adapter's, not mlx-dspark's.

Randomness: MLX's RNG is global (``mx.random``), so before every engine call that draws the
adapter seeds it with ``mx.random.seed`` from a draw of the suite's ``torch.Generator``; rows of
one call then draw in order from that stream. Every draw derives from the suite's generator,
but no row has a seed of its own: seeded-row cases raise ``NotImplementedError`` (skips).

Conventions, read from mlx-dspark 0.20.3's code (:data:`CONVENTIONS`), each with its source.
The expected-failure ledger (:mod:`.ledger`) holds the confirmed findings
(``docs/conformance/mlx-dspark-findings.md``); ``DSPARK_MLX_DSPARK_LEDGER=off`` drops it.

Run: ``pip install --no-deps --target DIR mlx-dspark==0.20.3 mlx==0.32.4 mlx-cpu==0.32.4``, then
``PYTHONPATH=DIR python -m conformance.cli run --impl mlx-dspark``.
"""

from __future__ import annotations

from typing import Any

from conformance import contract as c
from conformance.adapters import ledgers
from conformance.adapters.mlx_engine import MLXEngine

from . import ledger
from .confidence import Confidence
from .layouts import DraftLayouts
from .loader import INSTALL_EXTRAS, load_mlx_dspark
from .markov import MarkovBlock
from .round import SpeculativeRound
from .sampling import StepSampler, TruncatedStepSampler
from .verify import ChainVerifier, TruncatedChainVerifier

__all__ = ["make_adapter", "capabilities", "CONVENTIONS", "INSTALL_EXTRAS"]

CONVENTIONS = c.Conventions(
    # generate.py:261 ``if temperature > 0.0`` (sample, else argmax), and speculative_generate
    # picks the drafter by the same test (generate.py:1390): greedy by temperature, only T <= 0.
    greedy_rule="temperature",
    # generate.py:264 / model.py:580 ``mx.argmax``: the first (lowest) index of ties.
    tie_break="lowest",
    # sampling.py:63-70 ``p >= kth``: "ties at the k-th value all survive".
    top_k_ties="all",
    # model.py:610 sample_block_probs truncates q with the request's top-p / top-k.
    draft_truncates=True,
    # generate.py:261: a NaN or negative temperature fails ``temperature > 0.0`` and decodes
    # greedily (argmax).
    bad_temperatures="greedy",
    # _sample_arr never raises on a NaN or all -inf row.
    degenerate_rows="tolerated",
    # generate.py:1107 ``u < min(1, p / max(q, 1e-9))``: a q(x) = 0 draft is accepted iff p(x) > 0
    # (p(x) >= 1e-9; below that with probability p / 1e-9).
    zero_q_drafts="accept",
    # MLX's CPU build on Linux; the adapter has only been measured there.
    devices=("cpu",),
    # model.py:496 head_slice: ``logits_start`` 0 (DeepSpec heads) or 1 (DFlash-lineage heads).
    layouts=("anchor-first", "bonus-anchor"),
    # model.py:537 / 551 set_draft_vocab_map / to_target_ids: reduced draft vocabularies (d2t offsets).
    draft_vocabularies=("target", "reduced"),
)


def capabilities(engine: MLXEngine) -> dict[type, Any]:
    """The capability mapping for the loaded mlx-dspark (see the module note for what is left out)."""
    return {
        c.StepSampler: StepSampler(engine),
        c.TruncatedStepSampler: TruncatedStepSampler(engine),
        c.MarkovBlock: MarkovBlock(engine),
        c.DraftLayouts: DraftLayouts(engine),
        c.ChainVerifier: ChainVerifier(engine),
        c.TruncatedChainVerifier: TruncatedChainVerifier(engine),
        c.SpeculativeRound: SpeculativeRound(engine),
        c.Confidence: Confidence(engine),
    }


def make_adapter() -> c.Adapter:
    """The adapter for the installed mlx-dspark, named ``mlx-dspark==<version>``.

    Raises:
        AdapterLoadError: mlx-dspark or MLX missing, older than 0.8.0 (the first release shipping
            every function the adapter calls), or a DSpark module failed to import (the message
            gives the install line).
    """
    engine = load_mlx_dspark()
    description = (f"mlx-dspark {engine.version} DSpark drafter and verifier on MLX {engine.mx.__version__} "
                   f"({engine.mx.default_device()}), mlx-lm / mlx-vlm stubbed")
    failures, off_note = ledgers.applied(ledger.LEDGER, ledger.LEDGER_ENV, engine.version)
    return c.Adapter(
        name=f"mlx-dspark=={engine.version}",
        conventions=CONVENTIONS,
        capabilities=capabilities(engine),
        expected_failures=failures,
        description=description + off_note,
        replay_env=ledgers.replay_env(ledger.LEDGER_ENV),
    )
