"""speculators' DSpark heads behind the adapter contract: ``--dspark-impl speculators``.

speculators (PyPI, the training library of vLLM's speculator checkpoints) defines the DSpark
Markov heads in ``speculators/models/dspark/model_definitions.py``, a module that imports only
torch. The package ``__init__`` files import transformers and the training stack, so the
loader (:func:`load_model_definitions`) registers ``speculators``, ``speculators.models`` and
``speculators.models.dspark`` as bare packages (no ``__init__`` runs) and imports that one
module from the installed files. No stub is needed.

Offered: ``MarkovBlock`` (S2), all three heads (vanilla, gated, rnn) from speculators'
``MarkovHead``, weights copied from the reference layout (``W1 -> markov_w1``, ``W2 ->
markov_w2``, ``Wg -> gate_proj`` over ``[h ; W1[prev]]``, ``Wz -> joint_proj`` over ``[s ;
W1[prev] ; h]`` split gate, candidate, output: the reference's orders).

* ``apply_block_logits`` is teacher forcing through ``MarkovHead.block_bias`` (its training
  forward): ``U + block_bias(prev_token_ids, hidden_states)``, added as ``DSparkDraftModel``
  adds it (``logits + markov_bias``, torch type promotion: bf16 base logits give float32).
* ``sample_block``: speculators has no sampler (it trains heads; vLLM serves them). The
  block is built from its own functions only: step ``k`` takes ``block_bias`` of the prefix
  ``prev[:, :k+1]`` (the rnn state is recomputed from the start, as its forward does) and the
  draw is the exponential race ``argmax softmax(L/T) / E`` with ``E ~ Exp(1)`` from the
  suite's generator; greedy rows (``top_k <= 1``, the training code's argmax) take the lowest
  argmax.

Not offered: every other capability (speculators ships no sampler kernel, verifier,
scheduler or STS fit). ``Confidence`` is left out: its ``ConfidenceHead`` is a bare linear
whose raw logit alone does not make the capability (calibration and STS are not in the
package).
"""

from __future__ import annotations

import functools
import importlib.util
import os
import sys
import types
from importlib.metadata import PackageNotFoundError, version

import torch

from conformance import contract as c
from conformance.loading import AdapterLoadError

__all__ = ["make_adapter", "load_model_definitions", "MarkovBlock", "INSTALL_EXTRAS"]

#: What the loader needs beside ``pip install --no-deps speculators==X``: nothing (the heads
#: import only torch); the drift check (``conformance.drift``) reads it.
INSTALL_EXTRAS: tuple[str, ...] = ()

MODULE = "speculators.models.dspark.model_definitions"


def installed_version() -> str:
    """The installed ``speculators`` version.

    Raises:
        AdapterLoadError: not installed (the message says how to install it).
    """
    try:
        return version("speculators")
    except PackageNotFoundError as exc:
        raise AdapterLoadError(
            "speculators: the package is not installed; pip install --no-deps --target DIR "
            "speculators==0.9.0, then PYTHONPATH=DIR"
        ) from exc


@functools.cache
def load_model_definitions() -> types.ModuleType:
    """``speculators.models.dspark.model_definitions`` from the installed files, without
    running the package ``__init__`` files.

    Raises:
        AdapterLoadError: not installed, or the file is missing or fails to import (names the
            version and the file).
    """
    version_text = installed_version()
    if MODULE in sys.modules:
        return sys.modules[MODULE]
    spec = importlib.util.find_spec("speculators") if "speculators" not in sys.modules else None
    roots = list(spec.submodule_search_locations or ()) if spec is not None else list(sys.modules["speculators"].__path__)
    if not roots:
        raise AdapterLoadError(f"speculators=={version_text}: the installed package has no files")
    base = roots[0]
    parts = ["speculators", "speculators.models", "speculators.models.dspark"]
    for depth, name in enumerate(parts):
        if name not in sys.modules:
            package = types.ModuleType(name)
            package.__path__ = [os.path.join(base, *name.split(".")[1:])] if depth else [base]
            sys.modules[name] = package
    path = os.path.join(base, "models", "dspark", "model_definitions.py")
    if not os.path.exists(path):
        raise AdapterLoadError(f"speculators=={version_text}: no DSpark heads ({path} is missing)")
    module_spec = importlib.util.spec_from_file_location(MODULE, path)
    module = importlib.util.module_from_spec(module_spec)
    try:
        module_spec.loader.exec_module(module)
    except ImportError as exc:
        raise AdapterLoadError(f"speculators=={version_text}: cannot import {path}: {exc}") from exc
    sys.modules[MODULE] = module
    return module


