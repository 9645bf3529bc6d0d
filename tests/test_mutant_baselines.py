"""Each mutant is the reference plus its one fault: its baseline IS the reference.

A mutant (``fixtures/mutants``) plants its fault by subclassing public reference behaviour:
a class of ``conformance.adapters.reference`` or a public class of ``dspark_ref`` (a hook
such as ``RoundSteps``, ``ChainRule``, ``RaceSteps``, ``AdmissionRule``, a head or the
folded sampler). The tests below check, for every registered mutant,

* that every class it defines subclasses public reference classes only (no private
  helper, no copy of the reference kept in the fixtures as a base);
* that with the fault disabled (every mutant-defined object demoted to the public class
  it subclasses) its capabilities return exactly what the reference adapter returns on
  a few seeded probes, bit for bit;
* that with the fault enabled the probes see it (so the comparison above has teeth); a
  probe returns the inputs it passed too where a mutant writes into them (SPEC S5);
* that no mutant module imports a private name (``_x``) of ``dspark_ref`` or
  ``conformance``, or reads one off an imported module.

To add a capability: add a probe to ``PROBES`` (seeded inputs through the capability's
contract, returning tensors / numbers to compare).
"""

from __future__ import annotations

import ast
import copy
import functools
import inspect
import math
from pathlib import Path
from typing import Any, Callable

import pytest
import torch

import dspark_ref
from conformance import contract as c
from conformance.adapters import reference
from conformance.inputs import tiny_models
from dspark_ref import markov
from fixtures.mutants import load_all

MUTANTS = load_all()
MUTANT_DIR = Path(__file__).resolve().parents[1] / "fixtures" / "mutants"
PRIVATE_ROOTS = ("dspark_ref", "conformance")


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# ----------------------------------------------------------------------------- probes
def _probe_step_sampler(impl) -> list:
    g = _gen(1)
    rows, width, vocab = 12, 40, 33
    logits = torch.randint(-3, 4, (rows, width), generator=g).float()  # integer logits: greedy ties
    logits[:, vocab:] = 9.0  # padding columns that win if not cropped
    logits[8, 3], logits[8, 7] = 5.0, 5.00001  # a near tie that a tempered softmax merges
    temps = torch.tensor([0.0, 0.5, 1.0, 2.0, 1.0, 0.3, 1.0, 0.7, 1e4, 1.0, 0.0, 1.5])
    top_k = torch.tensor([1, 50, 50, 50, 1, 50, 1, 50, 1, 50, 50, 50])
    flat = torch.zeros(20_000, 2)  # noise of too few distinct values ties keys: ~28 ties in these rows
    return [impl.sample(logits, temps, top_k, vocab, g) for _ in range(2)] + [
        impl.sample(flat, torch.ones(len(flat)), torch.full((len(flat),), 50), 2, g)]


def _outcome(call: Callable[[], Any]) -> Any:
    """What ``call()`` returns, or ``("raises", <exception type>)`` (degenerate inputs a
    declared rule may reject)."""
    try:
        return call()
    except (ValueError, RuntimeError) as exc:
        return ("raises", type(exc).__name__)


def _probe_noise_step_sampler(impl) -> list:
    g = _gen(2)
    rows, vocab = 16, 2100  # three tiles of 1024
    logits = torch.randn(rows, vocab, generator=g) * 3
    temps = torch.tensor([1.0, 0.7, 2.0, 0.0] * 4)
    top_k = torch.tensor([50, 50, 50, 1] * 4)
    noise = torch.empty(rows, vocab).exponential_(generator=g)
    out = [impl.sample_with_noise(logits, temps, top_k, noise)]
    dead_tail = logits.clone()
    dead_tail[::2, 2048:] = -math.inf  # SPEC S3 degenerate inputs: a zero-mass last tile
    out.append(impl.sample_with_noise(dead_tail, temps, top_k, noise))
    bad_temps = temps.clone()
    bad_temps[1] = math.nan
    out.append(_outcome(lambda: impl.sample_with_noise(logits, bad_temps, top_k, noise)))
    return out


def _probe_truncated_step_sampler(impl) -> list:
    g = _gen(3)
    logits = torch.randn(6, 20, generator=g)
    temps = torch.tensor([0.0, 0.8, 1.0, 1.2, 1.0, 0.5])
    top_k = torch.tensor([1, 5, 50, 3, 50, 50])
    top_p = torch.tensor([1.0, 0.9, 0.5, 1.0, 0.8, 1.0])
    min_p = torch.tensor([0.0, 0.0, 0.1, 0.0, 0.05, 0.2])
    return [impl.sample_truncated(logits, temps, top_k, top_p, min_p, g), logits]  # logits: SPEC S5, unchanged


