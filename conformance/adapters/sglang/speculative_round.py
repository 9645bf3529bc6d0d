"""SPEC S9 one round with SGLang's own parts (``SpeculativeRound``), both API generations.

What runs, all SGLang's code:

* Draft: the eager proposal ``dspark_draft.sample_draft_block``, which the worker's
  ``DraftBlockProposer.propose`` calls whenever the folded proposal does not run: in
  0.5.17-0.5.21 the head's ``sample_block`` with SGLang's step sampler
  (``SampleStepTokens``, ``exponential_()`` noise on the global RNG), in 0.5.22+
  ``draft_markov_block`` (``MarkovSampleStep``, Philox noise of ``DraftNoise``,
  ``greedy_draft=False`` as by default). It samples every non-greedy row from the full
  ``softmax(L / T)``: top-k / top-p / min-p never reach the drafter
  (``Conventions.draft_truncates = False``).
* Handoff: the ``DraftBlockResult`` (corrected logits, staged draft temperatures, greedy
  mask) goes to ``dspark_verify.accept_draft_tokens``, which turns it into
  ``q = SoftmaxTemp(corrected, T)``; the adapter reads that ``q`` as SGLang hands it (a
  recording wrapper around ``dspark_verify.SoftmaxTemp``, which that module calls for the
  draft probabilities only) and returns it as ``draft_probs``, one-hot on greedy rows
  (verified by ``AcceptGreedy``, which compares tokens). With 0.5.23's blockwise rejection
  no ``q`` is built (``draft_probs`` is then None).
* Verify: ``accept_draft_tokens`` against the target logits with the request's ``top_ks``,
  ``top_ps`` and ``min_ps`` in ``sampling_info`` (:mod:`.verify`).

Randomness: one seed ``s`` drawn from the suite's generator plays the server's
``random_seed``: the round runs inside ``seeded_global_rng(s)`` (draft noise, then the
verifier's ``torch.rand`` coins, one stream as in the server), and 0.5.22+'s draft noise is
``DraftNoise(draft_noise_key(s), offset 0)``. SGLang has no per-request seed on the DSpark
path: ``seeds`` raise ``NotImplementedError``.

Dtypes: the head is built in ``dtype``; the hidden states go to the head in its dtype (the
draft model's); the base and target logits stay as given (float32).
"""

from __future__ import annotations

import contextlib
from typing import Callable, Iterator

import torch
import torch.nn.functional as F

from .engine_inputs import sampling_info, seed_from, seeded_global_rng
from .heads import SGLangHead, load_head
from .loader import SGLangModules
from .verify import _check_no_seeds, accept

__all__ = ["SpeculativeRound"]

#: ``draft_block(modules, head, base_logits, first_prev, hidden, sampling_info, seed)``:
#: the version's eager proposal (``v0517.draft_block`` / ``v0522.draft_block``).
DraftBlock = Callable[..., object]


@contextlib.contextmanager
def _recorded_handoff(verify_module) -> Iterator[list[torch.Tensor]]:
    """Record what ``dspark_verify.SoftmaxTemp.execute`` returns (the draft ``q``) in the body."""
    handed: list[torch.Tensor] = []
    original = verify_module.SoftmaxTemp

    class RecordingSoftmaxTemp(original):
        @classmethod
        def execute(cls, *args, **kwargs):
            probs = original.execute(*args, **kwargs)
            handed.append(probs)
            return probs

    verify_module.SoftmaxTemp = RecordingSoftmaxTemp
    try:
        yield handed
    finally:
        verify_module.SoftmaxTemp = original


def _handed_law(handed: list[torch.Tensor], block, vocab: int) -> torch.Tensor | None:
    """``[B, gamma, V]`` float32: the recorded ``q`` (one-hot at the draft on greedy rows), all
    one-hot when SGLang built none for an all-greedy batch, None when it built none for a
    sampling batch (blockwise rejection)."""
    tokens, greedy = block.draft_tokens, block.greedy_mask.view(-1)
    one_hot = F.one_hot(tokens.to(torch.int64), vocab).to(torch.float32)
    if not handed:
        return one_hot if bool(greedy.all()) else None
    q = handed[-1].to(torch.float32).view(tokens.shape[0], tokens.shape[1], vocab)
    return torch.where(greedy[:, None, None], one_hot, q)


class SpeculativeRound:
    """SPEC S9 one round: SGLang's eager proposal feeds ``accept_draft_tokens`` (module note).

    Args:
        modules: the loaded SGLang.
        draft_block: the version's proposal (``v0517.draft_block`` / ``v0522.draft_block``).
        blockwise: 0.5.23+: verify with a ``RejectionNoise`` (``BlockwiseRejection``).
    """

    def __init__(self, modules: SGLangModules, draft_block: DraftBlock, *, blockwise: bool = False) -> None:
        self._modules = modules
        self._draft_block = draft_block
        self._blockwise = blockwise

    def load_head(self, head_type, state_dict, vocab_size, rank, hidden_size, device, dtype):
        weights = {key: tensor.to(dtype) for key, tensor in state_dict.items()}
        return load_head(self._modules["heads"], head_type, weights, vocab_size, rank, hidden_size, device)

    def round(self, head: SGLangHead, base_logits, first_prev, hidden, target_logits, temperatures, top_k, top_p,
              min_p, *, generator=None, seeds=None, positions=None):
        _check_no_seeds(seeds, positions)
        generator = torch.random.default_generator if generator is None else generator
        device, vocab = base_logits.device, base_logits.shape[-1]
        info = sampling_info(temperatures, top_k, top_p=top_p, min_p=min_p, vocab_size=vocab)
        if hidden is not None:
            hidden = hidden.to(head.module.markov_w1.weight.dtype)
        seed = seed_from(generator)
        with seeded_global_rng(seed, device), torch.no_grad(), _recorded_handoff(self._modules["verify"]) as handed:
            block = self._draft_block(self._modules, head, base_logits, first_prev, hidden, info, seed)
            accepted, tokens = accept(
                self._modules, anchor=first_prev, draft_block=block, target_logits=target_logits, info=info,
                top_k=top_k, seed=seed, blockwise=self._blockwise, vocab_size=vocab,
            )
        return block.draft_tokens.to(torch.int64), accepted, tokens, _handed_law(handed, block, vocab)
