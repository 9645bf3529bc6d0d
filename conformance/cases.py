"""Case registry: SPEC clauses, and one frozen record per conformance case.

Every conformance test is parametrised by :class:`Case` records with ids
``<section>/<family>/<detail>`` (e.g. ``S3/chi-square/peaked-T0.7``). A case names the
SPEC clauses it checks and how many statistical assertions it makes; ``tests/`` checks
that ids are unique, that every clause of :data:`SPEC_CLAUSES` is covered by some case, and
that the declared statistical assertions fit the family-wise budget
(:data:`conformance.budget.MAX_STATISTICAL_ASSERTIONS`).

To add a case: call :func:`case` at module level in the test module of its section, then
parametrise the test with it (``@pytest.mark.parametrize("case", [...], ids=case_id)``).
"""

from __future__ import annotations

import dataclasses
from typing import Iterable

from .sections import SECTIONS

SPEC_CLAUSES: dict[str, str] = {
    "S0.numerically-equal": "reordered float arithmetic agrees within a derived roundoff bound; bit identity apart",
    "S1.base-logits": "U = h @ W_lm.T cropped to org_vocab_size",
    "S1.layouts": "bonus-anchor layout: anchor plus gamma queries, the anchor's position cropped, gamma = block - 1",
    "S1.draft-vocab": "padded draft vocab cropped, never remapped; reduced vocab: d2t validated, draws mapped before "
                      "storage and conditioning, block lifted with -inf elsewhere",
    "S2.vanilla": "vanilla head bias = W2(W1[prev])",
    "S2.gated": "gated head bias = W2(sigmoid(Wg [h; W1[prev]] + bg) * W1[prev])",
    "S2.rnn": "rnn head with a state carried across the block, s_0 = 0",
    "S2.sample-block": "exactly gamma sampler calls, prev_0 = x0, prev_k = x_{k-1}",
    "S2.teacher-forcing": "apply_block_logits equals sample_block's corrected logits",
    "S2.edge": "gamma = 0, missing hidden states, markov_rank <= 0",
    "S3.greedy": "greedy rows take argmax, lowest index on ties",
    "S3.greedy-rule": "declared greedy rule (top_k <= 1 or temperature < 1e-5) picks greedy rows",
    "S3.temperature-clamp": "temperature clamped to at least 1e-5",
    "S3.law": "sampling rows draw from softmax(L / T)",
    "S3.exponential-race": "argmax p / E with E ~ Exp(1) (same law as Gumbel-max)",
    "S3.tiled": "tiled combine with rescale picks the untiled token for the same noise",
    "S3.fresh-noise": "noise fresh for every step, row and call",
    "S3.vocab-crop": "ids < V even with padded logits; zero-probability tokens never drawn",
    "S3.truncation": "top-k / top-p / min-p draw from the renormalised truncated softmax (sets on L / T)",
    "S3.top-k-ties": "ties at a top-k cut follow the declared rule; the law is the renormalised kept set",
    "S3.degenerate": "zero-mass tail tiles, endpoint noise, NaN / all -inf rows, bad / huge / tiny temperatures: "
                     "never an id outside [0, V) or a -inf token; declared rules for bad rows and temperatures",
    "S4.static-buffers": "static buffers sized once for max_bs",
    "S4.stage": "stage_sampling_params: clamp, greedy mask, all-greedy default",
    "S4.fresh-noise-replay": "in-graph noise refreshed on every step and replay",
    "S4.one-pass": "one sample_block per proposal: tokens and corrected logits agree",
    "S4.eligibility": "folded proposal eligibility; eager accept after a sampling fold",
    "S4.folded-vs-eager": "greedy identical, sampling same law, corrected logits equal",
    "S4.gate": "OFF / AUTO / FORCE memory gate with the byte formula and 1 GiB margin",
    "S5.accept-rule": "accept x_j iff u q(x_j) < p(x_j); stop at first reject",
    "S5.residual": "correction from normalize(max(p - q, 0)), p when that mass is ~0",
    "S5.explicit-uniforms": "explicit uniforms: coin j decides draft j alone; the final uniform draws the correction "
                            "or bonus by inverse CDF in index order (smallest C_i > u; past the total, the last "
                            "token with mass), in float64, p when the residual mass is <= 1e-12",
    "S5.bonus": "bonus drawn from p_{l+1} when all accepted",
    "S5.lossless": "committed tokens follow the target's law whatever q",
    "S5.greedy-verify": "greedy verification: accept while x_j == argmax p_j",
    "S5.cap": "verify-length cap with trim",
    "S5.seeded": "seeded rows repeat; streams 0 and 1 independent",
    "S5.mixed": "mixed greedy / sampling batches",
    "S5.truncation": "the target law under top-k / top-p / min-p is the renormalised truncated softmax of L / T",
    "S5.tensor-parallel": "ranks with the same inputs and seeds compute identical drafts, verify lengths, accepted "
                          "counts and tokens, whatever their local generators and profiled tables",
    "S5.streams": "draft noise and the verifier's coins and correction draw are independent streams",
    "S5.degenerate": "q(x) = 0 drafts by the declared choice, q above 1 read as 1, endpoint and boundary coins "
                     "never pick a zero-probability token, -1 sentinel drafts rejected and never emitted",
    "S5.invariance": "a row's result does not depend on its batch, order or chunking; same seeds, same results; "
                     "inputs not modified in place",
    "S6.match-expected": "floor/ceil draw whose mean is the clamped value",
    "S6.multinomial": "round(clamp(Normal(value, 1), 1, max_len))",
    "S6.invalid-method": "any other method raises ValueError",
    "S6.executor": "a fresh length on every verify step; reused buffer",
    "S6.simulated-bonus": "the bonus after a simulated run of a drafts: target row a, argmax as T -> 0, softmax(L / T)",
    "S7.runtime-gamma": "confidence shapes follow the runtime gamma",
    "S7.calibration": "c = sigmoid(raw / t); prefix survival = cumprod",
    "S7.sts": "STS fitted left to right on the cumulative product, earlier positions fixed; order kept, ECE lowered",
    "S8.algorithm-1": "causal scheduler matches Algorithm 1 with early stop and tie order",
    "S8.lossless": "Appendix A: the scheduler keeps the output law (0.7, 0.3)",
    "S8.production-budget": "production variant: budget = brute-force argmax of (R + admitted survivals) / cost(B), "
                            "highest stale survivals first, prefixes only",
    "S8.production-bounds": "production variant: lengths within per-request minimum and maximum lengths",
    "S8.production-non-anticipation": "production variant: the current block's confidences and survivals beyond "
                                      "a cut move no admitted prefix; no request sees another's current values",
    "S9.greedy": "greedy speculative output equals greedy decoding",
    "S9.law": "sampled sequences follow the target's law",
    "S9.tau": "tau counts the anchor-first slot 0",
    "S9.schedule": "scheduled loop: each round's verify lengths are Algorithm 1 on that round's own block "
                   "confidences (not a stale buffer's)",
    "S9.tau-expected": "mean tau and verify length match the SPEC's expectation for target, draft, T, scheduler",
    "S9.round": "the engine's drafter feeds its verifier: committed tokens follow the (truncated) target law",
    "S9.round-handoff": "the q handed to the verifier is the law the drafts were drawn from",
    "S9.round-acceptance": "accepted counts follow the law that p and q imply (draft of known quality)",
    "S10.duplicate-sample-block": "folded sampler calling sample_block twice is caught",
    "S10.simulated-rounded": "simulated acceptance rounded once and cached is caught",
    "S10.folded-staging": "stale staging, frozen noise, wrong greedy mask or clamp are caught",
}