def _head_weights(head_type: str, vocab: int, rank: int, hidden: int, seed: int) -> dict:
    config = {"markov_head_type": head_type, "markov_rank": rank, "vocab_size": vocab, "hidden_size": hidden}
    return markov.build_markov_head(config, scale=0.5, generator=_gen(seed)).state_dict()


def _probe_markov_block(impl) -> list:
    out = []
    vocab, rank, hidden, rows, gamma = 32, 4, 6, 3, 4
    for seed, head_type in enumerate(markov.HEAD_TYPES):
        g = _gen(10 + seed)
        head = impl.load_head(head_type, _head_weights(head_type, vocab, rank, hidden, seed), vocab, rank,
                              hidden, torch.device("cpu"))
        base = torch.randn(rows, gamma, vocab, generator=g) * 2
        first_prev = torch.randint(0, vocab, (rows,), generator=g)
        states = torch.randn(rows, gamma, hidden, generator=g)
        temps, top_k = torch.tensor([1.0, 0.6, 1.0]), torch.tensor([50, 50, 1])
        out.append(impl.sample_block(head, base, first_prev, states, temps, top_k, g))
        token_ids = torch.randint(0, vocab, (rows, gamma), generator=g)
        out.append(impl.apply_block_logits(head, base, token_ids, states))
    return out


def _probe_draft_layouts(impl) -> list:
    out = []
    vocab, rank, hidden, rows, gamma = 24, 4, 6, 3, 4
    for seed, (head_type, layout, draft_vocab) in enumerate(
            (("vanilla", "anchor-first", 24), ("gated", "bonus-anchor", 24), ("vanilla", "anchor-first", 31),
             ("gated", "bonus-anchor", 31), ("vanilla", "anchor-first", 10), ("rnn", "bonus-anchor", 10))):
        g = _gen(90 + seed)
        state = _head_weights(head_type, vocab, rank, hidden, seed)
        state["W2.weight"] = torch.randn(draft_vocab, rank, generator=g)
        queries = gamma + (layout == "bonus-anchor")
        base = torch.randn(rows, queries, draft_vocab, generator=g) * 2
        base[..., vocab:] += 6.0  # padding that wins if not cropped
        d2t = torch.randperm(vocab, generator=g)[:draft_vocab] if draft_vocab < vocab else None
        temps, top_k = torch.tensor([1.0, 0.6, 1.0]), torch.tensor([50, 50, 1])
        out.append(impl.draft_block(head_type, state, base, torch.randint(0, vocab, (rows,), generator=g),
                                    torch.randn(rows, queries, hidden, generator=g), temps, top_k, g, layout=layout,
                                    vocab_size=vocab, d2t=d2t))
    return out


def _probe_folded_draft(impl) -> list:
    vocab, rank, gamma, bs = 64, 4, 3, 4
    head = reference.MarkovBlock().load_head("vanilla", _head_weights("vanilla", vocab, rank, 6, 20), vocab,
                                            rank, 6, torch.device("cpu"))
    session = impl.session(head, bs, gamma, vocab, torch.float32, torch.device("cpu"), 21)
    g = _gen(22)
    session.load_inputs(torch.randn(bs, gamma, vocab, generator=g) * 2, torch.randint(0, vocab, (bs,), generator=g),
                        None)
    session.stage(bs, torch.tensor([1.0, 0.7, 1.0, 0.0]), torch.tensor([50, 50, 1, 50]))
    session.capture()
    out = [session.replay(), session.replay()]
    session.stage(bs, torch.tensor([0.5, 1.0, 1.3, 1.0]), torch.tensor([50, 1, 50, 50]))
    out += [session.replay(), session.sample_block_calls, session.graph_replays]
    # the replays above return views of one buffer: compare what they held here, then shrink and grow the batch
    out = [tuple(t.clone() for t in o) if isinstance(o, tuple) else o for o in out]
    base, first_prev = torch.randn(bs, gamma, vocab, generator=g) * 2, torch.randint(0, vocab, (bs,), generator=g)
    session.load_inputs(base[:2], first_prev[:2], None)
    session.stage(2, torch.tensor([0.3, 2.5]), torch.tensor([50, 50]))
    session.capture()
    out.append(tuple(t.clone() for t in session.replay()))
    session.load_inputs(base, first_prev, None)
    session.stage(bs, torch.tensor([3.0, 1.0, 1.0, 0.6]), torch.tensor([50, 1, 1, 50]))
    session.capture()
    out.append(tuple(t.clone() for t in session.replay()))
    return out


