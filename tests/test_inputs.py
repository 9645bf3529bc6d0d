"""Golden digests of the suite's seeded inputs: the random Markov heads, logit rows and verify
rounds fed to the S1, S2, S3, S4 and S5 cases, and the tiny S9 models (weights and what they
compute on fixed inputs), stay the same tensors, bit for bit, whoever builds them.

Each digest is the SHA-256 of every tensor a call returns (in order: name, dtype, shape,
stride, then its bytes), followed by the next three ``randn`` draws of the same generator
(a caller such as ``support.blocks.draft_vocab_head_state`` goes on drawing from it).
The digests were produced by ``python tests/test_inputs.py`` on torch 2.13.0 (x86 CPU
capability AVX2) with the heads still built by ``dspark_ref.markov.build_markov_head``
(commit 824e80f); the verify rounds' digests by the builders still inside
``conformance/suite/test_verify.py`` (commit f7ba02c), before they moved to
``conformance.inputs.verify_rounds``; the tiny S9 models' digests by ``dspark_ref.tiny_models``
(commit 36c92d3), before the suite had models of its own, single-threaded as the S9 cases run
them (with two threads the forward passes' float32 products round otherwise). ``torch.normal_``
draws other bits on another CPU capability (``ATEN_CPU_CAPABILITY=default`` changes them), so
elsewhere the test is skipped, naming why.
"""

from __future__ import annotations

import hashlib

import pytest
import torch

from conformance.inputs import LOGIT_FAMILIES, logit_rows, markov_head_state
from conformance.inputs.verify_rounds import GreedySpec, LawSpec, ParitySpec, TinyChainModels, greedy_inputs, parity_inputs
from conformance.inputs import tiny_models
from dspark_ref import tiny_models as reference_tiny_models

#: Where the digests below were produced: (torch release, ATen CPU capability).
PRODUCED_ON = ("2.13.0", "AVX2")

#: (head type, seed, vocab, rank, hidden size, scale) -> digest; every head type, a vanilla
#: head without hidden size, odd shapes, and scale 0 (the generator still advances).
HEAD_DIGESTS = {
    ("vanilla", 0, 8, 4, 4, 0.5): "93327645e6a343fa5ae05e3b0c091bd3f97a21f7c64e08037ec09f59085eb44b",
    ("vanilla", 1, 37, 3, None, 2.0): "601e1a306921ef0e780d1a05da4aa92d90dfb2c3fa0c571a1c5da6ed68474279",
    ("vanilla", 2, 5, 1, 4, 0.0): "ea7256eff41479c0e42db8c35b72a1913835c060927319b8c44301571295a741",
    ("gated", 0, 8, 4, 4, 0.5): "cf67312d341fd4d75b75fc813e8884412a95727daf75995715e013760d1c2b79",
    ("gated", 3, 37, 5, 7, 0.05): "d27c0d9db171aaa4acdbbbe187517c786c3a99ca611aa6096edbd183d912468d",
    ("rnn", 0, 8, 4, 4, 0.5): "0d4c13bcc3257ec2c497842975cbac0c023d588d09d0e8b90ed219c018da26df",
    ("rnn", 4, 37, 5, 7, 1.0): "2d598b357b3ccf0496bd0b2cb6efa016538469e9c24353cea4a257e5bca1f824",
    ("rnn", 5, 6, 2, 3, 0.0): "debf7ee0e7232c255672ab51badaba811477034b1780df85c186ebaecf18712b",
}
#: (family, seed, batch, vocab) -> digest of ``logit_rows``.
LOGIT_DIGESTS = {
    ("flat", 7, 5, 11): "b073327e406d69ad0dc475b0e4b4c6d2c319004181db19742ff2174564d666a1",
    ("peaked", 7, 5, 11): "3f34e4a7db3a138afceedbbf8f9e0e7781c44bf6686de4817700ec3daf0b3665",
    ("near-tie", 7, 5, 11): "3ca208e45ffed76a514d273a09453ece98d6196054b15f2a279bb4d4639fade7",
    ("random", 7, 5, 11): "d609593a59f1ae3a190bbec318714126bad4de6d524781cf2b9bb874d2f0d6d4",
}

