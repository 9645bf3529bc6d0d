"""The adapter contract: one ``typing.Protocol`` per capability, in canonical shapes.

An implementation under test (IUT) is an :class:`Adapter`: a name, its declared
:class:`Conventions`, and a mapping from capability Protocol to an object implementing it.
Tests ask for a capability with ``require(StepSampler)``; an adapter that does not offer it
gets a skip that names the capability (never a pass, never a ``hasattr`` probe).

Canonical forms (SPEC notation): token ids ``int64``; logits ``float32`` unless a dtype is
passed; temperatures ``float32 [B]``; ``top_k`` ``int64 [B]``; all tensors on the device
the test chose (what an IUT returns lives where its inputs do).

Boundary: every value an IUT returns is checked against its Protocol's docstring (type,
dtype, shape from the call's arguments, device, id range, finiteness) by
:mod:`conformance.boundary` before a test uses it; a violation fails the case with a
message naming the capability, the method, what was expected and what came back. Every
tensor an IUT is given (an argument, or inside a sequence, a mapping such as a
``state_dict``, a dataclass, or an ``nn.Module`` such as the S9 tiny models) is unchanged
when the call returns (SPEC S5 invariance), a NaN staying NaN; the boundary checks that
too, naming the argument and its first changed element. No method may write into a tensor
it is given: what an IUT writes are its own buffers (the S4 static buffers behind
``replay``, the S6 correct-drafts buffer behind ``correct_drafts``), which a caller sees only
through what an earlier call returned; the opaque handles of ``load_head`` are the IUT's
too. Randomness reaches an IUT only through a ``torch.Generator`` (or explicit
noise/uniforms), so the suite controls seeds; an IUT with its own RNG derives its seed from
draws of that generator.

Markov heads travel as weights in the reference layout (``dspark_ref.markov`` state dict):
``W1.weight [V, r]``, ``W2.weight [V, r]``, plus ``Wg.weight [r, d + r]/Wg.bias`` (gated)
or ``Wz.weight [3r, 2r + d]/Wz.bias`` (rnn). An adapter translates them into its engine's
layout.

Where a capability runs: an adapter may declare a :class:`Requirement` per capability
(``Adapter.requirements``): the test devices it runs on and whether it needs a CUDA build
of torch. ``require(Capability)`` turns an unmet requirement into a skip that names the
capability and the reason; :class:`Inconclusive` stays for a path that should have run and
did not.

How to add a capability: add a Protocol here (with the SPEC section in its docstring), add
it to ``CAPABILITIES``, implement it in ``adapters/reference.py``, then write tests that
``require`` it.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Literal, Mapping, Protocol, Sequence, runtime_checkable

import torch

__all__ = [
    "Conventions",
    "Requirement",
    "ExpectedFailure",
    "Adapter",
    "StepSampler",
    "NoiseStepSampler",
    "TruncatedStepSampler",
    "MarkovBlock",
    "DraftLayouts",
    "FoldedDraft",
    "FoldedSession",
    "FoldGate",
    "FoldRouting",
    "ChainVerifier",
    "TruncatedChainVerifier",
    "GreedyVerifier",
    "RankGroup",
    "TensorParallelRound",
    "SimulatedAcceptance",
    "SimulatedAcceptanceBatch",
    "SimulatedBonus",
    "Confidence",
    "PrefixScheduler",
    "ProductionScheduler",
    "SpeculativeLoop",
    "SpeculativeLoopRecord",
    "SpeculativeRound",
    "CAPABILITIES",
    "Inconclusive",
    "CannotRunHere",
]


class Inconclusive(Exception):
    """Raised by an adapter or test when the path under test never executed.

    Example: a folded draft that silently fell back to eager, or a loop that never drafted.
    The suite reports the test INCONCLUSIVE (not passed, not failed).
    """


class CannotRunHere(Exception):
    """Raised by an adapter when the engine's code for this call needs what this machine
    lacks, for one input where the capability otherwise runs (DESIGN: a case the machine
    cannot run is a skip with the reason, never a pass, never INCONCLUSIVE).

    The message names what is missing (e.g. "... calls torch.cuda.current_device(); no CUDA
    device here"). The suite reports the test skipped with ``cannot run here: <message>``.
    Where a whole capability needs it, declare a :class:`Requirement` instead.
    """


@dataclasses.dataclass(frozen=True)
class Conventions:
    """What an implementation declares about itself (SPEC S3 conventions).

    Attributes:
        greedy_rule: ``"top_k"`` (greedy iff ``top_k <= 1``, SGLang) or ``"temperature"``
            (greedy iff ``temperature < 1e-5``, vLLM).
        tie_break: ``"lowest"``: greedy argmax returns the lowest index among ties.
        top_k_ties: which tokens a top-k cut keeps when several tie with the k-th value
            (SPEC S3): ``"all"`` of them, or the ``"lowest"`` indices, exactly k.
        draft_truncates: whether the drafter of :class:`SpeculativeRound` draws from the
            request's truncated law (True) or from the full tempered softmax (False); the
            verifier truncates the target law either way (SPEC S5).
        bad_temperatures: what :class:`StepSampler`, :class:`NoiseStepSampler` and
            :class:`ChainVerifier` do with a NaN, negative or infinite temperature (SPEC
            S3 degenerate inputs): ``"error"`` (raise ``ValueError``) or ``"greedy"``
            (such rows decode greedily: argmax, lowest index).
        degenerate_rows: what the step samplers do with a logits row that contains NaN or
            is all -inf (SPEC S3): ``"error"`` (raise ``ValueError``) or ``"tolerated"``
            (return an id in ``[0, V)``, never one whose logit is -inf when the row has
            another).
        zero_q_drafts: how chain verification treats a draft ``x_j`` with ``q_j(x_j) =
            0`` (SPEC S5 degenerate values): ``"accept"`` (the rule ``u * q < p``
            accepts it iff ``p_j(x_j) > 0``) or ``"reject"`` (always rejected).
        dtypes: LM-head dtypes the folded sampler supports.
        devices: device types the adapter runs on (``"cpu"``, ``"cuda"``).
        layouts: the block layouts of :class:`DraftLayouts` (SPEC S1): ``"anchor-first"``
            (the default) and ``"bonus-anchor"`` (``sample_from_anchor = False``).
        draft_vocabularies: the draft vocabularies :class:`DraftLayouts` takes (SPEC S1):
            ``"target"`` (the target's), ``"padded"`` (wider, cropped) and ``"reduced"``
            (smaller, with a draft-to-target map ``d2t``).
    """

    greedy_rule: Literal["top_k", "temperature"] = "top_k"
    tie_break: Literal["lowest"] = "lowest"
    top_k_ties: Literal["all", "lowest"] = "all"
    draft_truncates: bool = True
    bad_temperatures: Literal["error", "greedy"] = "error"
    degenerate_rows: Literal["error", "tolerated"] = "error"
    zero_q_drafts: Literal["accept", "reject"] = "accept"
    dtypes: tuple[torch.dtype, ...] = (torch.float32, torch.bfloat16)
    devices: tuple[str, ...] = ("cpu", "cuda")
    layouts: tuple[str, ...] = ("anchor-first",)
    draft_vocabularies: tuple[str, ...] = ("target",)


_DEVICE_TYPES = ("cpu", "cuda")


@dataclasses.dataclass(frozen=True)
class Requirement:
    """Where one capability of an adapter can run (DESIGN: a case the machine cannot run is
    a skip with the reason, never a pass, never INCONCLUSIVE).

    Attributes:
        devices: test devices (``--dspark-device``) the capability runs on.
        cuda_build: it needs a CUDA build of torch (``torch.backends.cuda.is_built()``),
            whatever the test device (e.g. it queries CUDA-graph capture state).
        reason: why, in a few words; shown in the skip.

    Raises:
        ValueError: ``devices`` empty or naming a device type other than cpu / cuda.

    Example: ``Requirement(cuda_build=True, reason="queries torch.cuda capture state")``.
    """

    devices: tuple[str, ...] = _DEVICE_TYPES
    cuda_build: bool = False
    reason: str = ""

    def __post_init__(self) -> None:
        if not self.devices or any(d not in _DEVICE_TYPES for d in self.devices):
            raise ValueError(f"Requirement.devices: expected a non-empty subset of {_DEVICE_TYPES}, "
                             f"got {self.devices!r}")

    def unmet(self, device: str) -> str | None:
        """Why the capability cannot run with test tensors on ``device`` (``"cpu"`` or
        ``"cuda"``) in this process, or None when it can."""
        why = f" ({self.reason})" if self.reason else ""
        if device not in self.devices:
            return f"runs on {'/'.join(self.devices)} only, not {device}{why}"
        if self.cuda_build and not torch.backends.cuda.is_built():
            return f"needs a CUDA build of torch; this torch ({torch.__version__}) is CPU-only{why}"
        return None


def _protocol_members(protocol: type) -> list[str]:
    """The methods and attributes a runtime-checkable Protocol asks for."""
    return [name for name in vars(protocol) if not name.startswith("_")]


@dataclasses.dataclass(frozen=True)
class ExpectedFailure:
    """One ledger entry: a test id the adapter is known to fail, with its reason.

    ``test`` matches a test's node name (``test_S3_...[param]``) or its function name.
    The suite turns it into a strict xfail on the listed ``devices``: an unexpected pass is
    reported, and an entry that matches no collected test is an error. A lost CUDA context
    (``conformance.cuda_context``) counts as the expected failure only where
    ``loses_cuda_context`` says the finding's write-up measured exactly that on CUDA.
    ``carried_forward_from``: the newest release on which the entry was confirmed, when the
    installed release is newer and the entry is carried forward unconfirmed
    (:mod:`conformance.adapters.ledgers`); None for an entry confirmed on this release.
    """

    test: str
    section: str
    reason: str
    devices: tuple[str, ...] = ("cpu", "cuda")
    loses_cuda_context: bool = False
    carried_forward_from: str | None = None


@dataclasses.dataclass(frozen=True)
class Adapter:
    """An implementation under test.

    Attributes:
        name: shown in reports, e.g. ``"reference"``, ``"sglang==0.5.23"``, ``"mutant:..."``.
        conventions: declared conventions.
        capabilities: maps a capability Protocol class to the object implementing it.
        expected_failures: the adapter's ledger of known divergences.
        description: one line for the report.
        requirements: capability -> :class:`Requirement`, for the offered capabilities that
            do not run everywhere (absent: runs on every device of ``conventions.devices``).
        unavailable: capability -> why it is not offered although the installed engine
            release should offer it (a module it needs did not import): the reason names the
            module and the install line that fixes it. A case that requires such a capability
            is INCONCLUSIVE, never a "not offered" skip, and the verdict names it.
        replay_env: environment settings that change what this run checks and that a replay
            must repeat, e.g. ``{"DSPARK_VLLM_LEDGER": "off"}`` while the ledger is off
            (:func:`conformance.adapters.ledgers.replay_env`); every replay line starts
            with them and the console's header shows them.
    """

    name: str
    conventions: Conventions
    capabilities: Mapping[type, Any]
    expected_failures: tuple[ExpectedFailure, ...] = ()
    description: str = ""
    requirements: Mapping[type, Requirement] = dataclasses.field(default_factory=dict)
    unavailable: Mapping[type, str] = dataclasses.field(default_factory=dict)
    replay_env: Mapping[str, str] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        for cap, impl in self.capabilities.items():
            if cap not in CAPABILITIES:
                raise ValueError(f"capabilities: {cap!r} is not a capability of the contract")
            if not isinstance(impl, cap):
                missing = sorted(name for name in _protocol_members(cap) if not hasattr(impl, name))
                raise TypeError(
                    f"capabilities[{cap.__name__}]: {type(impl).__name__} does not implement "
                    f"{cap.__name__} (missing: {', '.join(missing)})"
                )
        for cap, requirement in self.requirements.items():
            if cap not in self.capabilities:
                raise ValueError(f"requirements: {getattr(cap, '__name__', cap)!r} is not a capability "
                                 f"this adapter offers")
            if not isinstance(requirement, Requirement):
                raise TypeError(f"requirements[{cap.__name__}]: expected a Requirement, got "
                                f"{type(requirement).__name__}")
        for cap, why in self.unavailable.items():
            if cap not in CAPABILITIES:
                raise ValueError(f"unavailable: {cap!r} is not a capability of the contract")
            if cap in self.capabilities:
                raise ValueError(f"unavailable: {cap.__name__} is offered too; a capability is one or the other")
            if not isinstance(why, str) or not why.strip():
                raise ValueError(f"unavailable[{cap.__name__}]: expected the reason (the module that did not "
                                 f"import and the install line), got {why!r}")

    def get(self, capability: type) -> Any | None:
        """The object implementing ``capability``, or None if not offered."""
        return self.capabilities.get(capability)

    def unmet(self, capability: type, device: str) -> str | None:
        """Why an offered ``capability`` cannot run with test tensors on ``device`` here
        (``conventions.devices``, then its :class:`Requirement`), or None when it can."""
        if device not in self.conventions.devices:
            return f"runs on {'/'.join(self.conventions.devices)} only, not {device}"
        requirement = self.requirements.get(capability)
        return None if requirement is None else requirement.unmet(device)

    def replace(self, **changes: Any) -> "Adapter":
        """A copy with fields replaced; ``capabilities`` given as a dict is merged in."""
        if "capabilities" in changes:
            changes["capabilities"] = {**self.capabilities, **changes["capabilities"]}
        return dataclasses.replace(self, **changes)


# --------------------------------------------------------------------------- S3
@runtime_checkable
class StepSampler(Protocol):
    """SPEC S3: one sampling step with fresh noise from ``generator``.

    ``sample(logits[B, V_pad] f32, temperatures[B] f32, top_k[B] i64, vocab_size,
    generator) -> tokens[B] i64`` on the logits' device. Greedy rows follow the declared
    ``greedy_rule``; ids are in ``[0, vocab_size)`` even when logits are padded wider, and
    for every input (SPEC S3 degenerate inputs: NaN or all -inf rows too). Successive calls with one
    generator must use fresh noise. ``top_k`` feeds the greedy rule only: no truncation
    is applied here (that is :class:`TruncatedStepSampler`).
    """

    def sample(
        self,
        logits: torch.Tensor,
        temperatures: torch.Tensor,
        top_k: torch.Tensor,
        vocab_size: int,
        generator: torch.Generator,
    ) -> torch.Tensor: ...


@runtime_checkable
class NoiseStepSampler(Protocol):
    """SPEC S3: exponential race with explicit noise (exact parity path).

    ``sample_with_noise(logits[B, V] f32, temperatures[B] f32, top_k[B] i64,
    noise[B, V] f32 Exp(1)) -> tokens[B] i64`` in ``[0, V)`` on the logits' device:
    ``argmax_v softmax(L/T)_v / noise_v`` for sampling rows, ``argmax L`` (lowest index)
    for greedy rows.
    """

    def sample_with_noise(
        self,
        logits: torch.Tensor,
        temperatures: torch.Tensor,
        top_k: torch.Tensor,
        noise: torch.Tensor,
    ) -> torch.Tensor: ...


@runtime_checkable
class TruncatedStepSampler(Protocol):
    """SPEC S3 optional truncation: one step from the renormalised truncated softmax.

    ``sample_truncated(logits[B, V] f32, temperatures[B] f32, top_k[B] i64, top_p[B] f32,
    min_p[B] f32, generator) -> tokens[B] i64`` (in ``[0, V)``, on the logits' device) draws from ``softmax(L / T)`` restricted
    to the top-k set, the top-p set (the smallest prefix of the sorted law whose mass
    reaches ``top_p``) and the min-p set (``p >= min_p * max p``), renormalised. Neutral
    values: ``top_k = V``, ``top_p = 1``, ``min_p = 0``. The suite sends sampling rows
    (``top_k >= 2``, ``T >= 0.3``) with one truncation at a time, so the order in which an
    IUT combines them is its own.
    """

    def sample_truncated(
        self,
        logits: torch.Tensor,
        temperatures: torch.Tensor,
        top_k: torch.Tensor,
        top_p: torch.Tensor,
        min_p: torch.Tensor,
        generator: torch.Generator,
    ) -> torch.Tensor: ...


# --------------------------------------------------------------------------- S2
@runtime_checkable
class MarkovBlock(Protocol):
    """SPEC S2: Markov heads, block sampling and teacher forcing.

    ``load_head(head_type, state_dict, vocab_size, rank, hidden_size, device) -> handle``
    builds the IUT's head from reference-layout weights (the handle is opaque to the
    suite). ``sample_block(handle, base_logits[B, gamma, V], first_prev[B], hidden[B,
    gamma, d] | None, temperatures[B], top_k[B], generator) -> (tokens[B, gamma] i64,
    corrected_logits[B, gamma, V])``. ``apply_block_logits(handle, base_logits,
    token_ids[B, gamma], hidden) -> corrected[B, gamma, V]``. Tokens are ids in ``[0, V)``;
    corrected logits are float32 or in the base logits' dtype, with no NaN or +inf where
    the base logits have none (-inf stays -inf); all on the base logits' device. An IUT
    that does not ship a head type raises ``NotImplementedError`` from ``load_head``
    (reported as a skip naming the head).
    """

    def load_head(
        self,
        head_type: str,
        state_dict: Mapping[str, torch.Tensor],
        vocab_size: int,
        rank: int,
        hidden_size: int,
        device: torch.device,
    ) -> Any: ...

    def sample_block(
        self,
        head: Any,
        base_logits: torch.Tensor,
        first_prev: torch.Tensor,
        hidden: torch.Tensor | None,
        temperatures: torch.Tensor,
        top_k: torch.Tensor,
        generator: torch.Generator,
    ) -> tuple[torch.Tensor, torch.Tensor]: ...

    def apply_block_logits(
        self,
        head: Any,
        base_logits: torch.Tensor,
        token_ids: torch.Tensor,
        hidden: torch.Tensor | None,
    ) -> torch.Tensor: ...


@runtime_checkable
class DraftLayouts(Protocol):
    """SPEC S1 layouts and draft vocabularies, through the IUT's Markov block sampler.

    ``draft_block(head_type, state_dict, base_logits[B, Q, V_d] f32, first_prev[B] i64,
    hidden[B, Q, d] | None, temperatures[B] f32, top_k[B] i64, generator, *, layout,
    vocab_size, d2t) -> (tokens[B, gamma] i64 in [0, vocab_size), corrected[B, gamma,
    vocab_size] float)`` on the base logits' device.

    * ``layout`` (one of ``Conventions.layouts``): ``"anchor-first"``, ``Q = gamma``, every
      position predicts; ``"bonus-anchor"``, ``Q = gamma + 1``: the anchor's position (0) is
      cropped from the base logits and the hidden states, step ``k`` reads position ``k + 1``.
    * Vocabulary (``Conventions.draft_vocabularies``), ``V = vocab_size``: ``V_d == V``,
      ``d2t`` None (``"target"``); ``V_d > V``, ``d2t`` None (``"padded"``): the logits are
      cropped to ``V``, never remapped; ``V_d < V`` with ``d2t [V_d] i64`` (``"reduced"``):
      the target id of each draft id (vLLM's offsets converted by the adapter). Sampled
      draft ids are mapped to target ids before they are returned and before they condition
      the next Markov step; ``corrected`` holds the corrected logits in the target's
      columns ``d2t``, ``-inf`` elsewhere. A ``d2t`` of the wrong length, with a value
      outside ``[0, V)`` or with two draft ids on one target id raises ``ValueError``.
    * The head (``head_type`` as :class:`MarkovBlock`) travels as reference-layout weights:
      ``W1.weight [V, r]`` (indexed by target ids: the anchor and the mapped draws),
      ``W2.weight [V_d, r]`` (the bias over the draft vocabulary), plus ``Wg`` / ``Wz``.
    * Greedy rows follow the declared rule; sampling rows draw from ``softmax(L_k / T)``
      over the (cropped or lifted) vocabulary, fresh noise from ``generator``.
    """

    def draft_block(
        self,
        head_type: str,
        state_dict: Mapping[str, torch.Tensor],
        base_logits: torch.Tensor,
        first_prev: torch.Tensor,
        hidden: torch.Tensor | None,
        temperatures: torch.Tensor,
        top_k: torch.Tensor,
        generator: torch.Generator,
        *,
        layout: str,
        vocab_size: int,
        d2t: torch.Tensor | None,
    ) -> tuple[torch.Tensor, torch.Tensor]: ...


# --------------------------------------------------------------------------- S4
@runtime_checkable
class FoldedSession(Protocol):
    """SPEC S4: one folded draft sampler instance with static buffers.

    ``stage(bs, temperatures[bs] | None, top_k[bs] | None)`` runs on the host before a
    replay; ``load_inputs(base_logits[bs, gamma, V], first_prev[bs], hidden | None)``
    copies inputs into static buffers; ``capture()`` records the graph (CUDA; no-op on
    CPU); ``replay() -> (tokens[bs, gamma] i64, corrected[bs, gamma, V])`` (views or
    copies of ``out`` / ``corrected_out``) with ``bs`` the batch of the last ``stage`` /
    ``load_inputs``, ids in ``[0, V)``, corrected logits in ``lm_dtype`` (no NaN or +inf
    where the inputs have none), both on the session's ``device``. ``graph_replays``
    (int >= 0) counts replays that really ran a captured graph (0 on CPU), so a silent
    eager fallback is INCONCLUSIVE. ``sample_block_calls`` (int >= 0) counts block passes
    (None when the IUT cannot be spied on). ``stage``, ``load_inputs`` and ``capture``
    return nothing the suite reads.
    """

    graph_replays: int
    sample_block_calls: int | None

    def stage(
        self, bs: int, temperatures: torch.Tensor | None, top_k: torch.Tensor | None
    ) -> None: ...

    def load_inputs(
        self, base_logits: torch.Tensor, first_prev: torch.Tensor, hidden: torch.Tensor | None
    ) -> None: ...

    def capture(self) -> None: ...

    def replay(self) -> tuple[torch.Tensor, torch.Tensor]: ...


@runtime_checkable
class FoldedDraft(Protocol):
    """SPEC S4: factory of folded sessions for a head loaded through :class:`MarkovBlock`.

    ``session(head, max_bs, gamma, vocab_size, lm_dtype, device, seed) -> FoldedSession``;
    ``seed`` seeds the generator the session's in-graph draws advance (S4.3): two sessions of
    one seed, loaded, staged and replayed alike, draw the same tokens.
    """

    def session(
        self,
        head: Any,
        max_bs: int,
        gamma: int,
        vocab_size: int,
        lm_dtype: torch.dtype,
        device: torch.device,
        seed: int,
    ) -> FoldedSession: ...


@runtime_checkable
class FoldGate(Protocol):
    """SPEC S4.7: the OFF/AUTO/FORCE memory gate for folded sampling.

    ``buffer_bytes(max_bs, gamma, vocab_size, lm_dtype) -> int >= 0`` and
    ``folds_sampling(mode in {"off","auto","force"}, max_bs, gamma, vocab_size, lm_dtype,
    free_bytes) -> bool`` (a Python ``bool``, not a tensor).
    """

    def buffer_bytes(
        self, max_bs: int, gamma: int, vocab_size: int, lm_dtype: torch.dtype
    ) -> int: ...

    def folds_sampling(
        self,
        mode: str,
        max_bs: int,
        gamma: int,
        vocab_size: int,
        lm_dtype: torch.dtype,
        free_bytes: int,
    ) -> bool: ...


@runtime_checkable
class FoldRouting(Protocol):
    """SPEC S4.5: the path of a batch around the folded draft.

    ``route(all_greedy, folded_sampling_on) -> (folded_draft: bool, eager_accept: bool)``: whether a
    batch (all rows greedy or not) may use the folded proposal given the gate's decision
    (:class:`FoldGate`), and whether its verification then takes the eager accept path
    (the in-graph accept is greedy-only).
    """

    def route(self, all_greedy: bool, folded_sampling_on: bool) -> tuple[bool, bool]: ...


# --------------------------------------------------------------------------- S5
@runtime_checkable
class ChainVerifier(Protocol):
    """SPEC S5: chain speculative sampling per row.

    ``verify(draft_tokens[B, l] i64, target_logits[B, l+1, V] f32, draft_logits[B, l, V]
    f32 (corrected logits), temperatures[B] f32, top_k[B] i64, *, generator=None,
    accept_uniforms[B, l] f64 | None, final_uniforms[B] f64 | None, seeds[B] i64 | None,
    positions[B] i64 | None, cap: int | [B] i64 | None) -> (accepted[B] i64 in [0, l],
    tokens[B, l+1] i64 in [-1, V): padded with -1)``, on the drafts' device. With explicit
    uniforms the result is deterministic (bit parity with the reference); with ``seeds`` (and
    ``positions``, the sequence position of each row's first draft) the uniforms come from
    the IUT's hash of (seed, position, stream); otherwise draws come from ``generator``. An
    IUT that cannot take explicit uniforms or seeded rows raises ``NotImplementedError``
    for them (reported as a skip naming the feature).

    Explicit uniforms (SPEC S5 "Explicit uniforms"): ``accept_uniforms[b, j - 1]`` is the
    coin of draft ``j`` alone, accepted iff ``u * min(q_j(x_j), 1) < p_j(x_j)`` (strict);
    ``final_uniforms[b]`` draws the row's one emitted token, correction or bonus, from its
    law ``r`` (``max(p_j - q_j, 0) / m`` after a reject at ``j``, ``p_j`` if ``m <= 1e-12``;
    ``p_{a+1}`` after ``a`` accepted drafts and no reject) by inverse CDF in vocabulary
    index order: the smallest ``i`` with ``r_0 + ... + r_i > u``, or the largest ``i``
    with ``r_i > 0`` when no running sum exceeds ``u``. Laws and sums in float64 from the
    logits cast to float64.

    ``cap``: one verify-length cap for every row (an int), or one per row (``[B]`` int64 on
    the drafts' device; an IUT without per-row caps raises ``NotImplementedError`` for a
    tensor). A row with fewer drafts than ``l`` carries trailing ``-1`` sentinels: it
    verifies only its real drafts (as under a cap of their count + 1), and a sentinel is
    never accepted, emitted or used as an index (SPEC S5 degenerate values). Inputs are
    not modified in place (SPEC S5 invariance).
    """

    def verify(
        self,
        draft_tokens: torch.Tensor,
        target_logits: torch.Tensor,
        draft_logits: torch.Tensor,
        temperatures: torch.Tensor,
        top_k: torch.Tensor,
        *,
        generator: torch.Generator | None = None,
        accept_uniforms: torch.Tensor | None = None,
        final_uniforms: torch.Tensor | None = None,
        seeds: torch.Tensor | None = None,
        positions: torch.Tensor | None = None,
        cap: int | torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]: ...


@runtime_checkable
class TruncatedChainVerifier(Protocol):
    """SPEC S5 truncation: chain speculative sampling against the truncated target law.

    ``verify_truncated(draft_tokens[B, l] i64, target_logits[B, l+1, V] f32,
    draft_probs[B, l, V] f32, temperatures[B] f32, top_k[B] i64, top_p[B] f32, min_p[B] f32,
    generator) -> (accepted[B] i64 in [0, l], tokens[B, l+1] i64 in [-1, V): padded with
    -1)``, on the drafts' device. ``draft_probs`` is the law each draft was drawn from (rows
    sum to 1; the suite drew the drafts from it), as a drafter hands it over; the target
    law ``p_j`` is the renormalised truncated ``softmax(target_j / T)`` (sets as in
    :class:`TruncatedStepSampler`, taken on the tempered law; ties at the top-k cut by
    ``Conventions.top_k_ties``). Greedy rows follow the declared rule. The suite sends one
    truncation at a time; neutral values ``top_k = V``, ``top_p = 1``, ``min_p = 0``.
    """

    def verify_truncated(
        self,
        draft_tokens: torch.Tensor,
        target_logits: torch.Tensor,
        draft_probs: torch.Tensor,
        temperatures: torch.Tensor,
        top_k: torch.Tensor,
        top_p: torch.Tensor,
        min_p: torch.Tensor,
        generator: torch.Generator,
    ) -> tuple[torch.Tensor, torch.Tensor]: ...


@runtime_checkable
class GreedyVerifier(Protocol):
    """SPEC S5: greedy verification with optional cap.

    ``verify_greedy(draft_tokens[B, l] i64, target_logits[B, l+1, V], cap: int | [B] i64 |
    None) -> (accepted[B] i64 in [0, l], tokens[B, l+1] i64 in [-1, V): padded with -1)``,
    on the drafts' device. Per-row caps and trailing ``-1`` sentinel drafts as in
    :class:`ChainVerifier`.
    """

    def verify_greedy(
        self, draft_tokens: torch.Tensor, target_logits: torch.Tensor, cap: int | torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]: ...


@runtime_checkable
class RankGroup(Protocol):
    """The tensor-parallel group one rank of :class:`TensorParallelRound` runs in (the suite
    provides it, over ``torch.distributed``).

    ``rank`` (0-based) and ``world_size``; ``broadcast(tensor, src=0)`` overwrites ``tensor``
    in place with rank ``src``'s values (a collective: every rank of the group calls it, in
    the same order); ``rank_in_group`` equals ``rank`` (the name SGLang's groups use).
    """

    rank: int
    world_size: int
    rank_in_group: int

    def broadcast(self, tensor: torch.Tensor, src: int = 0) -> None: ...


@runtime_checkable
class TensorParallelRound(Protocol):
    """SPEC S5 "Tensor parallelism" (S10: ranks diverging in draft noise or verify budget):
    one speculative round on one rank of a tensor-parallel group.

    ``tp_round(group, head_type, state_dict, base_logits[B, gamma, V] f32, first_prev[B] i64,
    hidden[B, gamma, d] | None, target_logits[B, gamma+1, V] f32, temperatures[B] f32,
    top_k[B] i64, confidences[B, gamma] f64 in [0, 1], sps: Sequence[float], *, generator,
    seeds[B] i64, positions[B] i64) -> (draft_tokens[B, gamma] i64 in [0, V), verify_lengths[B]
    i64 in [0, gamma], accepted[B] i64 in [0, gamma], tokens[B, gamma+1] i64 in [-1, V):
    padded with -1)``, on the base logits' device.

    * The suite starts one process per rank (``group``: a :class:`RankGroup`) and calls
      ``tp_round`` on every rank with the same request inputs: head weights (reference
      layout, as :class:`MarkovBlock`), logits, confidences, and the request's ``seeds`` /
      ``positions`` (each row's seed and first draft position).
    * Rank-local state may differ between ranks: ``generator`` is the rank's own generator
      (the suite may seed it per rank), ``sps`` the steps-per-second table the rank profiled
      (``sps[b - 1]`` at forward batch size ``b``; it may differ per rank).
    * The IUT drafts with its Markov sampler, picks each row's verify length with its
      scheduler from ``confidences`` and a steps-per-second table (SPEC S8), verifies that
      many drafts (SPEC S5) and returns what this rank computed. SPEC S5: every rank returns
      identical draft tokens, verify lengths, accepted counts and tokens, whether the IUT
      gets there by per-request seeds or by broadcasting rank 0's decisions.
    """

    def tp_round(
        self,
        group: RankGroup,
        head_type: str,
        state_dict: Mapping[str, torch.Tensor],
        base_logits: torch.Tensor,
        first_prev: torch.Tensor,
        hidden: torch.Tensor | None,
        target_logits: torch.Tensor,
        temperatures: torch.Tensor,
        top_k: torch.Tensor,
        confidences: torch.Tensor,
        sps: Sequence[float],
        *,
        generator: torch.Generator,
        seeds: torch.Tensor,
        positions: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]: ...


# --------------------------------------------------------------------------- S6
@runtime_checkable
class SimulatedAcceptance(Protocol):
    """SPEC S6: simulated acceptance lengths (benchmark mode).

    ``sample_acc_len(value, method, max_len, generator) -> int in [1, max_len]`` (an
    integer, not a bool or a tensor); ``executor(value, method, gamma, seed)`` returns an
    object whose ``step(draft_tokens[B, gamma] i64 or i32) -> acc_len[B] i64 in [1, gamma +
    1]`` (on the drafts' device) is called once per verify step and whose
    ``correct_drafts`` is then ``[B, gamma]`` in int64 or the drafts' dtype, on their
    device: each row's first ``acc_len - 1`` drafts, ``-1`` after them (a view of the
    reused buffer).
    """

    def sample_acc_len(
        self, value: float, method: str, max_len: int, generator: torch.Generator
    ) -> int: ...

    def executor(self, value: float, method: str, gamma: int, seed: int) -> Any: ...


@runtime_checkable
class SimulatedAcceptanceBatch(Protocol):
    """SPEC S6: ``n`` simulated acceptance lengths in one call (a benchmark verify step of
    ``n`` requests, each request its own draw).

    ``sample_acc_lens(value, method, max_len, n, generator) -> lengths[n] i64 in [1,
    max_len]`` on the CPU: ``n`` independent draws, each of the law of
    :meth:`SimulatedAcceptance.sample_acc_len` (``n >= 1``); every random draw derives from
    ``generator``. Offered by implementations whose simulated mode draws per request (an
    implementation that shares one draw across the rows of a step, as S6 allows, does not
    offer it). The S6 law cases then draw through it, one call per assertion, instead of
    ``n`` single calls; the single path stays checked exactly (support, clamps, range,
    the generator). A capability of its own so that adapters written before it stay valid.
    """

    def sample_acc_lens(
        self, value: float, method: str, max_len: int, n: int, generator: torch.Generator
    ) -> torch.Tensor: ...


@runtime_checkable
class SimulatedBonus(Protocol):
    """SPEC S6 simulated bonus: the token after a simulated run of ``a`` accepted drafts.

    ``simulated_bonus(target_logits[B, gamma + 1, V] f32, accepted[B] i64 in [0, gamma],
    temperatures[B] f32 >= 0, generator) -> tokens[B] i64 in [0, V)`` on the logits' device:
    each row's token is drawn from its target row at position ``a = accepted[r]``, the
    argmax for ``T < 1e-5`` (``T -> 0``), ``softmax(L / T)`` otherwise; every random draw
    derives from ``generator``. A capability of its own (not a method of
    :class:`SimulatedAcceptance`), so that adapters written before it stay valid.
    """

    def simulated_bonus(
        self,
        target_logits: torch.Tensor,
        accepted: torch.Tensor,
        temperatures: torch.Tensor,
        generator: torch.Generator,
    ) -> torch.Tensor: ...


# --------------------------------------------------------------------------- S7
@runtime_checkable
class Confidence(Protocol):
    """SPEC S7: confidence head outputs, calibration and STS.

    ``confidences(state_dict, hidden[B, gamma, d], markov_features[B, gamma, r] | None,
    temperatures[gamma] | None, *, checkpoint_gamma) -> c[B, gamma]`` (calibrated
    ``sigmoid(raw / t)``; shapes follow the runtime gamma of ``hidden``, whatever block
    length ``checkpoint_gamma`` the head was trained with and its config declares);
    ``prefix_survival(c[..., gamma])``; ``fit_sts(raw[N, gamma], accepted[N, gamma] bool)
    -> temperatures[gamma]``. Outputs are floating, on the device of ``hidden`` /
    ``confidences`` / ``raw``: confidences and survivals in ``[0, 1]`` (no NaN), STS
    temperatures finite and ``> 0``. The head travels in the reference layout
    (``dspark_ref.confidence.ConfidenceHead``): ``proj.weight [1, d + r]`` (hidden part
    first), ``proj.bias [1]``.
    """

    def confidences(
        self,
        state_dict: Mapping[str, torch.Tensor],
        hidden: torch.Tensor,
        markov_features: torch.Tensor | None,
        temperatures: torch.Tensor | None,
        *,
        checkpoint_gamma: int,
    ) -> torch.Tensor: ...

    def prefix_survival(self, confidences: torch.Tensor) -> torch.Tensor: ...

    def fit_sts(self, raw: torch.Tensor, accepted: torch.Tensor) -> torch.Tensor: ...


# --------------------------------------------------------------------------- S8
@runtime_checkable
class PrefixScheduler(Protocol):
    """SPEC S8: hardware-aware prefix scheduler (paper Algorithm 1).

    ``schedule(confidences[R, gamma] f64 in [0, 1], sps: Sequence[float]) -> lengths[R]
    i64 in [0, gamma]`` on the confidences' device, where ``sps[b - 1]`` is the
    steps-per-second at forward batch size ``b``.
    """

    def schedule(self, confidences: torch.Tensor, sps: Sequence[float]) -> torch.Tensor: ...


@runtime_checkable
class ProductionScheduler(Protocol):
    """SPEC S8 "Production variant": verify lengths from stale confidences and a cost table.

    ``schedule_production(stale_confidences[R, gamma] f64 in [0, 1], confidences[R, gamma]
    f64 in [0, 1], cost: Sequence[float], min_lengths[R] i64, max_lengths[R] i64) ->
    lengths[R] i64 in [min_lengths, max_lengths]`` on the confidences' device.

    * ``stale_confidences``: what the scheduler may read, confidences computed before the
      current block's tokens were drawn (survival ``a = cumprod`` along a row);
      ``confidences``: the current block's own, handed over only so the suite can check
      that they move nothing (SPEC: changing them leaves every admitted prefix unchanged).
    * ``cost[b - 1] > 0``: the profiled step cost (seconds) of a target step over ``b``
      tokens, ``b = R + sum(lengths)``, covering ``b`` up to ``R + sum(max_lengths)``,
      non-decreasing in ``b`` (the suite passes no other).
    * Budget objective (the one SGLang's planner and vLLM's adaptive verification ship):
      the extra budget ``k = sum(lengths - min_lengths)`` maximises ``(R + sum of the
      stale survivals of every admitted position) / cost(R + sum(min_lengths) + k)`` over
      the budgets the candidates allow; the extras are the highest stale survivals among
      positions ``min_lengths[r] <= j < max_lengths[r]`` with ``a > 0``, prefixes only.
    * An IUT whose bounds are batch-wide (one minimum, one maximum for every request), or
      that has no minimum, raises ``NotImplementedError`` for other bounds (a skip).
    """

    def schedule_production(
        self,
        stale_confidences: torch.Tensor,
        confidences: torch.Tensor,
        cost: Sequence[float],
        min_lengths: torch.Tensor,
        max_lengths: torch.Tensor,
    ) -> torch.Tensor: ...


# --------------------------------------------------------------------------- S9
@runtime_checkable
class SpeculativeLoop(Protocol):
    """SPEC S9: the speculative loop (draft -> schedule -> verify -> commit) on tiny models.

    ``generate(target, draft, prompt[B, n] i64, max_new_tokens, temperature, generator, *,
    gamma=None, sps=None) -> (tokens[B, max_new_tokens] i64 in [0, target.vocab_size),
    accept_lengths[B, rounds] i64 in [0, gamma + 1], verify_lengths[B, rounds] i64 in [0,
    gamma])``, all on the prompt's device.

    * ``target`` is a ``conformance.inputs.tiny_models.TinyTargetLM``; ``draft`` a
      ``TinyDSparkDraft`` or ``OracleDraft`` of that module (weights shared with the target);
      both on the test's device. An adapter translates them into its engine (the reference's:
      ``dspark_ref.tiny_models`` with the same weights).
    * One temperature for every row: below 1e-5 (0 included) the loop decodes greedily (the
      loop has no ``top_k``); otherwise it samples at ``T``. Every random draw comes from
      ``generator``.
    * ``gamma``: drafts per round, ``1 <= gamma <= draft.gamma`` (None: ``draft.gamma``).
      ``sps``: None verifies all ``gamma`` drafts; else a steps-per-second curve
      ``sps(b) -> float`` and the prefix scheduler (SPEC S8, on the draft's confidence head)
      picks each row's verify length ``l``.
    * The first new token is the target's prefill draw (the first anchor); round ``i`` then
      commits ``accept_lengths[:, i] = tau = accepted + 1`` tokens (slot 0 counted, so
      ``1 <= tau <= l + 1``), of which only those still needed when it reaches
      ``max_new_tokens``; ``verify_lengths[:, i] = l``. Both are 0 once a row has finished.
    """

    def generate(
        self,
        target: Any,
        draft: Any,
        prompt: torch.Tensor,
        max_new_tokens: int,
        temperature: float,
        generator: torch.Generator,
        *,
        gamma: int | None = None,
        sps: Callable[[int], float] | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]: ...


@runtime_checkable
class SpeculativeLoopRecord(Protocol):
    """SPEC S8 in the S9 loop: the scheduled loop of :class:`SpeculativeLoop`, with what
    each round drafted and what its scheduler read, so the suite can check each round's
    verify lengths against Algorithm 1 on that round's own confidences.

    ``generate_recorded(target, draft, prompt[B, n] i64, max_new_tokens, temperature,
    generator, *, gamma=None, sps) -> (tokens, accept_lengths, verify_lengths, draft_tokens[B,
    rounds, gamma] i64 in [0, target.vocab_size), confidences[B, rounds, gamma] float in [0,
    1])``, all on the prompt's device.

    * Arguments, ``tokens``, ``accept_lengths`` and ``verify_lengths`` as
      :meth:`SpeculativeLoop.generate` with the scheduler on (``sps`` required); ``draft``
      has a confidence head.
    * ``draft_tokens[:, i]``: the block round ``i`` drafted (its first ``tau - 1`` are the
      accepted drafts the round committed); ``confidences[:, i]``: the confidences the
      scheduler read in round ``i``, which SPEC S8 asks to be the draft's confidences of
      that round's own block (anchor, block hidden states and ``draft_tokens[:, i]``).
      Rows that have finished may hold anything there.
    * A capability of its own, so that loops that cannot expose their rounds still offer
      :class:`SpeculativeLoop`; one that does not offer it gets the S9 schedule cases
      skipped, naming it.
    """

    def generate_recorded(
        self,
        target: Any,
        draft: Any,
        prompt: torch.Tensor,
        max_new_tokens: int,
        temperature: float,
        generator: torch.Generator,
        *,
        gamma: int | None = None,
        sps: Callable[[int], float],
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]: ...


# --------------------------------------------------------------------------- S9 round
@runtime_checkable
class SpeculativeRound(Protocol):
    """SPEC S9 "one round": the IUT's drafter feeds the IUT's verifier, with the IUT's own
    noise, seeding and handoff of the draft distribution.

    ``load_head(head_type, state_dict, vocab_size, rank, hidden_size, device, dtype) ->
    handle`` builds the IUT's Markov head from reference-layout weights (as
    :class:`MarkovBlock`) in ``dtype`` (the head's parameter dtype: float32 or bfloat16); a head
    type the IUT does not ship raises ``NotImplementedError`` (a skip naming the head).

    ``round(head, base_logits[B, gamma, V] f32, first_prev[B] i64, hidden[B, gamma, d] |
    None, target_logits[B, gamma+1, V] f32, temperatures[B] f32, top_k[B] i64, top_p[B] f32,
    min_p[B] f32, *, generator=None, seeds=None, positions=None) -> (draft_tokens[B, gamma]
    i64 in [0, V), accepted[B] i64 in [0, gamma], tokens[B, gamma+1] i64 in [-1, V): padded
    with -1, draft_probs[B, gamma, V] float | None)``, all on the base logits' device.

    * The IUT drafts ``gamma`` tokens with its own Markov sampler from the corrected logits
      (SPEC S2; ``prev_0 = first_prev``), greedy rows by its declared rule; sampling rows
      from ``softmax(L_k / T)``, truncated by the request when
      ``Conventions.draft_truncates``. It hands over what it hands over in production and
      verifies the block with its own verifier against ``target_logits`` on the request's
      truncated target law (SPEC S5). Neutral truncation: ``top_k = V``, ``top_p = 1``,
      ``min_p = 0``.
    * ``draft_probs``: the draft distribution the IUT handed its verifier, as
      probabilities (one-hot on greedy rows), where the engine exposes it; None otherwise.
    * Randomness: without ``seeds`` every draw derives from ``generator``; with ``seeds
      [B] i64`` and ``positions [B] i64`` (each row's first draft position) the IUT seeds
      each row its own way, so a seeded row's result repeats run to run and does not depend
      on the other rows. An IUT without seeded rows raises ``NotImplementedError`` for them.
    """

    def load_head(
        self,
        head_type: str,
        state_dict: Mapping[str, torch.Tensor],
        vocab_size: int,
        rank: int,
        hidden_size: int,
        device: torch.device,
        dtype: torch.dtype,
    ) -> Any: ...

    def round(
        self,
        head: Any,
        base_logits: torch.Tensor,
        first_prev: torch.Tensor,
        hidden: torch.Tensor | None,
        target_logits: torch.Tensor,
        temperatures: torch.Tensor,
        top_k: torch.Tensor,
        top_p: torch.Tensor,
        min_p: torch.Tensor,
        *,
        generator: torch.Generator | None = None,
        seeds: torch.Tensor | None = None,
        positions: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]: ...


CAPABILITIES: tuple[type, ...] = (
    StepSampler,
    NoiseStepSampler,
    TruncatedStepSampler,
    MarkovBlock,
    DraftLayouts,
    FoldedDraft,
    FoldGate,
    FoldRouting,
    ChainVerifier,
    TruncatedChainVerifier,
    GreedyVerifier,
    TensorParallelRound,
    SimulatedAcceptance,
    SimulatedAcceptanceBatch,
    SimulatedBonus,
    Confidence,
    PrefixScheduler,
    ProductionScheduler,
    SpeculativeLoop,
    SpeculativeLoopRecord,
    SpeculativeRound,
)
