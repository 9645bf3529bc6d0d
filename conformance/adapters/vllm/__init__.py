"""vLLM's DSpark implementation behind the adapter contract: ``--dspark-impl vllm``.

The adapter calls the installed PyPI package's own functions (never a copy): :mod:`.loader`
imports the V2 model runner's DSpark modules without the engine, and each capability maps
onto vLLM's code:

* ``StepSampler`` (S3): ``gumbel_sample`` (:mod:`.sampling`);
* ``MarkovBlock`` (S2): ``DSparkSpeculator._sample_sequential``, vanilla head; from 0.34.0 also
  the rnn head, through vLLM's recurrent Markov step (Mistral Large 4's DSpark draft: the same
  ``[s ; W1[prev] ; h]`` joint projection, gates and ``s_0 = 0`` as SPEC S2) (:mod:`.markov`);
* ``DraftLayouts`` (S1): the same loop with vLLM's reduced-vocabulary d2t scatter
  (:mod:`.layouts`; anchor-first only, no padded vocabulary);
* ``ChainVerifier``, ``GreedyVerifier`` (S5): ``rejection_sample``, seeded rows natively
  (:mod:`.verify`);
* ``SpeculativeRound`` (S9): the drafter's Markov loop feeding ``rejection_sample`` with the
  request's shared seed, positions and the drafter's logits cache (:mod:`.round`);
* ``TensorParallelRound`` (S5 tensor parallelism): the same round per rank from the request's
  seeds and positions (the rank's generator unread), verify lengths from adaptive verification
  with rank 0's cost curves, broadcast by its own ``set_cost_curves`` (0.28.0+; CUDA before
  0.33.0), else ``gamma`` (:mod:`.tensor_parallel`);
* ``ProductionScheduler`` (S8 production variant, 0.28.0+): ``AdaptiveVerificationManager``'s
  ``get_num_tokens`` (budget from stale confidences) and ``reallocate_drafts`` (the fill)
  (:mod:`.scheduler`);
* ``SimulatedAcceptance`` (S6, ``match-expected`` only): the synthetic rejection mode, a mean
  ``synthetic_acceptance_length`` resolved by vLLM's config helpers and drawn by
  ``rejection_sample``'s synthetic accept (:mod:`.simulated`); the same object is the
  ``SimulatedAcceptanceBatch`` (one synthetic step of ``n`` requests per law case);
* ``Confidence`` (S7, confidences without STS; 0.28.0+): ``DSparkConfidenceHead`` and
  ``compute_confidence`` from the DSpark model file (:mod:`.confidence`).

What differs between releases is found by inspecting the installed functions
(``gumbel_sample``'s cache and ``is_drafting`` arguments, ``rejection_sample``'s draft-logits
cache object from 0.34.0, the drafter's recurrent step), not by version strings.

Capability loss is never silent: where the wheel ships an optional module that fails to
import (0.30.0+ installed with ``--no-deps`` lack ``regex``, which adaptive verification
reaches through ``vllm.utils.platform_utils``), :func:`unavailable` names the capabilities it
feeds, the module, the error and the pip line (``loader.INSTALL_EXTRAS``). Measured
on CPU (``TRITON_INTERPRET=1``): see ``results/conformance/vllm/vllm-*-cpu.md``. The expected-failure
ledger (:mod:`.ledger`) holds the confirmed findings; ``DSPARK_VLLM_LEDGER=off`` drops it.

Not offered (skipped by the suite, naming the capability): ``NoiseStepSampler`` (the noise
is a hash computed inside the kernel and cannot be supplied), ``TruncatedStepSampler`` (the
DSpark draft samples the full softmax; top-k/top-p are the target sampler's),
``FoldedDraft`` / ``FoldGate`` / ``FoldRouting`` (vLLM captures the whole draft step in its
CUDA graph with no folded-sampler object or memory gate of SGLang's kind),
``PrefixScheduler`` (vLLM's adaptive verification is the production variant, not
Algorithm 1; 0.25.0 ships no adaptive verification at all), ``SpeculativeLoop`` (needs the engine and a model runner),
``TruncatedChainVerifier`` (vLLM's top-k/top-p live in ``vllm.v1.sample.ops``, which needs the
platform layer), ``Confidence`` on 0.25.0 (no confidence head in that release). Features a
capability lacks raise ``NotImplementedError`` naming them (a skip): the ``multinomial``
method and method names (S6), STS temperatures, ``fit_sts`` and ``prefix_survival`` (S7), the
gated head (no release ships one), the rnn head before 0.34.0 or with a reduced draft
vocabulary (S1, S2).

Conventions: greedy iff vLLM's temperature state is 0, reached by ``temperature < 1e-5``
after vLLM's floor of ``0 < T < 1e-2`` to ``1e-2`` (:mod:`.engine_inputs`); ties to the
lowest index; the drafter draws from the full tempered softmax (``draft_truncates=False``);
degenerate inputs: bad temperatures raise, NaN / all -inf rows give an id in [0, V), a q(x) = 0
draft is accepted iff p(x) > 0 (SPEC S3, S5).
Randomness: seeds and positions drawn from the suite's generator.

Run: ``pip install --no-deps --target DIR 'vllm==X' regex`` (``loader.INSTALL_HINT``) then
``PYTHONPATH=DIR TRITON_INTERPRET=1 dspark-conformance run --impl vllm`` (no
``TRITON_INTERPRET`` on a GPU).
"""

from __future__ import annotations

from typing import Any