def _probe_fold_gate(impl) -> list:
    out = []
    for lm_dtype in (torch.bfloat16, torch.float32):
        need = impl.buffer_bytes(256, 5, 129_280, lm_dtype)
        need32 = reference.FoldGate().buffer_bytes(256, 5, 129_280, torch.float32)
        out.append(need)
        for free in (need + 2**30 - 1, need + 2**30, need + 10**9, need32 + 2**30, 0):
            out.append([impl.folds_sampling(mode, 256, 5, 129_280, lm_dtype, free)
                        for mode in ("off", "auto", "force")])
    return out


def _probe_fold_routing(impl) -> list:
    return [impl.route(a, b) for a in (True, False) for b in (True, False)]


def _verify_inputs(seed: int):
    g = _gen(seed)
    rows, l, vocab = 8, 4, 8
    target = torch.randn(rows, l + 1, vocab, generator=g) * 1.5
    draft = target[:, :l] + torch.randn(rows, l, vocab, generator=g)
    drafts = torch.multinomial(torch.softmax(draft.reshape(-1, vocab), -1), 1, generator=g).reshape(rows, l)
    temps = torch.tensor([1.0, 0.6, 1.0, 2.0, 1.0, 0.8, 1.0, 1.0])
    top_k = torch.tensor([50, 50, 1, 50, 50, 50, 50, 1])
    return drafts, target, draft, temps, top_k, g


def _probe_chain_verifier(impl) -> list:
    drafts, target, draft, temps, top_k, g = _verify_inputs(31)
    torch.rand(5, generator=g)  # a generator that has drawn before (a fresh one replays its seed)
    rows, l = drafts.shape
    out = [impl.verify(drafts, target, draft, temps, top_k, generator=g),
           impl.verify(drafts, target, draft, temps, top_k, generator=g, cap=2)]
    accept = torch.rand(rows, l, dtype=torch.float64, generator=g)
    final = torch.rand(rows, dtype=torch.float64, generator=g)
    out.append(impl.verify(drafts, target, draft, temps, top_k, accept_uniforms=accept, final_uniforms=final))
    out.append(impl.verify(drafts, target, draft, temps, top_k, accept_uniforms=accept.sqrt(),
                           final_uniforms=final, cap=3))
    forbidden, zero_coin = target.clone(), accept.clone()  # coin 0 on a draft the target forbids
    forbidden[0, 0, drafts[0, 0]], zero_coin[0, 0] = -math.inf, 0.0
    out.append(impl.verify(drafts, forbidden, draft, temps, top_k, accept_uniforms=zero_coin, final_uniforms=final))
    seeds, positions = torch.arange(rows) * 7 + 1, torch.arange(rows) + 11
    out.append(impl.verify(drafts, target, draft, temps, top_k, seeds=seeds, positions=positions))
    # SPEC S5 degenerate values: per-row caps, -1 sentinels, q(x) = 0 drafts, a final uniform
    # of 0 with a leading zero-probability token.
    out.append(impl.verify(drafts, target, draft, temps, top_k, accept_uniforms=accept, final_uniforms=final,
                           cap=torch.tensor([5, 1, 3, 2, 0, 4, 5, 1])))
    sentinel = drafts.masked_fill(torch.arange(l) >= torch.arange(rows)[:, None] % (l + 1), -1)
    out.append(impl.verify(sentinel, target, draft, temps, top_k, accept_uniforms=accept, final_uniforms=final))
    zero_q, leading_zero = draft.scatter(-1, drafts[..., None], -math.inf), target.clone()
    leading_zero[:, :, 0] = -math.inf
    out.append(impl.verify(drafts, leading_zero, zero_q, temps, top_k, accept_uniforms=torch.zeros_like(accept),
                           final_uniforms=torch.zeros_like(final)))
    out.append(impl.verify(drafts, _near_ties(target), draft, temps, top_k, accept_uniforms=accept,
                           final_uniforms=final))
    out.append(_explicit_draw_edges(impl))
    return out