#: (builder, spec, seed) -> digest of one S5 verify round's inputs (every spec field that
#: changes what is drawn: masking, families, ties, the IUT-drafted head, fixed laws).
ROUND_DIGESTS = {
    ("parity", ParitySpec("random", 8, 4, 6, (0.5, 1.0), masked=True), 7):
        "3595ca49e92b3376ae3375b04167c27882b7083080067e78cc3e34d8915e1e05",
    ("parity", ParitySpec("peaked", 11, 2, 5, (0.9,)), 8):
        "7ad431feba7856a0846945a382bb30c569af6fd80bf38ac8ec1fe43615a59271",
    ("greedy", GreedySpec(9, 3, 5, ties=True), 7): "4903812046db1626a32143e27464bb0d09fa26ec5c157edde3ca50841ae0ee0d",
    ("greedy", GreedySpec(13, 2, 4, ties=False), 8): "e481b41e79e22e71924c1c1b6259a115c2678a0c6544eadd21e98f17efbec300",
    ("tiny", LawSpec(3, 2, 0.8, draft="iut-markov"), 7):
        "37f5ab3d74de50f13984f98ec68e176d4be6e3c194bd581dc1e8cb6a978f56e3",
    ("tiny", LawSpec(4, 1, 1.0, fixed=((0.4, 0.3, 0.2, 0.1), (0.1, 0.2, 0.3, 0.4))), 8):
        "842871b48366375c5c4a5e4c51d2451db74d96882389c29354e9bdbfc311fc58",
    ("tiny", LawSpec(3, 1, 1.0, draft="iut-markov", fixed=((0.5, 0.3, 0.2), (0.2, 0.3, 0.5))), 9):
        "be2ba68dc71dd48d51ccfb3c25d8ec9103b7c9f7fa90301fe4237c696b369f25",
}

#: (model, seed, vocab, hidden size, draft arguments) -> digest of one tiny S9 model (SPEC S9):
#: its weights, what it computes on fixed inputs (:func:`_tiny_model_digest`) and the next draws
#: of its generator; the target alone, a DSpark draft of every head type (with and without a
#: confidence head, runtime gamma below the block) and perfect and noisy oracle drafts.
TINY_MODEL_DIGESTS = {
    ("target", 0, 5, 8, None): "7ca6e845f938c774e6b97ce442f543655f9538a1044cd7c1ccf0579ab9bb4634",
    ("target", 7, 3, 4, None): "cc40e1cf579c7b286d59408550b03b05c040e0bc2c7a362eadaee485c4ce66c6",
    ("dspark", 1, 5, 8, ("vanilla", 1, 4, False)): "db40a6026d4034145f27a5519bfac7e9c09758d4865bd4723d6e610d04dbf1c5",
    ("dspark", 2, 5, 8, ("gated", 3, 4, False)): "ba23f302b48f93f24e5735866a51d6d5cb2154f9856e4f5abe8ec44f0901f5fe",
    ("dspark", 3, 5, 8, ("rnn", 5, 4, False)): "def4979d77ac2903f784205190eb1942aefb6c286d2cae6cf318d7a4e0e235fa",
    ("dspark", 4, 5, 8, ("gated", 4, 4, True)): "7186823b5476ebb7f6f5b6cc2f419cc9cd051a45b9bc17fc9416e8d1ec16b2b1",
    ("dspark", 5, 5, 8, ("vanilla", 4, 4, True)): "9172f543b622b7905aa098385364fce20dac403a47ea1274bdc85d4adf505249",
    ("dspark", 7, 3, 4, ("rnn", 3, 2, True)): "af3eb7d4751bcea6d88a968aeb9a2281b6bc9833c263331063c86643bbfad282",
    ("oracle", 8, 5, 8, (4, 0.0)): "bb2004da14f4fadd3701fa431935fa4f46bd8b2bef0e44a9dc4b1172d2009fa7",
    ("oracle", 9, 5, 8, (4, 0.5)): "1e31975bc14843cd1556f3920512b5cbfceb4e245dd92bb0bbcd67bb1108d1a8",
    ("oracle", 10, 5, 8, (2, 1.0)): "c552f0365e7a0c7cbc06693bf7d4e186ccc5c8322d0973efba1c714f1d41da50",
}
#: The modules whose tiny models are pinned: the suite's, and the reference's own copy (the
#: reference adapter hands the loop the reference's models with the suite's weights).
TINY_MODEL_BUILDERS = {"conformance": tiny_models, "dspark_ref": reference_tiny_models}


def _digest(tensors: dict[str, torch.Tensor]) -> str:
    h = hashlib.sha256()
    for name, t in tensors.items():
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|{t.stride()}|".encode())
        h.update(t.contiguous().numpy().tobytes())
    return h.hexdigest()


def _head_digest(head_type, seed, vocab, rank, hidden_size, scale) -> str:
    generator = torch.Generator().manual_seed(seed)
    state = markov_head_state(head_type, vocab, rank, hidden_size, generator, scale=scale)
    return _digest({**state, "<next draw>": torch.randn(3, generator=generator)})


def _logit_digest(family, seed, batch, vocab) -> str:
    generator = torch.Generator().manual_seed(seed)
    rows = logit_rows(family, batch, vocab, generator)
    return _digest({"logits": rows, "<next draw>": torch.randn(3, generator=generator)})


