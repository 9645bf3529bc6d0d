"""Markov heads and block sampling (SPEC S2) through vLLM's DSpark Markov loop.

``sample_block`` runs ``DSparkSpeculator._sample_sequential``, the loop vLLM captures in
its draft CUDA graph: for each step it adds ``model.markov_bias(model.markov_embed(prev))``
to the step's base logits and samples with ``gumbel_sample`` (vLLM's own noise, keyed by
the request's seed and the position before the predicted token), writing the
pre-temperature corrected logits into the speculator's ``draft_logits`` cache (what vLLM
hands to its rejection sampler) and the tokens into ``draft_tokens``. The speculator is
made with ``object.__new__`` (its ``__init__`` needs the engine's ``VllmConfig`` and the
DFlash backbone, a stub here) and given exactly the buffers the loop reads, filled as the
DFlash prepare-inputs step fills them for anchor-first blocks:

* ``input_ids[r * gamma] = first_prev[r]`` (``_anchor_idx``), ``sample_indices`` the
  identity, ``sample_idx_mapping[r * gamma + i] = r``, ``sample_pos = anchor_pos + 1 + i``
  (the predicted token's position; vLLM keys its draw by ``sample_pos - 1``);
* ``temperature`` / ``seeds``: the request state (:mod:`.engine_inputs`), seeds and anchor
  positions drawn from the suite's generator;
* ``draft_logits``: ``[B, gamma, V]`` in the base logits' dtype (vLLM keeps it in the
  draft head's dtype), a tensor or, from 0.34.0, vLLM's ``DraftLogitsCache`` holding it
  (:mod:`.draft_cache`): the probabilistic drafter (``draft_sample_method="probabilistic"``;
  vLLM's default "greedy" drafter argmaxes and keeps no draft logits). From 0.34.0 the loop
  hands the Markov bias to ``gumbel_sample`` (``bias=``, fused into the kernel) where
  ``load_model`` would fuse it (``_fuse_markov_bias``).

The model the loop calls is :class:`_HeadModel`: ``compute_draft_logits`` returns the
suite's base logits (the loop's ``head_hidden`` carries them; the backbone and LM head are
not under test), ``markov_embed`` / ``markov_bias`` are the vanilla head's two products
(vLLM's ``DSparkMarkovHead``: ``nn.Embedding`` W1, then W2 through the logits processor at
scale 1; its module needs vLLM's parallel-linear stack, so the head's weights are applied
as plain ``torch`` products in the head's dtype). Everything that varies between releases
(the loop, its sampler calls, the cache arguments) is vLLM's own code.

Releases whose drafter caches temperature-applied logits (0.25.0, ``cache_is_processed``)
hold ``L / T`` there: ``sample_block`` multiplies the cache back by the same ``T`` (vLLM's
verifier consumes ``L / T`` directly; the contract's corrected logits are ``L``).

Teacher forcing (``apply_block_logits``): vLLM has no entry point for it. The adapter runs
the same loop with the loop's ``gumbel_sample`` wrapped (:func:`_forcing`): the wrapper calls
vLLM's ``gumbel_sample`` (which writes the step's corrected logits into the cache) and
returns the given token, so the next step conditions on it. The corrected logits come from
the same loop and the same cache writes as in sampling.

Heads: the vanilla head everywhere. The rnn head from 0.34.0, where the loop calls
``DSparkSpeculator._markov_step``: a model with ``has_recurrent_markov_head`` gets
``markov_step(prev, draft_hidden, state)`` per step, the state starting from None (zeros) for
each proposal. vLLM's one such model, Mistral Large 4's DSpark draft, computes
``joint_proj([state ; W1[prev] ; h])`` (a linear ``2r + d -> 3r`` with bias), splits it into
gate, candidate and output, ``state' = sigmoid(gate) * state + (1 - sigmoid(gate)) *
tanh(cand)`` and returns ``tanh(out)`` for ``markov_bias`` (W2): SPEC S2's rnn head term for
term, with ``Wz`` as ``joint_proj``. The adapter compiles that ``markov_step`` from the model
file (:func:`recurrent_step`; the module needs the engine), gives it the head's weights, and
runs the loop with the backbone hidden states as the loop's hidden states
(``compute_draft_logits`` returns the base logits). ``gated`` raises
``NotImplementedError`` (a skip naming the feature), as ``rnn`` does before 0.34.0.
``markov_rank <= 0`` raises ``ValueError``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import types
from typing import Any, Callable, Iterator

import torch

from conformance.loading import AdapterLoadError

from .draft_cache import cache_values, new_cache
from .engine_inputs import identity_mapping, positions_from, request_temperatures, sampling_constants, seeds_from
from .loader import VLLMModules, source_functions
from .sampling import cache_is_processed, gumbel_kwargs

__all__ = ["VLLMHead", "MarkovBlock", "recurrent_step", "run_markov_loop"]


#: Where vLLM's recurrent Markov step lives (0.34.0+): Mistral Large 4's DSpark draft model
#: (the AMD file holds the same method); its module needs the engine, so the method is
#: compiled from the file alone (:func:`.loader.source_functions`).
_RECURRENT_FILE = "vllm/models/mistral/mistral_large4/nvidia/dspark.py"
_RECURRENT_MODEL = "MistralLarge4DSparkModel"


@dataclasses.dataclass(frozen=True)
class VLLMHead:
    """A vanilla head: ``w1 [V, r]`` (embedding) and ``w2 [V, r]`` (bias projection); an rnn
    head also has ``joint = (weight [3r, 2r + d], bias [3r])``, vLLM's ``joint_proj``."""

    w1: torch.Tensor
    w2: torch.Tensor
    joint: tuple[torch.Tensor, torch.Tensor] | None = None

    def to(self, dtype: torch.dtype) -> "VLLMHead":
        """The same head with every weight in ``dtype``."""
        joint = None if self.joint is None else tuple(t.to(dtype) for t in self.joint)
        return VLLMHead(self.w1.to(dtype), self.w2.to(dtype), joint)