def _explicit_draw_edges(impl):
    """SPEC S5 explicit uniforms where the draw rule's details decide (V = 10, l = 1): a
    final uniform past the rounded total (ten tokens of 0.1 sum to 1 - 2^-53) and on the
    boundary C_4 = .5; a reject with residual mass ~1e-14 (below the floor); a bonus law
    (.5 + 2.5e-9, .5 - 2.5e-9) that float32 rounding makes even."""
    below_one = 1.0 - 2.0 ** -53
    target, draft = torch.zeros(4, 2, 10), torch.zeros(4, 1, 10)
    target[3, 1, 2:], target[3, 1, 0] = -math.inf, 1e-8
    draft[2, 0, 0] = 1e-13
    coins = torch.tensor([[0.0], [0.0], [below_one], [0.0]], dtype=torch.float64)
    finals = torch.tensor([below_one, 0.5, 0.05, 0.5 + 1e-9], dtype=torch.float64)
    return impl.verify(torch.zeros(4, 1, dtype=torch.int64), target, draft, torch.ones(4),
                       torch.full((4,), 50), accept_uniforms=coins, final_uniforms=finals)


def _near_ties(logits: torch.Tensor) -> torch.Tensor:
    """``logits`` with ids 0 and 1 above the rest at every position, 8 and 8 + 2^-6: a float32
    argmax of 1 that bfloat16 (spacing 2^-4 on [8, 16)) merges into a tie (argmax 0)."""
    ties = logits.clone()
    ties[..., 0], ties[..., 1] = 8.0, 8.0 + 2.0**-6
    return ties


def _truncations(rows: int, vocab: int):
    """Per-row truncation parameters that cut at top-k (with a tie), top-p and min-p."""
    top_k = torch.full((rows,), vocab)
    top_k[0], top_k[3] = 3, 1
    top_p, min_p = torch.ones(rows), torch.zeros(rows)
    top_p[1], top_p[4], min_p[5] = 0.6, 0.85, 0.3
    return top_k, top_p, min_p


def _probe_truncated_chain_verifier(impl) -> list:
    drafts, target, draft, temps, _, g = _verify_inputs(32)
    rows, l, vocab = draft.shape
    target[0] = torch.tensor([2.0, 1.0, 1.0, 1.0, 1.0, 0.0, -0.5, -1.0])  # 4 tied at the cut of top_k = 3
    top_k, top_p, min_p = _truncations(rows, vocab)
    probs = torch.softmax(draft / temps[:, None, None], dim=-1)
    out = [impl.verify_truncated(drafts, target, probs, temps, top_k, top_p, min_p, g) for _ in range(2)]
    # SPEC S5 degenerate values: a handed-over q(x) = 1 + 2^-7 with p(x) = 1; q(x) = 0 drafts.
    n = 2048
    x = torch.randint(0, 4, (n, 1), generator=g)
    one_hot = torch.nn.functional.one_hot(x[:, 0], 4).float()
    neutral = (torch.full((n,), 4), torch.ones(n), torch.zeros(n))
    out.append(impl.verify_truncated(x, torch.stack([one_hot.log(), one_hot], dim=1), (one_hot * (1 + 2**-7))[:, None],
                                     torch.ones(n), *neutral, g))
    q_zero = ((1 - one_hot) / 3)[:, None]
    out.append(impl.verify_truncated(x, torch.zeros(n, 2, 4), q_zero, torch.ones(n), *neutral, g))
    return out


def _probe_speculative_round(impl) -> list:
    g = _gen(80)
    rows, gamma, vocab, rank, d = 8, 3, 8, 4, 6
    out = []
    for head_type, dtype in (("vanilla", torch.float32), ("gated", torch.bfloat16)):
        head = markov.build_markov_head({"markov_head_type": head_type, "markov_rank": rank, "vocab_size": vocab,
                                         "hidden_size": d}, generator=g)
        handle = impl.load_head(head_type, head.state_dict(), vocab, rank, d, torch.device("cpu"), dtype)
        base, hidden = torch.randn(rows, gamma, vocab, generator=g) * 1.5, torch.randn(rows, gamma, d, generator=g)
        target, anchor = base[:, :1].repeat(1, gamma + 1, 1) + torch.randn(rows, gamma + 1, vocab, generator=g), \
            torch.randint(0, vocab, (rows,), generator=g)
        temps = torch.tensor([1.0, 0.6, 1.0, 2.0, 0.7, 1.0, 1.3, 0.9])
        top_k, top_p, min_p = _truncations(rows, vocab)
        args = (handle, base, anchor, hidden, target, temps, top_k, top_p, min_p)
        # And 16 copies of the rows with base logits near 40, where bfloat16's spacing (0.25)
        # moves a sampling step's law by a TV of a few percent.
        tiled = [t.repeat(16, *[1] * (t.dim() - 1)) for t in (base + 40, *args[2:])]
        out += [impl.round(*args, generator=g), impl.round(*args, generator=g),
                impl.round(*args, seeds=torch.arange(rows) * 5 + 2, positions=torch.arange(rows) + 9),
                impl.round(handle, *tiled, generator=g),
                target]  # SPEC S5: the caller's inputs unchanged
    return out


