"""dspark-mlx's DSpark recipe behind the adapter contract: ``--dspark-impl dspark-mlx``.

dspark-mlx (PyPI ``dspark-mlx``, an MLX implementation of DSpark by another author) runs on
Linux through MLX's CPU build. The adapter calls the installed package's own functions
(:mod:`.loader`), converting torch tensors to ``mx.array`` / NumPy at the boundary only
(:mod:`conformance.adapters.mlx_arrays`):

* ``StepSampler`` (S3): ``recipe.sample``, the drafter's per-step draw (:mod:`.sampling`);
* ``MarkovBlock`` (S2): ``recipe.draft_block_decode`` with ``model.heads.DSparkMarkovHead``,
  vanilla head only (:mod:`.markov`, :mod:`.heads`);
* ``ChainVerifier``, ``GreedyVerifier`` (S5): ``verify.speculative_sample_accept`` and
  ``verify.greedy_accept``, row by row (:mod:`.verify`); ``TruncatedChainVerifier`` (S5):
  the same with the draft law handed over as probabilities, neutral truncation only;
* ``SpeculativeRound`` (S9): the block drafter feeding the verifier its draw law, no
  truncation (:mod:`.round`);
* ``Confidence`` (S7, confidences without STS): ``model.heads.DSparkConfidenceHead``
  (:mod:`.confidence`).

Not offered (skipped by the suite, naming the capability): ``NoiseStepSampler`` (the
uniforms are drawn inside ``recipe.sample``), ``TruncatedStepSampler`` (no top-k / top-p /
min-p anywhere in dspark-mlx),
``DraftLayouts`` (one layout, anchor-first, and the target's vocabulary only: no layout or
draft vocabulary beyond what ``MarkovBlock`` covers), ``FoldedDraft`` / ``FoldGate`` /
``FoldRouting`` (no folded sampler), ``PrefixScheduler`` / ``ProductionScheduler`` (the
loop gates the block on a confidence threshold, not Algorithm 1 or a budget),
``SimulatedAcceptance*`` / ``SimulatedBonus`` (no benchmark mode), ``TensorParallelRound``
(single device), ``SpeculativeLoop``: ``loop.generate_eager`` and ``generate.generate`` are
greedy only (``verify.greedy_accept``, no temperature or RNG) for one request, and call a
drafter of one of dspark-mlx's architectures (``arch.qwen3`` / ``arch.gemma4``: ``draft``,
``extend_context``, ``reset``; ``model.drafter.DSparkDrafter.forward_spec``), stacks of decoder
layers attending to the host's projected hidden states. The suite's ``TinyDSparkDraft`` (one
bidirectional attention layer over the target state before the anchor) has no counterpart
there: the adapter would have to write the drafter the loop calls, so the loop's drafts would
be the adapter's, not dspark-mlx's. Its first round also drafts from the last prompt token and
emits the prefill draw inside that round (``greedy_accept``'s row 0), where the contract's
``accept_lengths`` count the rounds after the prefill draw.

Randomness: MLX's RNG is global (``mx.random``, no generator argument), so before every
engine call that draws the adapter seeds it with ``mx.random.seed`` from a draw of the suite's
``torch.Generator``; the verifier's NumPy ``Generator`` is built per call from such a draw.
Every draw thus derives from the suite's generator (a case seed reproduces a run), but there
is no per-row seed: seeded-row cases (S5 seeded rows, S9 seeded rounds) raise
``NotImplementedError`` and are skipped, and a row's draws depend on the batch it is in.

Conventions, read from dspark-mlx 0.1.0's code (:data:`CONVENTIONS`): see the comments there.
The expected-failure ledger (:mod:`.ledger`) holds the confirmed findings
(``docs/conformance/dspark-mlx-findings.md``); ``DSPARK_DSPARK_MLX_LEDGER=off`` drops it.

Run: ``pip install --no-deps --target DIR dspark-mlx==0.1.0 mlx==0.32.4 mlx-cpu==0.32.4``, then
``PYTHONPATH=DIR python -m conformance.cli run --impl dspark-mlx``.
"""

from __future__ import annotations

from typing import Any

from conformance import contract as c
from conformance.adapters import ledgers
from conformance.adapters.mlx_engine import MLXEngine

from . import ledger
from .confidence import Confidence
from .loader import INSTALL_EXTRAS, load_dspark_mlx
from .markov import MarkovBlock
from .round import SpeculativeRound
from .sampling import StepSampler
from .verify import ChainVerifier, GreedyVerifier, TruncatedChainVerifier

__all__ = ["make_adapter", "capabilities", "CONVENTIONS", "INSTALL_EXTRAS"]

CONVENTIONS = c.Conventions(
    # recipe.py:23 ``if temperature == 0: return mx.argmax(...)``: greedy by temperature (only
    # T == 0 exactly; 0 < T < 1e-5 samples at 1e-5, recipe.py:25 ``max(temperature, 1e-5)``).
    greedy_rule="temperature",
    # recipe.py:24 ``mx.argmax`` and verify.py:55 ``np.argmax``: the first (lowest) index of ties.
    tie_break="lowest",
    # no truncation anywhere: the drafter draws from the full tempered softmax (recipe.py:25).
    draft_truncates=False,
    # recipe.py:25 ``max(temperature, 1e-5)``: no validation; a negative T is clamped to 1e-5 and
    # samples (near-greedy), so the nearest rule the SPEC allows is "greedy".
    bad_temperatures="greedy",
    # recipe.py:24-27 never raises: argmax over whatever the row holds.
    degenerate_rows="tolerated",
    # verify.py:93 ``ratio = 1.0 if qd <= 0.0 else min(1.0, p / qd)``: a q(x) = 0 draft is
    # accepted (the nearest SPEC rule is "accept"; it accepts even where p(x) = 0).
    zero_q_drafts="accept",
    # MLX's CPU build on Linux; the adapter has only been measured there.
    devices=("cpu",),
)


def capabilities(engine: MLXEngine) -> dict[type, Any]:
    """The capability mapping for the loaded dspark-mlx (see the module note for what is left out)."""
    return {
        c.StepSampler: StepSampler(engine),
        c.MarkovBlock: MarkovBlock(engine),
        c.ChainVerifier: ChainVerifier(engine),
        c.GreedyVerifier: GreedyVerifier(engine),
        c.TruncatedChainVerifier: TruncatedChainVerifier(engine),
        c.SpeculativeRound: SpeculativeRound(engine),
        c.Confidence: Confidence(engine),
    }


def make_adapter() -> c.Adapter:
    """The adapter for the installed dspark-mlx, named ``dspark-mlx==<version>``.

    Raises:
        AdapterLoadError: dspark-mlx or MLX missing, older than the first release, or a DSpark
            module failed to import (the message gives the install line).
    """
    engine = load_dspark_mlx()
    description = (f"dspark-mlx {engine.version} DSpark recipe on MLX {engine.mx.__version__} "
                   f"({engine.mx.default_device()})")
    failures, off_note = ledgers.applied(ledger.LEDGER, ledger.LEDGER_ENV, engine.version)
    return c.Adapter(
        name=f"dspark-mlx=={engine.version}",
        conventions=CONVENTIONS,
        capabilities=capabilities(engine),
        expected_failures=failures,
        description=description + off_note,
        replay_env=ledgers.replay_env(ledger.LEDGER_ENV),
    )