def recurrent_step(modules: VLLMModules) -> tuple[Callable[..., Any] | None, str]:
    """``(markov_step, "")``: vLLM's recurrent Markov step (``MistralLarge4DSparkModel.
    markov_step``, an unbound method), where the release's drafter loop runs recurrent heads
    (``DSparkSpeculator._markov_step``, 0.34.0+); else ``(None, why not)``."""
    if not hasattr(modules["speculator"].DSparkSpeculator, "_markov_step"):
        return None, f"vLLM {modules.version}'s DSpark loop has no recurrent Markov step (0.34.0+)"
    try:
        functions = source_functions(modules.root, modules.version, _RECURRENT_FILE, ("markov_step",),
                                     class_name=_RECURRENT_MODEL)
    except AdapterLoadError as exc:
        return None, f"vLLM {modules.version}'s recurrent Markov step did not load: {exc}"
    return functions["markov_step"], ""


class _HeadModel:
    """The draft-model methods ``_sample_sequential`` calls (see the module note). With
    ``base_logits [B * gamma, V]`` the loop's hidden states are the backbone's (an rnn head
    reads them) and ``compute_draft_logits`` returns those base logits; without, the loop's
    hidden states are the base logits themselves."""

    draft_id_to_target_id = None

    def __init__(self, head: VLLMHead, base_logits: torch.Tensor | None = None,
                 step: Callable[..., Any] | None = None) -> None:
        self._head = head
        self._base_logits = base_logits
        self._step = step
        # Read by DSparkSpeculator._markov_step (0.34.0+).
        self.has_recurrent_markov_head = head.joint is not None

    def compute_draft_logits(self, hidden_states: torch.Tensor) -> torch.Tensor:
        if self._base_logits is None:
            return hidden_states
        assert hidden_states.shape[0] == self._base_logits.shape[0], "the loop reads every row in order"
        return self._base_logits

    def markov_step(self, token_ids: torch.Tensor, draft_hidden: torch.Tensor, state: torch.Tensor | None):
        """vLLM's recurrent step on this head: ``joint_proj`` is ``ReplicatedLinear``'s
        unquantized forward (``(F.linear(z, weight, bias), None)``), ``markov_head.embed`` W1."""
        weight, bias = self._head.joint
        model = types.SimpleNamespace(
            joint_proj=lambda z: (torch.nn.functional.linear(z, weight, bias), None),
            markov_head=types.SimpleNamespace(embed=self.markov_embed),
        )
        return self._step(model, token_ids, draft_hidden, state)

    def map_draft_to_target(self, draft_ids: torch.Tensor) -> torch.Tensor:
        return draft_ids

    def markov_embed(self, token_ids: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.embedding(token_ids, self._head.w1)

    def markov_bias(self, markov_embed: torch.Tensor) -> torch.Tensor:
        return markov_embed @ self._head.w2.t()


def _speculator(modules: VLLMModules, head: VLLMHead, base_logits, first_prev, temperatures, seeds, anchor_pos,
                model: _HeadModel | None = None):
    """A ``DSparkSpeculator`` holding exactly what ``_sample_sequential`` reads (``model``:
    the draft model, default ``_HeadModel(head)``)."""
    bs, gamma, vocab = base_logits.shape
    device = base_logits.device
    cls = modules["speculator"].DSparkSpeculator
    spec = object.__new__(cls)
    steps = torch.arange(gamma, device=device)
    state = dict(
        model=_HeadModel(head) if model is None else model,
        num_speculative_steps=gamma,
        num_query_per_req=gamma,
        sample_from_anchor=True,
        sample_indices=torch.arange(bs * gamma, device=device),
        sample_idx_mapping=identity_mapping(bs, device).repeat_interleave(gamma),
        sample_pos=(anchor_pos[:, None] + 1 + steps[None, :]).reshape(-1),
        input_buffers=types.SimpleNamespace(
            input_ids=first_prev.to(torch.int64).repeat_interleave(max(gamma, 1))
        ),
        _anchor_idx=torch.arange(bs, dtype=torch.int64, device=device) * max(gamma, 1),
        _step_cols=steps.to(torch.int32),
        draft_tokens=torch.zeros(bs, gamma, dtype=torch.int64, device=device),
        draft_logits=new_cache(modules, bs, gamma, vocab, base_logits.dtype, device),
        temperature=temperatures,
        seeds=seeds,
        _d2t_scatter_index=None,
        _draft_scatter_buf=None,
        _draft_topk=None,
        draft_watermarker=None,
        use_fp64_gumbel=False,
        use_confidence_head=False,
        enable_adaptive_verification=False,
        acceptance_estimator=None,
        # 0.34.0+ (read by those releases only): the Markov bias is fused into gumbel_sample,
        # as load_model decides for a probabilistic drafter with a target-wide vocabulary and
        # no watermarker, acceptance estimator or output transform (:mod:`.layouts` unsets it
        # with a reduced vocabulary); one rank samples every request (no batch sharding).
        _fuse_markov_bias=True,
        _sharded_sequential_comm=None,
        # The base class's acceptance-estimator hook (DraftModelSpeculator, stubbed with the
        # DFlash base): it does nothing when acceptance_estimator is None, as here.
        _maybe_predict_acceptance=lambda *args, **kwargs: None,
    )
    spec.__dict__.update(state)
    return spec


@contextlib.contextmanager
def _forcing(module: types.ModuleType, tokens: torch.Tensor) -> Iterator[None]:
    """Make ``module.gumbel_sample`` (the name the Markov loop calls) return ``tokens[:, i]``
    at step ``i``, after running vLLM's ``gumbel_sample`` for its cache writes."""
    real = module.gumbel_sample
    step = [0]

    def forced(*args, **kwargs):
        real(*args, **kwargs)
        out = tokens[:, step[0]]
        step[0] += 1
        return out

    module.gumbel_sample = forced
    try:
        yield
    finally:
        module.gumbel_sample = real


def run_markov_loop(modules: VLLMModules, head: VLLMHead, base_logits, first_prev, temperatures, seeds,
                    anchor_pos, forced: torch.Tensor | None = None, hidden: torch.Tensor | None = None):
    """``(tokens[B, gamma] i64, draft_logits[B, gamma, V])`` from ``_sample_sequential``
    with the request state given (``temperatures`` already vLLM's state); ``hidden [B, gamma,
    d]``: the backbone's hidden states, read by an rnn head (required for one).

    Raises:
        ValueError: an rnn head without ``hidden``.
    """
    bs, gamma, vocab = base_logits.shape
    model = None
    if head.joint is not None:
        if hidden is None:
            raise ValueError("hidden: the rnn head reads the backbone hidden states [B, gamma, d]; got None")
        step, why = recurrent_step(modules)
        if step is None:
            raise NotImplementedError(why)
        model = _HeadModel(head, base_logits.reshape(bs * gamma, vocab), step)
        # The draft model's hidden states are in its dtype, the head's.
        hidden = hidden.to(head.w1.dtype).reshape(bs * gamma, hidden.shape[-1])
    else:
        hidden = base_logits.reshape(bs * gamma, vocab)
    spec = _speculator(modules, head, base_logits, first_prev, temperatures, seeds, anchor_pos, model)
    module = modules["speculator"]
    with torch.no_grad(), (_forcing(module, forced) if forced is not None else contextlib.nullcontext()):
        spec._sample_sequential(bs, hidden)
    return spec.draft_tokens, cache_values(spec.draft_logits)


class MarkovBlock:
    """SPEC S2 through ``DSparkSpeculator._sample_sequential`` (see the module note)."""

    def __init__(self, modules: VLLMModules) -> None:
        self._modules = modules
        self._eps, self._max_temp = sampling_constants(modules.root, modules.version)
        gumbel_kwargs(modules["gumbel"].gumbel_sample, drafting=True, cache=torch.empty(0))  # fails early

    def load_head(self, head_type, state_dict, vocab_size, rank, hidden_size, device):
        if rank <= 0:
            raise ValueError(f"markov_rank must be positive, got {rank}")
        recurrent, why_not = recurrent_step(self._modules)
        if head_type not in ("vanilla", "rnn") or (head_type == "rnn" and recurrent is None):
            raise NotImplementedError(
                f"Markov head {head_type!r}: vLLM {self._modules.version} ships the vanilla head"
                + (" and the rnn head" if recurrent is not None else f" only ({why_not})")
            )
        w1, w2 = state_dict["W1.weight"].to(device), state_dict["W2.weight"].to(device)
        if head_type == "vanilla":
            return VLLMHead(w1, w2)
        return VLLMHead(w1, w2, (state_dict["Wz.weight"].to(device), state_dict["Wz.bias"].to(device)))

    def _state(self, bs, temperatures, generator, device):
        temps = request_temperatures(temperatures, self._eps, self._max_temp)
        return temps, seeds_from(generator, bs, device), positions_from(generator, bs, device)

    def sample_block(self, head, base_logits, first_prev, hidden, temperatures, top_k, generator):
        temps, seeds, anchor_pos = self._state(base_logits.shape[0], temperatures, generator, base_logits.device)
        head = head.to(base_logits.dtype)
        tokens, cache = run_markov_loop(self._modules, head, base_logits.contiguous(), first_prev, temps, seeds,
                                        anchor_pos, hidden=hidden)
        if cache_is_processed(self._modules["gumbel"].gumbel_sample):
            # 0.25.0 caches L / T (T the row's state; greedy rows undivided): undo the division
            # with the same T to return the corrected logits L (one rounding more; SPEC S0).
            scale = torch.where(temps > 0, temps, torch.ones_like(temps)).to(cache.dtype)
            cache = cache * scale[:, None, None]
        return tokens, cache

    def apply_block_logits(self, head, base_logits, token_ids, hidden):
        bs, gamma, _ = base_logits.shape
        device = base_logits.device
        # Greedy request state: the forced tokens replace the draws, whatever they are.
        temps = torch.zeros(bs, dtype=torch.float32, device=device)
        zeros = torch.zeros(bs, dtype=torch.int64, device=device)
        head = head.to(base_logits.dtype)
        # token_ids = [x0, x_0..x_{gamma-2}]: the loop reads x0 as the anchor and conditions
        # step i + 1 on the token forced at step i.
        forced = torch.cat([token_ids[:, 1:], token_ids[:, :1]], dim=1).to(torch.int64) if gamma else token_ids
        _, logits = run_markov_loop(self._modules, head, base_logits.contiguous(), token_ids[:, 0] if gamma else zeros,
                                    temps, zeros, zeros, forced=forced, hidden=hidden)
        return logits