def _probe_greedy_verifier(impl) -> list:
    drafts, target, _, _, _, _ = _verify_inputs(33)
    drafts[:4] = target[:4, :-1].argmax(-1)
    out = [impl.verify_greedy(drafts, target), impl.verify_greedy(drafts, target, cap=2)]
    # SPEC S5: per-row caps, -1 sentinels, an odd batch with ties.
    out.append(impl.verify_greedy(drafts, target, cap=torch.tensor([5, 1, 3, 2, 0, 4, 5, 1])))
    rows, l = drafts.shape
    sentinel = drafts.masked_fill(torch.arange(l) >= torch.arange(rows)[:, None] % (l + 1), -1)
    out.append(impl.verify_greedy(sentinel, target))
    ties = torch.randint(0, 2, (3, l + 1, 8), generator=_gen(34)).float()
    out.append(impl.verify_greedy(torch.zeros(3, l, dtype=torch.int64), ties))
    out.append(impl.verify_greedy(drafts, _near_ties(target)))
    return out


class _ProbeRank1:
    """Rank 1 of a pretend two-rank group whose rank 0 planned verify lengths 1, 0, 1, 0, ..."""

    rank = rank_in_group = 1
    world_size = 2

    def broadcast(self, tensor, src=0):
        tensor.copy_(torch.arange(len(tensor)) % 2 == 0)


def _probe_tensor_parallel_round(impl) -> list:
    g = _gen(95)
    rows, gamma, vocab, rank, d = 4, 3, 16, 4, 6
    out = []
    for head_type in ("vanilla", "gated"):
        state = _head_weights(head_type, vocab, rank, d, 96)
        base, target = torch.randn(rows, gamma, vocab, generator=g), torch.randn(rows, gamma + 1, vocab, generator=g)
        args = (base, torch.randint(0, vocab, (rows,), generator=g), torch.randn(rows, gamma, d, generator=g), target,
                torch.tensor([1.0, 0.0, 0.8, 1.2]), torch.tensor([50, 1, 50, 50]),
                torch.rand(rows, gamma, generator=g, dtype=torch.float64), [1.0 / (1 + 0.1 * b) for b in range(1, 17)])
        out.append(impl.tp_round(_ProbeRank1(), head_type, state, *args, generator=_gen(97),
                                 seeds=torch.arange(rows) * 3 + 1, positions=torch.arange(rows) + 7))
    return out


def _probe_simulated(impl) -> list:
    g = _gen(40)
    out = [[impl.sample_acc_len(value, method, 6, g) for _ in range(40)]
           for method in ("match-expected", "multinomial") for value in (0.2, 3.0, 4.7, 6.5)]
    executor = impl.executor(4.7, "match-expected", 5, 41)
    drafts = torch.arange(30).reshape(6, 5)
    for _ in range(3):
        out += [executor.step(drafts), executor.correct_drafts.clone()]
    return out


def _probe_simulated_batch(impl) -> list:
    g = _gen(43)
    return [impl.sample_acc_lens(value, method, 6, 40, g)
            for method in ("match-expected", "multinomial") for value in (0.2, 3.0, 4.7, 6.5)]


def _probe_simulated_bonus(impl) -> list:
    g = _gen(42)
    logits = torch.randn(40, 4, 9, generator=g) * 2
    accepted = torch.randint(0, 4, (40,), generator=g)
    temperatures = torch.tensor([0.0, 0.7, 1.0, 2.5] * 10)
    return [*(impl.simulated_bonus(logits, accepted, temperatures, g) for _ in range(2)), logits]  # SPEC S5