def _round_digest(builder, spec, seed) -> str:
    generator = torch.Generator().manual_seed(seed)
    if builder == "parity":
        tensors = parity_inputs(spec, generator)
    elif builder == "greedy":
        tensors = dict(zip(("drafts", "target"), greedy_inputs(spec, generator)))
    else:
        models = TinyChainModels(spec, generator)
        tensors = {"target": models.target, "draft": models.draft, "context": torch.tensor(models.context)}
        if models.head_state is not None:
            tensors.update({"base": models.base, **models.head_state})
    return _digest({**tensors, "<next draw>": torch.randn(3, generator=generator)})


@torch.no_grad()
def _tiny_model_digest(builders, model, seed, vocab, hidden_size, draft_args) -> str:
    """The target of ``seed`` (then, from the same generator, the draft of ``draft_args``): its
    weights (a DSpark draft's state dict, an oracle draft's base offsets), then on fixed
    inputs the target's logits and hidden states at every position and one ``advance`` /
    ``next_token_logits`` step, the draft's ``block`` at its gamma and one below, and its
    confidences."""
    weights = torch.Generator().manual_seed(seed)
    target = builders.TinyTargetLM(vocab, hidden_size, generator=weights)
    tensors = {f"target.{name}": t for name, t in sorted(target.state_dict().items())}
    if model == "dspark":
        head_type, gamma, rank, with_confidence = draft_args
        draft = builders.TinyDSparkDraft(target, gamma=gamma, markov_head_type=head_type, markov_rank=rank,
                                         generator=weights, with_confidence=with_confidence)
        tensors.update({f"draft.{name}": t for name, t in sorted(draft.state_dict().items())})
    elif model == "oracle":
        gamma, noise = draft_args
        draft = builders.OracleDraft(target, gamma=gamma, logit_noise=noise, generator=weights)
        tensors["draft.base_offsets"] = draft.base_offsets
    tensors["<next draw>"] = torch.randn(3, generator=weights)
    inputs = torch.Generator().manual_seed(12345)
    contexts = torch.randint(0, vocab, (6, 7), generator=inputs)
    out = target(contexts)
    tensors.update({"logits": out.logits, "hidden": out.hidden})
    state = target.advance(out.hidden[:, -1], contexts[:, 0])
    tensors.update({"advance": state, "next_token_logits": target.next_token_logits(state)})
    if model != "target":
        anchor = contexts[:, -1]
        for block_gamma in sorted({gamma, max(gamma - 1, 1)}):
            block = draft.block(out.hidden[:, -2], anchor, block_gamma)
            tensors.update({f"block{block_gamma}.hidden": block.hidden,
                            f"block{block_gamma}.base_logits": block.base_logits})
            if draft.confidence_head is not None:
                tokens = torch.randint(0, vocab, (6, block_gamma), generator=inputs)
                tensors[f"block{block_gamma}.confidences"] = draft.confidences(block.hidden, anchor, tokens)
    return _digest(tensors)


def _here() -> tuple[str, str]:
    return torch.__version__.split("+")[0], torch.backends.cpu.get_cpu_capability()


needs_the_producing_build = pytest.mark.skipif(
    _here() != PRODUCED_ON, reason=f"digests were made on torch {PRODUCED_ON[0]} with CPU capability "
    f"{PRODUCED_ON[1]}; this is torch {_here()[0]}, {_here()[1]}: torch.normal_ draws other bits")


def test_the_pinned_calls_cover_every_head_type_and_logit_family():
    assert {key[0] for key in HEAD_DIGESTS} == {"vanilla", "gated", "rnn"}
    assert {key[4][0] for key in TINY_MODEL_DIGESTS if key[0] == "dspark"} == {"vanilla", "gated", "rnn"}
    assert {key[0] for key in LOGIT_DIGESTS} == set(LOGIT_FAMILIES)


@needs_the_producing_build
@pytest.mark.parametrize("call", sorted(HEAD_DIGESTS, key=str), ids=str)
def test_a_random_markov_head_is_the_pinned_tensors(call):
    assert _head_digest(*call) == HEAD_DIGESTS[call]


@needs_the_producing_build
@pytest.mark.parametrize("call", sorted(LOGIT_DIGESTS), ids=str)
def test_logit_rows_are_the_pinned_tensors(call):
    assert _logit_digest(*call) == LOGIT_DIGESTS[call]


@needs_the_producing_build
@pytest.mark.parametrize("call", ROUND_DIGESTS, ids=str)
def test_a_verify_round_is_the_pinned_tensors(call):
    assert _round_digest(*call) == ROUND_DIGESTS[call]