from conformance import contract as c
from conformance.adapters import ledgers

from . import ledger
from .confidence import Confidence, confidence_support
from .loader import INSTALL_EXTRAS, OPTIONAL_MODULES, VLLMModules, defines_name, load_vllm
from .layouts import DraftLayouts
from .markov import MarkovBlock
from .round import SpeculativeRound
from .sampling import StepSampler
from .scheduler import ProductionScheduler, requirement
from .simulated import SimulatedAcceptance
from .tensor_parallel import TensorParallelRound
from .verify import ChainVerifier, GreedyVerifier

__all__ = ["make_adapter", "capabilities", "requirements", "unavailable", "INSTALL_EXTRAS"]

GREEDY_RULE = "temperature"
#: NaN, negative and infinite temperatures are rejected with ValueError, as vLLM's
#: ``SamplingParams`` rejects them (:mod:`.engine_inputs`; above 2 too: V1).
BAD_TEMPERATURES = "error"
#: ``gumbel_sample`` on a row with NaN logits returns a finite-logit id, on an all -inf row
#: id 0: an id in [0, V), never an error.
DEGENERATE_ROWS = "tolerated"
#: ``rejection_sample`` accepts iff ``log p > log u + log q``: a q(x) = 0 draft (log q = -inf)
#: is accepted iff p(x) > 0.
ZERO_Q_DRAFTS = "accept"


#: Optional module -> the capabilities it feeds, and the name its file must define for the
#: release to offer them (None: the file alone). ``TensorParallelRound`` plans with adaptive
#: verification where the release ships it, so it is not offered without it.
_FEEDS: dict[str, tuple[tuple[type, ...], str | None]] = {
    "adaptive": ((c.ProductionScheduler, c.TensorParallelRound), None),
    "dspark_model": ((c.Confidence,), "DSparkConfidenceHead"),
}


def unavailable(modules: VLLMModules) -> dict[type, str]:
    """Capabilities the installed release ships but that could not load: capability -> why,
    naming the module, the import error and the pip line that installs what the adapter
    needs beside the wheel (``INSTALL_EXTRAS``). Empty when every shipped module loaded.
    A module the release does not ship (0.25.0's adaptive verification) is no loss."""
    lost: dict[type, str] = {}
    for short, (capabilities_fed, defines) in _FEEDS.items():
        if short not in modules.missing:
            continue
        name = OPTIONAL_MODULES[short]
        if defines is not None and not defines_name(modules.root, name, defines):
            continue
        why = (f"vllm=={modules.version} ships {name} but it did not load: {modules.missing[short]}; "
               f"install the packages the adapter needs beside the wheel: "
               f"pip install --target DIR {' '.join(INSTALL_EXTRAS)}")
        lost.update(dict.fromkeys(capabilities_fed, why))
    return lost


def capabilities(modules: VLLMModules) -> dict[type, Any]:
    """The capability mapping for the loaded vLLM (see the module note for what is left out).

    Raises:
        AdapterLoadError: the synthetic-mode helpers are missing from the installed files.
    """
    offered = {
        c.StepSampler: StepSampler(modules),
        c.MarkovBlock: MarkovBlock(modules),
        c.DraftLayouts: DraftLayouts(modules),
        c.ChainVerifier: ChainVerifier(modules),
        c.GreedyVerifier: GreedyVerifier(modules),
        c.SpeculativeRound: SpeculativeRound(modules),
        c.TensorParallelRound: TensorParallelRound(modules),
    }
    offered[c.SimulatedAcceptance] = offered[c.SimulatedAcceptanceBatch] = SimulatedAcceptance(modules)
    if confidence_support(modules) is None:
        offered[c.Confidence] = Confidence(modules)
    if "adaptive" in modules:
        offered[c.ProductionScheduler] = ProductionScheduler(modules)
    for capability in unavailable(modules):
        offered.pop(capability, None)
    return offered


def requirements(modules: VLLMModules) -> dict[type, c.Requirement]:
    """Where the capabilities of the loaded vLLM cannot run everywhere: 0.28.0-0.29.0's
    adaptive verification pins host memory, so ``ProductionScheduler`` and
    ``TensorParallelRound`` (which plans with it) need CUDA there."""
    needs = requirement(modules) if "adaptive" in modules else None
    return {} if needs is None else {c.ProductionScheduler: needs, c.TensorParallelRound: needs}


def make_adapter() -> c.Adapter:
    """The adapter for the installed vLLM, named ``vllm==<version>``.

    Raises:
        AdapterLoadError: vLLM missing, older than 0.25.0, or a DSpark module failed to load
            (the message names the version and the missing piece).
    """
    modules = load_vllm()
    description = f"vLLM {modules.version} DSpark (V2 model runner), loaded without its engine"
    failures, off_note = ledgers.applied(ledger.LEDGER, ledger.LEDGER_ENV, modules.version)
    return c.Adapter(
        name=f"vllm=={modules.version}",
        conventions=c.Conventions(greedy_rule=GREEDY_RULE, draft_truncates=False, bad_temperatures=BAD_TEMPERATURES,
                                  degenerate_rows=DEGENERATE_ROWS, zero_q_drafts=ZERO_Q_DRAFTS,
                                  draft_vocabularies=("target", "reduced")),
        capabilities=capabilities(modules),
        requirements=requirements(modules),
        unavailable=unavailable(modules),
        expected_failures=failures,
        description=description + off_note,
        replay_env=ledgers.replay_env(ledger.LEDGER_ENV),
    )