def _probe_confidence(impl) -> list:
    g = _gen(50)
    rows, gamma, d, r = 3, 5, 6, 4
    state = {"proj.weight": torch.randn(1, d + r, generator=g), "proj.bias": torch.randn(1, generator=g)}
    hidden, features = torch.randn(rows, gamma, d, generator=g), torch.randn(rows, gamma, r, generator=g)
    temps = torch.tensor([0.5, 1.0, 2.0, 1.5, 0.8])
    out = [impl.confidences(state, hidden, features, temps, checkpoint_gamma=7),
           impl.confidences(state, hidden, features, None, checkpoint_gamma=gamma)]
    out.append(impl.prefix_survival(out[0]))
    raw = torch.randn(400, 3, generator=g, dtype=torch.float64) * 2
    accepted = torch.rand(400, 3, generator=g, dtype=torch.float64) < torch.sigmoid(raw)
    out.append(impl.fit_sts(raw, accepted.cumprod(dim=1).bool()))
    return out


def _probe_scheduler(impl) -> list:
    g = _gen(60)
    out = [impl.schedule(torch.tensor([[1.0, 0.5]], dtype=torch.float64), [1.0, 0.5, 0.3])]  # Theta ties best
    for _ in range(40):
        rows, gamma = int(torch.randint(1, 5, (), generator=g)), int(torch.randint(1, 5, (), generator=g))
        conf = torch.randint(0, 9, (rows, gamma), generator=g).double() / 8  # ties and zeros
        size = rows * (gamma + 1)
        sps = (1 - torch.rand(size, generator=g) * 0.4).sort(descending=True).values
        for table in (sps.tolist(), [1.0] * size):
            out.append(impl.schedule(conf, table))
    return out


def _probe_production_scheduler(impl) -> list:
    g = _gen(61)
    out = []
    for _ in range(40):
        rows, gamma = int(torch.randint(1, 5, (), generator=g)), int(torch.randint(1, 5, (), generator=g))
        stale = torch.randint(0, 9, (rows, gamma), generator=g).double() / 8  # ties and zeros
        current = torch.randint(0, 9, (rows, gamma), generator=g).double() / 8
        low = torch.randint(0, gamma + 1, (rows,), generator=g)
        high = low + (torch.rand(rows, generator=g) * (gamma + 1 - low)).long()
        size = rows * (gamma + 1)
        steep = (1 + torch.rand(size, generator=g) * 0.6 * rows).sort().values.tolist()
        gentle = [1 + 0.05 * b for b in range(size)]
        for cost in (steep, gentle):
            for bounds in ((low, high), (torch.zeros_like(low), torch.full_like(low, gamma))):
                out.append(impl.schedule_production(stale, current, cost, *bounds))
    return out


def _probe_speculative(impl) -> list:
    target = tiny_models.TinyTargetLM(12, 8, generator=_gen(70))
    prompt = torch.randint(0, 12, (2, 2), generator=_gen(72))
    out = []
    for head_type, temperature, sps in (("vanilla", 0.0, None), ("rnn", 1.0, lambda b: 1.0 / (1 + 0.1 * b))):
        draft = tiny_models.TinyDSparkDraft(target, gamma=3, markov_head_type=head_type, generator=_gen(71),
                                            with_confidence=sps is not None)
        out.append(impl.generate(target, draft, prompt, 7, temperature, _gen(73), sps=sps))
    out.append(impl.generate(target, tiny_models.OracleDraft(target, gamma=2), prompt, 7, 1.0, _gen(74)))
    draft = tiny_models.TinyDSparkDraft(target, gamma=3, generator=_gen(75))
    draft.markov_head.to(torch.bfloat16)
    out.append(impl.generate(target, draft, prompt, 7, 0.0, _gen(76)))
    return out


def _probe_speculative_record(impl) -> list:
    target = tiny_models.TinyTargetLM(12, 8, generator=_gen(77))
    prompt = torch.randint(0, 12, (3, 2), generator=_gen(78))
    out = []
    for head_type, temperature, gamma in (("gated", 0.0, None), ("rnn", 1.0, 2)):
        draft = tiny_models.TinyDSparkDraft(target, gamma=3, markov_head_type=head_type, generator=_gen(79),
                                            with_confidence=True)
        out.append(impl.generate_recorded(target, draft, prompt, 9, temperature, _gen(80), gamma=gamma,
                                          sps=lambda b: 1.0 / (1 + 0.1 * b)))
    return out