@dataclasses.dataclass(frozen=True)
class Case:
    """One conformance case.

    Attributes:
        id: ``<section>/<family>/<detail>``, unique.
        note: one line on what the case checks.
        clauses: SPEC clause ids (keys of :data:`SPEC_CLAUSES`) it covers.
        statistical: number of statistical assertions the case makes (0 for exact cases).
    """

    id: str
    note: str
    clauses: tuple[str, ...]
    statistical: int = 0

    @property
    def section(self) -> str:
        return self.id.split("/", 1)[0]


REGISTRY: dict[str, Case] = {}


def case(id: str, note: str, clauses: Iterable[str], statistical: int = 0) -> Case:
    """Create and register a case.

    Raises:
        ValueError: duplicate id, malformed id, unknown clause, or negative ``statistical``.
    """
    parts = id.split("/")
    if len(parts) != 3 or not all(parts) or parts[0] not in SECTIONS:
        raise ValueError(f"id: expected '<section>/<family>/<detail>' like 'S3/chi-square/flat' with a section "
                         f"of {SECTIONS}, got {id!r}")
    if id in REGISTRY:
        raise ValueError(f"id: case {id!r} is already registered")
    clauses = tuple(clauses)
    unknown = [cl for cl in clauses if cl not in SPEC_CLAUSES]
    if unknown:
        raise ValueError(f"clauses: unknown SPEC clause ids {unknown}; see conformance.cases.SPEC_CLAUSES")
    if statistical < 0:
        raise ValueError(f"statistical: expected a count >= 0, got {statistical}")
    record = Case(id, note, clauses, statistical)
    REGISTRY[id] = record
    return record


def case_id(value: object) -> str:
    """pytest ``ids=`` helper: a Case's id (with '/' kept, so ``-k`` can select by family)."""
    return value.id if isinstance(value, Case) else str(value)