class MarkovBlock:
    """SPEC S2 through speculators' ``MarkovHead`` (see the module note)."""

    def __init__(self, definitions: types.ModuleType) -> None:
        self._definitions = definitions

    def load_head(self, head_type, state_dict, vocab_size, rank, hidden_size, device):
        head = self._definitions.MarkovHead(
            verifier_vocab_size=vocab_size, draft_vocab_size=vocab_size, markov_rank=rank,
            hidden_size=hidden_size, head_type=head_type,
        )
        with torch.no_grad():
            head.markov_w1.weight.copy_(state_dict["W1.weight"])
            head.markov_w2.weight.copy_(state_dict["W2.weight"])
            if head_type == "gated":
                head.gate_proj.weight.copy_(state_dict["Wg.weight"])
                head.gate_proj.bias.copy_(state_dict["Wg.bias"])
            elif head_type == "rnn":
                head.joint_proj.weight.copy_(state_dict["Wz.weight"])
                head.joint_proj.bias.copy_(state_dict["Wz.bias"])
        return head.to(device).eval()

    @staticmethod
    def _hidden(head, hidden, like: torch.Tensor) -> torch.Tensor:
        if head.head_type == "vanilla":
            return like.new_zeros(like.shape[0], like.shape[1], 0) if hidden is None else hidden
        if hidden is None:
            raise ValueError(f"{head.head_type} Markov head needs hidden states (got None)")
        return hidden

    @torch.no_grad()
    def apply_block_logits(self, head, base_logits, token_ids, hidden):
        if base_logits.shape[1] == 0:
            return base_logits.clone()
        bias = head.block_bias(prev_token_ids=token_ids, hidden_states=self._hidden(head, hidden, token_ids))
        return base_logits + bias  # as core.py adds it: torch type promotion

    @torch.no_grad()
    def sample_block(self, head, base_logits, first_prev, hidden, temperatures, top_k, generator):
        bs, gamma, vocab = base_logits.shape
        hidden = self._hidden(head, hidden, base_logits[..., :1]) if gamma else hidden
        prev = first_prev.to(torch.int64)[:, None]
        greedy = (top_k <= 1)[:, None]
        temps = temperatures.to(torch.float32).clamp(min=1e-5)[:, None]
        tokens, corrected = [], []
        for k in range(gamma):
            bias = head.block_bias(prev_token_ids=prev, hidden_states=hidden[:, : k + 1])[:, k]
            step = base_logits[:, k] + bias
            noise = torch.empty(bs, vocab, device=generator.device).exponential_(generator=generator).to(step.device)
            probs = torch.softmax(step.to(torch.float32) / temps, dim=-1)
            raced = (probs / noise).argmax(dim=-1)
            drawn = torch.where(greedy[:, 0], step.argmax(dim=-1), raced)
            tokens.append(drawn)
            corrected.append(step)
            prev = torch.cat([prev, drawn[:, None]], dim=1)
        if not gamma:
            return base_logits.new_zeros(bs, 0, dtype=torch.int64), base_logits.clone()
        return torch.stack(tokens, dim=1), torch.stack(corrected, dim=1)


def make_adapter() -> c.Adapter:
    """The adapter for the installed speculators, named ``speculators==<version>``.

    Raises:
        AdapterLoadError: speculators missing, or its DSpark heads fail to load.
    """
    definitions = load_model_definitions()
    return c.Adapter(
        name=f"speculators=={installed_version()}",
        conventions=c.Conventions(greedy_rule="top_k"),
        capabilities={c.MarkovBlock: MarkovBlock(definitions)},
        description=f"speculators {installed_version()} DSpark heads (model_definitions.py only)",
    )
