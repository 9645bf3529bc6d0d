"""vLLM's DSpark implementation behind the adapter contract: ``--dspark-impl vllm``.

The adapter calls the installed PyPI package's own functions (never a copy): :mod:`.loader`
imports the V2 model runner's DSpark modules without the engine, and each capability maps
onto vLLM's code:

* ``StepSampler`` (S3): ``gumbel_sample`` (:mod:`.sampling`);
* ``MarkovBlock`` (S2): ``DSparkSpeculator._sample_sequential``, vanilla head (:mod:`.markov`);
* ``ChainVerifier``, ``GreedyVerifier`` (S5): ``rejection_sample``, seeded rows natively
  (:mod:`.verify`);
* ``SpeculativeRound`` (S9): the drafter's Markov loop feeding ``rejection_sample`` with the
  request's shared seed, positions and the drafter's logits cache (:mod:`.round`);
* ``SimulatedAcceptance`` (S6, ``match-expected`` only): the synthetic rejection mode, a mean
  ``synthetic_acceptance_length`` resolved by vLLM's config helpers and drawn by
  ``rejection_sample``'s synthetic accept (:mod:`.simulated`);
* ``Confidence`` (S7, confidences without STS; 0.28.0+): ``DSparkConfidenceHead`` and
  ``compute_confidence`` from the DSpark model file (:mod:`.confidence`).

What differs between releases is found by inspecting the installed functions
(``gumbel_sample``'s cache and ``is_drafting`` arguments), not by version strings. Measured
on CPU (``TRITON_INTERPRET=1``): see ``docs/conformance/vllm-*-cpu.md``. The expected-failure
ledger (:mod:`.ledger`) holds the confirmed findings; ``DSPARK_VLLM_LEDGER=off`` drops it.

Not offered (skipped by the suite, naming the capability): ``NoiseStepSampler`` (the noise
is a hash computed inside the kernel and cannot be supplied), ``TruncatedStepSampler`` (the
DSpark draft samples the full softmax; top-k/top-p are the target sampler's),
``FoldedDraft`` / ``FoldGate`` / ``FoldRouting`` (vLLM captures the whole draft step in its
CUDA graph with no folded-sampler object or memory gate of SGLang's kind),
``PrefixScheduler`` (vLLM's adaptive verification is the production variant, not
Algorithm 1), ``SpeculativeLoop`` (needs the engine and a model runner),
``TruncatedChainVerifier`` (vLLM's top-k/top-p live in ``vllm.v1.sample.ops``, which needs the
platform layer), ``Confidence`` on 0.25.0 (no confidence head in that release). Features a
capability lacks raise ``NotImplementedError`` naming them (a skip): the ``multinomial``
method and method names (S6), STS temperatures, ``fit_sts`` and ``prefix_survival`` (S7).

Conventions: greedy iff vLLM's temperature state is 0, reached by ``temperature < 1e-5``
after vLLM's floor of ``0 < T < 1e-2`` to ``1e-2`` (:mod:`.engine_inputs`); ties to the
lowest index; the drafter draws from the full tempered softmax (``draft_truncates=False``).
Randomness: seeds and positions drawn from the suite's generator.

Run: ``pip install --no-deps --target DIR 'vllm==X'`` then
``PYTHONPATH=DIR TRITON_INTERPRET=1 dspark-conformance run --impl vllm`` (no
``TRITON_INTERPRET`` on a GPU).
"""

from __future__ import annotations

from typing import Any

from conformance import contract as c

from . import ledger
from .confidence import Confidence, confidence_support
from .loader import VLLMModules, load_vllm
from .markov import MarkovBlock
from .round import SpeculativeRound
from .sampling import StepSampler
from .simulated import SimulatedAcceptance
from .verify import ChainVerifier, GreedyVerifier

__all__ = ["make_adapter", "capabilities"]

GREEDY_RULE = "temperature"


def capabilities(modules: VLLMModules) -> dict[type, Any]:
    """The capability mapping for the loaded vLLM (see the module note for what is left out).

    Raises:
        AdapterLoadError: the synthetic-mode helpers are missing from the installed files.
    """
    offered = {
        c.StepSampler: StepSampler(modules),
        c.MarkovBlock: MarkovBlock(modules),
        c.ChainVerifier: ChainVerifier(modules),
        c.GreedyVerifier: GreedyVerifier(modules),
        c.SpeculativeRound: SpeculativeRound(modules),
        c.SimulatedAcceptance: SimulatedAcceptance(modules),
    }
    if confidence_support(modules) is None:
        offered[c.Confidence] = Confidence(modules)
    return offered


def make_adapter() -> c.Adapter:
    """The adapter for the installed vLLM, named ``vllm==<version>``.

    Raises:
        AdapterLoadError: vLLM missing, older than 0.25.0, or a DSpark module failed to load
            (the message names the version and the missing piece).
    """
    modules = load_vllm()
    description = f"vLLM {modules.version} DSpark (V2 model runner), loaded without its engine"
    if not ledger.ledger_enabled():
        description += f"; expected-failure ledger off ({ledger.LEDGER_ENV}=off)"
    return c.Adapter(
        name=f"vllm=={modules.version}",
        conventions=c.Conventions(greedy_rule=GREEDY_RULE, draft_truncates=False),
        capabilities=capabilities(modules),
        expected_failures=ledger.expected_failures(modules.version) if ledger.ledger_enabled() else (),
        description=description,
    )