PROBES: dict[type, Callable[[Any], list]] = {
    c.StepSampler: _probe_step_sampler,
    c.NoiseStepSampler: _probe_noise_step_sampler,
    c.TruncatedStepSampler: _probe_truncated_step_sampler,
    c.MarkovBlock: _probe_markov_block,
    c.DraftLayouts: _probe_draft_layouts,
    c.FoldedDraft: _probe_folded_draft,
    c.FoldGate: _probe_fold_gate,
    c.FoldRouting: _probe_fold_routing,
    c.ChainVerifier: _probe_chain_verifier,
    c.TruncatedChainVerifier: _probe_truncated_chain_verifier,
    c.GreedyVerifier: _probe_greedy_verifier,
    c.TensorParallelRound: _probe_tensor_parallel_round,
    c.SimulatedAcceptance: _probe_simulated,
    c.SimulatedAcceptanceBatch: _probe_simulated_batch,
    c.SimulatedBonus: _probe_simulated_bonus,
    c.Confidence: _probe_confidence,
    c.PrefixScheduler: _probe_scheduler,
    c.ProductionScheduler: _probe_production_scheduler,
    c.SpeculativeLoop: _probe_speculative,
    c.SpeculativeLoopRecord: _probe_speculative_record,
    c.SpeculativeRound: _probe_speculative_round,
}


def _same(a, b) -> bool:
    """Bit-for-bit equality of probe outputs (tensors: dtype, shape, values, NaN where NaN)."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
            return False
        if a.dtype != b.dtype or a.shape != b.shape:
            return False
        return bool((torch.isnan(a) & torch.isnan(b)).logical_or(a == b).all()) if a.is_floating_point() \
            else torch.equal(a, b)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return type(a) is type(b) and a == b


def _probe(capability: type, impl) -> list:
    """The probe's outputs, drawn with one intra-op torch thread: the tiny models' forward
    passes round by thread count, and a worker's count depends on the tests it ran before (the
    reference's probes are cached), so the two sides of a comparison could differ in the last
    bits (loop-scheduler-reads-stale-confidences did, in a full run)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return PROBES[capability](impl)
    finally:
        torch.set_num_threads(threads)


# Capabilities the reference implements but its adapter does not offer (offering the batch
# would route the reference's S6 law cases away from sample_acc_len, which its single-draw
# mutants break).
REFERENCE_UNOFFERED = {c.SimulatedAcceptanceBatch: reference.SimulatedAcceptanceBatch}


@functools.cache
def _reference_probe(capability: type) -> list:
    impl = REFERENCE_UNOFFERED[capability]() if capability in REFERENCE_UNOFFERED else \
        reference.capabilities()[capability]
    return _probe(capability, impl)


# ----------------------------------------------------------------------------- demotion
def _is_mutant_class(cls: type) -> bool:
    return cls.__module__.split(".")[:2] == ["fixtures", "mutants"]


def _is_public_reference_class(cls: type) -> bool:
    """A class the reference exports: public in ``conformance.adapters.reference``, or in
    ``dspark_ref.__all__`` (and defined in ``dspark_ref``)."""
    if cls.__name__.startswith("_"):
        return False
    if cls.__module__ == reference.__name__:
        return getattr(reference, cls.__name__, None) is cls
    return cls.__module__.startswith("dspark_ref.") and getattr(dspark_ref, cls.__name__, None) is cls \
        and cls.__name__ in dspark_ref.__all__


def _public_base(cls: type) -> type:
    """The first public reference class in the method resolution order of ``cls``."""
    return next(base for base in cls.__mro__ if _is_public_reference_class(base))


def _reachable(value: Any, seen: set[int] | None = None) -> list[Any]:
    """``value`` and what it holds: attributes of instances, class attributes of mutant
    classes, items of mappings and sequences (the places a mutant plugs a class in)."""
    seen = set() if seen is None else seen
    if id(value) in seen:
        return []
    seen.add(id(value))
    found = [value]
    if isinstance(value, dict):
        children = list(value.values())
    elif isinstance(value, (list, tuple)):
        children = list(value)
    elif isinstance(value, type):
        children = [v for cls in value.__mro__ if _is_mutant_class(cls) for v in vars(cls).values()]
    elif _is_mutant_class(type(value)) or _is_public_reference_class(type(value)):
        children = [type(value), *vars(value).values()]
    else:
        children = []
    for child in children:
        found += _reachable(child, seen)
    return found


def _mutant_classes(overrides: dict) -> set[type]:
    return {v for v in _reachable(overrides) if isinstance(v, type) and _is_mutant_class(v)}


def _fault_disabled(value: Any) -> Any:
    """``value`` with every mutant-defined object demoted to its public reference base: a
    copy whose class is that base (the fault's overrides gone), its attributes demoted."""
    if not (_is_mutant_class(type(value)) or _is_public_reference_class(type(value))) or isinstance(value, type):
        return value
    if isinstance(value, torch.nn.Module):
        return value
    demoted = copy.copy(value)
    if _is_mutant_class(type(value)):
        demoted.__class__ = _public_base(type(value))
    for name, attribute in vars(value).items():
        setattr(demoted, name, _fault_disabled(attribute))
    return demoted