@needs_the_producing_build
@pytest.mark.usefixtures("one_torch_thread")  # tiny models (tests/conftest.py)
@pytest.mark.parametrize("builders", TINY_MODEL_BUILDERS)
@pytest.mark.parametrize("call", TINY_MODEL_DIGESTS, ids=str)
def test_a_tiny_s9_model_is_the_pinned_weights_and_logits(call, builders):
    assert _tiny_model_digest(TINY_MODEL_BUILDERS[builders], *call) == TINY_MODEL_DIGESTS[call]


@pytest.mark.parametrize("head_type", ["vanilla", "gated", "rnn"])
def test_a_tiny_draft_draws_only_from_its_generator(head_type):
    """Its layers hold the weights the generator drew and nothing else: the global RNG is
    untouched (no layer runs its default initialisation) and two builds are equal."""
    before = torch.random.get_rng_state()
    target = tiny_models.TinyTargetLM(5, 8, generator=torch.Generator().manual_seed(3))
    builds = [tiny_models.TinyDSparkDraft(target, gamma=2, markov_head_type=head_type, with_confidence=True,
                                          generator=torch.Generator().manual_seed(4)) for _ in range(2)]
    assert torch.equal(torch.random.get_rng_state(), before)
    first, second = (dict(build.named_parameters()) for build in builds)
    assert first.keys() == second.keys() and all(torch.equal(first[k], second[k]) for k in first)


@pytest.mark.parametrize("call, error, match", [
    (lambda g: markov_head_state("lstm", 8, 4, 4, g), ValueError, "^head_type: expected one of"),
    (lambda g: markov_head_state("vanilla", 0, 4, None, g), ValueError, "^vocab_size: expected an int >= 1"),
    (lambda g: markov_head_state("vanilla", 8, 0, None, g), ValueError, "^rank: expected an int >= 1"),
    (lambda g: markov_head_state("rnn", 8, 4, None, g), TypeError, r"^hidden_size \(of a rnn head\)"),
    (lambda g: markov_head_state("gated", 8, 4, 0, g), ValueError, r"^hidden_size \(of a gated head\)"),
    (lambda g: markov_head_state("vanilla", 8, 4, None, g, scale=-1.0), ValueError, "^scale:"),
    (lambda g: markov_head_state("vanilla", 8, 4, None, None), TypeError, "^generator: expected a CPU"),
    (lambda g: logit_rows("sharp", 2, 4, g), ValueError, "^family: expected one of"),
    (lambda g: logit_rows("flat", 0, 4, g), ValueError, "^batch: expected an int >= 1"),
    (lambda g: logit_rows("random", 2, 2.0, g), TypeError, "^vocab: expected an int"),
    (lambda g: tiny_models.TinyTargetLM(1, 8, generator=g), ValueError, "^vocab_size: expected an int >= 2"),
    (lambda g: tiny_models.TinyTargetLM(5, 8, generator=None), TypeError, "^generator: expected a CPU"),
    (lambda g: tiny_models.TinyTargetLM(5, 8, generator=g)(torch.tensor([[0, 5]])), ValueError,
     r"^context_ids: expected token ids in \[0, 5\)"),
    (lambda g: tiny_models.TinyDSparkDraft(tiny_models.TinyTargetLM(5, 7, generator=g), gamma=2, generator=g),
     ValueError, "^target: expected an even hidden_size"),
    (lambda g: tiny_models.TinyDSparkDraft(tiny_models.TinyTargetLM(5, 8, generator=g), gamma=2,
                                           markov_head_type="lstm", generator=g), ValueError, "^markov_head_type:"),
    (lambda g: tiny_models.OracleDraft(tiny_models.TinyTargetLM(5, 8, generator=g), gamma=2, logit_noise=1.0),
     TypeError, "^generator: expected a CPU"),
    (lambda g: tiny_models.OracleDraft(tiny_models.TinyTargetLM(5, 8, generator=g), gamma=2).block(
        torch.zeros(1, 8), torch.tensor([0]), 3), ValueError, "^gamma: expected an int <= 2"),
])
def test_a_bad_argument_is_named(call, error, match):
    with pytest.raises(error, match=match):
        call(torch.Generator().manual_seed(0))


if __name__ == "__main__":  # prints the tables above from the builders of today
    print("PRODUCED_ON =", _here())
    for call in HEAD_DIGESTS:
        print(f"    {call}: {_head_digest(*call)!r},")
    for call in LOGIT_DIGESTS:
        print(f"    {call}: {_logit_digest(*call)!r},")
    for call in ROUND_DIGESTS:
        print(f"    {call}: {_round_digest(*call)!r},")
    torch.set_num_threads(1)  # as the test (and the S9 cases) run the tiny models
    for call in TINY_MODEL_DIGESTS:
        print(f"    {call}: {_tiny_model_digest(reference_tiny_models, *call)!r},")
