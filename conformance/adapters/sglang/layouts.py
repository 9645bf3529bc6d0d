"""SPEC S1 block layouts through SGLang's DSpark drafter (``DraftLayouts``).

SGLang's bonus-anchor layout (a draft config with ``sample_from_anchor = False``, 0.5.19+):
the draft backbone runs over the anchor plus ``gamma`` queries, and
``dspark_draft.select_draft_hidden_without_anchor`` drops each request's first (anchor) row
before the base logits are computed and before the Markov head reads the hidden states. The
contract hands over base logits for all ``gamma + 1`` positions, so the adapter applies
SGLang's own selection to both (the LM head acts row by row, so selecting its outputs equals
selecting its inputs), then drafts with the version's Markov sampler (the ``MarkovBlock`` of
:mod:`.v0517` / :mod:`.v0522`).

Not offered (``NotImplementedError``, a skip naming the feature): draft vocabularies other than
the target's. SGLang's DSpark drafter has no draft-to-target map (``hot_token_id`` belongs to
its EAGLE workers), and its base logits are cropped to ``org_vocab_size`` inside the model's
LM head, before the sampler sees them.
"""

from __future__ import annotations

from .loader import SGLangModules

__all__ = ["DraftLayouts", "layouts_of"]


def layouts_of(modules: SGLangModules) -> tuple[str, ...]:
    """The layouts the loaded SGLang drafts in: the bonus-anchor one where its draft module
    has ``select_draft_hidden_without_anchor`` (0.5.19+)."""
    if hasattr(modules["draft"], "select_draft_hidden_without_anchor"):
        return ("anchor-first", "bonus-anchor")
    return ("anchor-first",)


class DraftLayouts:
    """SPEC S1 layouts through SGLang's row selection and Markov sampler (see the module note)."""

    def __init__(self, modules: SGLangModules, markov) -> None:
        self._modules = modules
        self._markov = markov

    def draft_block(self, head_type, state_dict, base_logits, first_prev, hidden, temperatures, top_k, generator, *,
                    layout, vocab_size, d2t):
        if d2t is not None or base_logits.shape[-1] != vocab_size:
            raise NotImplementedError(f"draft vocabulary of {base_logits.shape[-1]} ids for a target of {vocab_size}: "
                                      f"SGLang {self._modules.version}'s DSpark drafter has no draft vocabulary")
        if layout not in layouts_of(self._modules):
            raise NotImplementedError(f"layout {layout!r}: SGLang {self._modules.version} has no "
                                      "select_draft_hidden_without_anchor")
        if layout == "bonus-anchor":
            bs, queries = base_logits.shape[:2]
            select = self._modules["draft"].select_draft_hidden_without_anchor
            _, base_logits = select(base_logits.reshape(bs * queries, -1), bs=bs, gamma=queries - 1)
            if hidden is not None:
                _, hidden = select(hidden.reshape(bs * queries, -1), bs=bs, gamma=queries - 1)
        head = self._markov.load_head(head_type, state_dict, vocab_size, state_dict["W1.weight"].shape[1],
                                      None if hidden is None else hidden.shape[-1], base_logits.device)
        return self._markov.sample_block(head, base_logits, first_prev, hidden, temperatures, top_k, generator)