# ----------------------------------------------------------------------------- tests
REFERENCE = reference.capabilities()


@pytest.mark.parametrize("mutant_id", sorted(MUTANTS))
def test_mutant_classes_subclass_public_reference_classes(mutant_id):
    classes = _mutant_classes(MUTANTS[mutant_id].overrides())
    assert classes, f"{mutant_id}: defines no class of its own (expected a subclass carrying the fault)"
    bad = {cls.__qualname__: [b.__qualname__ for b in cls.__bases__ if not _is_public_reference_class(b)]
           for cls in classes}
    bad = {name: bases for name, bases in bad.items() if bases}
    assert not bad, (f"{mutant_id}: mutant classes must subclass public reference classes "
                     f"(conformance.adapters.reference or dspark_ref.__all__), got bases {bad}")


@pytest.mark.parametrize("mutant_id", sorted(MUTANTS))
def test_mutant_baseline_equals_the_reference(mutant_id):
    for capability, impl in MUTANTS[mutant_id].overrides().items():
        baseline = _fault_disabled(impl)
        assert not any(_is_mutant_class(type(v)) for v in _reachable(baseline) if not isinstance(v, type)), (
            f"{mutant_id}: demotion left a mutant object in {capability.__name__}"
        )
        assert _same(_probe(capability, baseline), _reference_probe(capability)), (
            f"{mutant_id}: with the fault disabled, {capability.__name__} differs from the reference "
            f"adapter on the seeded probes (the mutant's base is not the reference)"
        )


@pytest.mark.parametrize("mutant_id", sorted(MUTANTS))
def test_mutant_fault_shows_in_the_probes(mutant_id):
    overrides = MUTANTS[mutant_id].overrides()
    differing = [cap.__name__ for cap, impl in overrides.items()
                 if not _same(_probe(cap, impl), _reference_probe(cap))]
    assert differing, f"{mutant_id}: the seeded probes do not see the fault (add a probe input that does)"


def _private_uses(source: str) -> list[str]:
    """Private names (``_x``) of ``dspark_ref`` / ``conformance`` a module imports, or reads
    off a module of those it imported (``module._x``)."""
    def ours(module: str) -> bool:
        return module.split(".")[0] in PRIVATE_ROOTS

    def private_path(module: str) -> bool:
        return any(part.startswith("_") for part in module.split("."))

    tree = ast.parse(source)
    found, aliases = [], set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if ours(alias.name):
                    if private_path(alias.name):
                        found.append(f"line {node.lineno}: import {alias.name}")
                    aliases.add(alias.asname or alias.name.split(".")[0])
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and ours(node.module):
            if private_path(node.module):
                found.append(f"line {node.lineno}: from {node.module} import ...")
            for alias in node.names:
                if alias.name.startswith("_"):
                    found.append(f"line {node.lineno}: from {node.module} import {alias.name}")
                aliases.add(alias.asname or alias.name)
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases \
                and node.attr.startswith("_") and not node.attr.startswith("__"):
            found.append(f"line {node.lineno}: {node.value.id}.{node.attr}")
    return found


@pytest.mark.parametrize("path", sorted(MUTANT_DIR.glob("*.py")), ids=lambda p: p.name)
def test_mutant_modules_use_no_private_reference_names(path):
    assert _private_uses(path.read_text()) == [], f"{path.name}: uses private names of the reference"


@pytest.mark.parametrize("source, expected", [
    ("from dspark_ref.tiled_sampling import _torch_partials",
     ["line 1: from dspark_ref.tiled_sampling import _torch_partials"]),
    ("from dspark_ref import verify\nverify._step_laws(1)", ["line 2: verify._step_laws"]),
    ("import dspark_ref._checks", ["line 1: import dspark_ref._checks"]),
    ("from conformance.adapters import reference\nreference.greedy_mask_of(1)", []),
    ("from torch import _C\nimport os\nos._exit", []),
])
def test_private_use_check_flags_private_reference_names(source, expected):
    assert _private_uses(source) == expected


def test_every_capability_has_a_probe():
    probed = set(REFERENCE) | set(REFERENCE_UNOFFERED)
    assert set(PROBES) == probed, sorted(c.__name__ for c in probed ^ set(PROBES))
    assert all(inspect.isfunction(probe) for probe in PROBES.values())
