"""Tests of the boundary checks (``conformance.boundary``) on what adapters return.

Per capability: a value in the canonical form passes through unchanged (the very object),
and broken ones (wrong type, dtype, shape, device, ids out of range, NaN where the SPEC
forbids it) fail with a :class:`BoundaryViolation` (an ``AssertionError``) whose message
names the capability, the method, what came back and what was expected. The device case
uses the ``meta`` device, so it runs without a GPU. One end-to-end case runs the main job
on a toy adapter whose ``StepSampler`` returns float ids, one row too many (issue 12).
To add a case: a ``(broken value, message fragment)`` row in the table of its capability.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from conformance import contract as c
from conformance.boundary import BoundaryViolation, UnsupportedFeature, _Forwarding, _same_device, validating

ROOT = Path(__file__).resolve().parents[1]
I64, F32 = torch.int64, torch.float32
META = torch.device("meta")


class Canned:
    """An adapter object whose every method returns ``value``, whatever it is called with."""

    def __init__(self, value):
        self.value = value

    def __getattr__(self, name):
        return lambda *args, **kwargs: self.value


def ids(*values) -> torch.Tensor:
    return torch.tensor(values, dtype=I64)


def violation(message: str):
    """``pytest.raises`` of a BoundaryViolation whose text contains ``message``."""
    return pytest.raises(BoundaryViolation, match=re.escape(message))


def passes(capability, method, value, *args, **kwargs):
    """The validated call returns ``value`` itself."""
    got = getattr(validating(capability, Canned(value)), method)(*args, **kwargs)
    assert got is value
    return got


def fails(capability, method, value, message, *args, **kwargs) -> None:
    """The validated call raises a BoundaryViolation whose text contains ``message``."""
    with violation(message):
        getattr(validating(capability, Canned(value)), method)(*args, **kwargs)


# ----------------------------------------------------------------------------- module
def test_every_capability_has_a_validator_that_implements_it():
    for capability in c.CAPABILITIES:
        assert isinstance(validating(capability, Canned(None)), capability), capability.__name__


def test_unknown_capability_is_an_error_naming_the_argument():
    with pytest.raises(ValueError, match=r"capability: <class 'int'> is not a capability"):
        validating(int, Canned(None))


def test_devices_match_by_type_and_by_index_where_one_is_named():
    cuda, cuda0, cuda1 = torch.device("cuda"), torch.device("cuda:0"), torch.device("cuda:1")
    assert _same_device(cuda0, cuda) and _same_device(cuda1, cuda) and _same_device(cuda0, cuda0)
    assert not _same_device(cuda1, cuda0) and not _same_device(torch.device("cpu"), cuda)


def test_violation_is_an_assertion_error_and_adapter_errors_pass_through():
    assert issubclass(BoundaryViolation, AssertionError)

    class Unsupported:
        def verify_greedy(self, draft_tokens, target_logits, cap=None):
            raise NotImplementedError("no greedy verify here")

    with pytest.raises(NotImplementedError, match="no greedy verify here") as raised:
        validating(c.GreedyVerifier, Unsupported()).verify_greedy(ids(0)[None], torch.zeros(1, 2, 4))
    assert isinstance(raised.value, UnsupportedFeature) and raised.value.where == "GreedyVerifier.verify_greedy"
    assert str(raised.value) == "no greedy verify here"

    class NoMultinomial:  # a call with no tensor argument takes the boundary's shorter path
        def sample_acc_len(self, value, method, max_len, generator):
            raise NotImplementedError("no multinomial here")

    with pytest.raises(NotImplementedError, match="no multinomial here") as raised:
        validating(c.SimulatedAcceptance, NoMultinomial()).sample_acc_len(3.0, "multinomial", 6, torch.Generator())
    assert isinstance(raised.value, UnsupportedFeature) and raised.value.where == "SimulatedAcceptance.sample_acc_len"


def test_calls_reach_the_adapter_with_the_arguments_given_and_no_others():
    seen = []

    class Recorder:
        def verify(self, *args, **options):
            seen.append(options)
            return ids(0), ids(5, -1)[None]

    verifier = validating(c.ChainVerifier, Recorder())
    verifier.verify(ids(1)[None], torch.zeros(1, 2, 6), torch.zeros(1, 1, 6), torch.ones(1), ids(6))
    verifier.verify(ids(1)[None], torch.zeros(1, 2, 6), torch.zeros(1, 1, 6), torch.ones(1), ids(6), cap=1)
    assert seen == [{}, {"cap": 1}]


# ----------------------------------------------------------------------------- S3 samplers
STEP_ARGS = (torch.zeros(4, 10), torch.ones(4), torch.full((4,), 10, dtype=I64), 8, torch.Generator())
STEP_BROKEN = [
    (torch.zeros(5), "StepSampler.sample returned float32 [5], expected int64 [4] on cpu with ids in [0, 8)"),
    (ids(0, 1, 2, 3).int(), "returned int32 [4], expected int64 [4]"),
    (ids(0, 1, 2, 3)[None], "returned int64 [1, 4], expected int64 [4]"),
    (torch.zeros(4, dtype=I64, device=META), "returned int64 [4] on meta, expected int64 [4] on cpu"),
    (ids(0, 8, 2, 3), "returned int64 [4] with ids in [0, 8], expected int64 [4] on cpu with ids in [0, 8)"),
    (ids(0, -1, 2, 3), "with ids in [-1, 3], expected"),
    ([0, 1, 2, 3], "StepSampler.sample returned list, expected a torch.Tensor int64 [4]"),
]


@pytest.mark.parametrize("value, message", STEP_BROKEN, ids=[
    "float-one-row-long", "int32", "extra-axis", "device", "id-at-vocab", "id-negative", "list",
])
def test_S3_step_sampler_rejects(value, message):
    fails(c.StepSampler, "sample", value, message, *STEP_ARGS)


def test_S3_samplers_pass_ids_below_the_vocabulary():
    passes(c.StepSampler, "sample", ids(0, 7, 7, 3), *STEP_ARGS)
    logits, temps, top_k = torch.zeros(3, 6), torch.ones(3), torch.full((3,), 6, dtype=I64)
    passes(c.NoiseStepSampler, "sample_with_noise", ids(5, 0, 1), logits, temps, top_k, torch.ones(3, 6))
    passes(c.TruncatedStepSampler, "sample_truncated", ids(5, 0, 1), logits, temps, top_k, torch.ones(3),
           torch.zeros(3), torch.Generator())


def test_S3_noise_and_truncated_samplers_bound_ids_by_the_logits_width():
    logits, temps, top_k = torch.zeros(3, 6), torch.ones(3), torch.full((3,), 6, dtype=I64)
    fails(c.NoiseStepSampler, "sample_with_noise", ids(6, 0, 1),
          "NoiseStepSampler.sample_with_noise returned int64 [3] with ids in [0, 6], expected int64 [3] on cpu "
          "with ids in [0, 6)", logits, temps, top_k, torch.ones(3, 6))
    fails(c.TruncatedStepSampler, "sample_truncated", ids(0, 1),
          "TruncatedStepSampler.sample_truncated returned int64 [2], expected int64 [3]",
          logits, temps, top_k, torch.ones(3), torch.zeros(3), torch.Generator())


# ----------------------------------------------------------------------------- S2 Markov block
BASE = torch.zeros(2, 3, 5)  # [B, gamma, V]
BLOCK_ARGS = (None, BASE, ids(0, 1), None, torch.ones(2), torch.ones(2, dtype=I64), torch.Generator())
TOKENS = torch.zeros(2, 3, dtype=I64)


def _nan_at_one(tensor: torch.Tensor) -> torch.Tensor:
    tensor = tensor.clone()
    tensor.view(-1)[1] = math.nan
    return tensor


BLOCK_BROKEN = [
    ((TOKENS,), "MarkovBlock.sample_block returned tuple of 1, expected a tuple (tokens, corrected_logits)"),
    ((TOKENS.float(), BASE),
     "returned tokens float32 [2, 3], expected tokens int64 [2, 3] on cpu with ids in [0, 5)"),
    ((TOKENS + 5, BASE), "returned tokens int64 [2, 3] with ids in [5, 5], expected tokens"),
    ((TOKENS, BASE[:, :2]),
     "returned corrected_logits float32 [2, 2, 5], expected corrected_logits float32 [2, 3, 5]"),
    ((TOKENS, BASE.double()), "returned corrected_logits float64 [2, 3, 5], expected corrected_logits float32 "),
    ((TOKENS, _nan_at_one(BASE)), "returned corrected_logits float32 [2, 3, 5] with NaN or +inf at 1 of 30 entries"),
    ((TOKENS, BASE + math.inf), "with NaN or +inf at 30 of 30 entries"),
]


@pytest.mark.parametrize("value, message", BLOCK_BROKEN, ids=[
    "not-a-pair", "float-tokens", "id-at-vocab", "short-gamma", "float64-logits", "nan", "plus-inf",
])
def test_S2_sample_block_rejects(value, message):
    fails(c.MarkovBlock, "sample_block", value, message, *BLOCK_ARGS)


def test_S2_corrected_logits_may_be_float32_or_the_base_dtype_and_keep_minus_inf():
    passes(c.MarkovBlock, "sample_block", (TOKENS + 4, BASE - math.inf), *BLOCK_ARGS)
    bf16 = BASE.bfloat16()
    passes(c.MarkovBlock, "apply_block_logits", bf16.clone(), None, bf16, TOKENS, None)
    passes(c.MarkovBlock, "apply_block_logits", BASE.clone(), None, bf16, TOKENS, None)
    fails(c.MarkovBlock, "apply_block_logits", BASE.half(),
          "MarkovBlock.apply_block_logits returned float16 [2, 3, 5], expected float32 or bfloat16 [2, 3, 5]",
          None, bf16, TOKENS, None)


def test_S2_nan_passes_where_the_base_logits_have_nan():
    base = _nan_at_one(BASE)
    passes(c.MarkovBlock, "apply_block_logits", base.clone(), None, base, TOKENS, None)


def test_S2_load_head_handle_is_opaque():
    passes(c.MarkovBlock, "load_head", object(), "vanilla", {}, 5, 2, 3, torch.device("cpu"))


# ----------------------------------------------------------------------------- S4 folded sessions
class FakeSession:
    """A FoldedSession whose replay returns ``out`` and whose counters are given."""

    def __init__(self, out, graph_replays=0, sample_block_calls=None):
        self.out, self.graph_replays, self.sample_block_calls = out, graph_replays, sample_block_calls

    def stage(self, bs, temperatures, top_k):
        pass

    def load_inputs(self, base_logits, first_prev, hidden):
        pass

    def capture(self):
        pass

    def replay(self):
        return self.out


def _session(out, lm_dtype=torch.bfloat16, **counters):
    """A validated session with max_bs 4, gamma 3, V 5 on the CPU, staged for bs 2."""
    session = validating(c.FoldedDraft, Canned(FakeSession(out, **counters))).session(
        None, 4, 3, 5, lm_dtype, torch.device("cpu"), 0)
    session.stage(2, None, None)
    return session


def test_S4_replay_returns_the_session_buffers_themselves():
    out = (torch.zeros(2, 3, dtype=I64), torch.zeros(2, 3, 5, dtype=torch.bfloat16))
    session = _session(out, graph_replays=3, sample_block_calls=2)
    assert session.replay() is out
    assert (session.graph_replays, session.sample_block_calls) == (3, 2)
    assert _session(out).sample_block_calls is None


REPLAY_BROKEN = [
    ((torch.zeros(4, 3, dtype=I64), torch.zeros(4, 3, 5, dtype=torch.bfloat16)),
     "FoldedSession.replay returned tokens int64 [4, 3], expected tokens int64 [2, 3] on cpu with ids in [0, 5)"),
    ((torch.zeros(2, 3, dtype=I64), torch.zeros(2, 3, 5)),
     "returned corrected float32 [2, 3, 5], expected corrected bfloat16 [2, 3, 5] on cpu"),
    ((torch.full((2, 3), 5, dtype=I64), torch.zeros(2, 3, 5, dtype=torch.bfloat16)), "with ids in [5, 5]"),
]


@pytest.mark.parametrize("out, message", REPLAY_BROKEN, ids=["max-bs-rows", "float32-not-lm-dtype", "id-at-vocab"])
def test_S4_replay_rejects(out, message):
    with violation(message):
        _session(out).replay()


def test_S4_replay_follows_the_batch_of_the_last_load_inputs():
    session = _session((torch.zeros(3, 3, dtype=I64), torch.zeros(3, 3, 5, dtype=torch.bfloat16)))
    session.load_inputs(torch.zeros(3, 3, 5, dtype=torch.bfloat16), ids(0, 0, 0), None)
    session.replay()
    session.stage(2, None, None)
    with violation("FoldedSession.replay returned tokens int64 [3, 3], expected tokens int64 [2, 3]"):
        session.replay()


def test_S4_replay_checks_logits_against_the_loaded_inputs():
    corrected = torch.full((2, 3, 5), math.nan)
    session = _session((torch.zeros(2, 3, dtype=I64), corrected), lm_dtype=F32)
    session.load_inputs(torch.zeros(2, 3, 5), ids(0, 0), None)
    with violation("NaN or"):
        session.replay()
    session.load_inputs(corrected, ids(0, 0), None)
    session.replay()


@pytest.mark.parametrize("counters, message", [
    ({"graph_replays": -1}, "FoldedSession.graph_replays returned -1, expected an int >= 0"),
    ({"graph_replays": 1.0}, "FoldedSession.graph_replays returned float 1.0, expected an int >= 0"),
    ({"sample_block_calls": True}, "FoldedSession.sample_block_calls returned bool True, expected an int >= 0"),
], ids=["negative", "float", "bool"])
def test_S4_session_counters_are_checked(counters, message):
    session = _session(None, **counters)
    with violation(message):
        session.graph_replays, session.sample_block_calls


def test_S4_session_must_be_a_folded_session():
    fails(c.FoldedDraft, "session", object(), "FoldedDraft.session returned object, expected a FoldedSession",
          None, 4, 3, 5, F32, torch.device("cpu"), 0)


def test_S4_gate_and_routing_return_ints_and_bools():
    passes(c.FoldGate, "buffer_bytes", 123, 1, 1, 1, F32)
    passes(c.FoldGate, "folds_sampling", False, "auto", 1, 1, 1, F32, 0)
    passes(c.FoldRouting, "route", (True, False), True, True)
    fails(c.FoldGate, "buffer_bytes", -1, "FoldGate.buffer_bytes returned -1, expected an int >= 0", 1, 1, 1, F32)
    fails(c.FoldGate, "buffer_bytes", 12.0, "returned float 12.0, expected an int >= 0", 1, 1, 1, F32)
    fails(c.FoldGate, "folds_sampling", torch.tensor(True),
          "FoldGate.folds_sampling returned Tensor tensor(True), expected a bool", "auto", 1, 1, 1, F32, 0)
    fails(c.FoldRouting, "route", (True, 1),
          "FoldRouting.route returned eager_accept int 1, expected eager_accept a bool", True, True)
    fails(c.FoldRouting, "route", True, "returned bool, expected a tuple (folded_draft, eager_accept)", True, True)


# ----------------------------------------------------------------------------- S5 verification
DRAFTS = ids(1, 2, 3, 0, 0, 0).reshape(2, 3)  # [B = 2, l = 3]
TARGET = torch.zeros(2, 4, 6)  # V = 6
VERIFY_BROKEN = [
    ((ids(3, 4), ids(1, 2, 3, 0, 5, -1, -1, -1).reshape(2, 4)),
     "ChainVerifier.verify returned accepted int64 [2] with values in [3, 4], expected accepted int64 [2] on cpu "
     "with values in [0, 3]"),
    ((ids(3, 0), ids(1, 2, 3, 6, 5, -1, -1, -1).reshape(2, 4)),
     "returned tokens int64 [2, 4] with ids in [-1, 6], expected tokens int64 [2, 4] on cpu with ids in [-1, 6)"),
    ((ids(3, 0), ids(1, 2, 3, 0, -2, -1, -1, -1).reshape(2, 4)), "with ids in [-2, 3]"),
    ((ids(3, 0), ids(1, 2, 3, 0, 5, -1).reshape(2, 3)), "returned tokens int64 [2, 3], expected tokens int64 [2, 4]"),
    ((ids(3, 0).int(), ids(1, 2, 3, 0, 5, -1, -1, -1).reshape(2, 4)), "returned accepted int32 [2], expected"),
]


@pytest.mark.parametrize("value, message", VERIFY_BROKEN, ids=[
    "accepted-above-l", "id-at-vocab", "below-sentinel", "short-tokens", "int32-accepted",
])
def test_S5_chain_verify_rejects(value, message):
    fails(c.ChainVerifier, "verify", value, message, DRAFTS, TARGET, TARGET[:, :3], torch.ones(2),
          torch.full((2,), 6, dtype=I64), cap=None)


def test_S5_verifiers_pass_padded_results():
    value = (ids(3, 0), ids(1, 2, 3, 0, 5, -1, -1, -1).reshape(2, 4))
    passes(c.ChainVerifier, "verify", value, DRAFTS, TARGET, TARGET[:, :3], torch.ones(2), torch.ones(2, dtype=I64),
           generator=torch.Generator())
    passes(c.GreedyVerifier, "verify_greedy", value, DRAFTS, TARGET, None)
    fails(c.GreedyVerifier, "verify_greedy", (value[0], value[1][:, :2]),
          "GreedyVerifier.verify_greedy returned tokens int64 [2, 2], expected tokens int64 [2, 4]", DRAFTS, TARGET)


# ----------------------------------------------------------------------------- S6 simulated acceptance
@pytest.mark.parametrize("value, message", [
    (0, "SimulatedAcceptance.sample_acc_len returned 0, expected an int in [1, 6]"),
    (7, "returned 7, expected an int in [1, 6]"),
    (3.0, "returned float 3.0, expected an int in [1, 6]"),
    (True, "returned bool True, expected an int in [1, 6]"),
    (torch.tensor(3), "returned Tensor tensor(3), expected an int in [1, 6]"),
], ids=["zero", "above-max-len", "float", "bool", "tensor"])
def test_S6_sample_acc_len_rejects(value, message):
    fails(c.SimulatedAcceptance, "sample_acc_len", value, message, 3.0, "match-expected", 6, torch.Generator())


@pytest.mark.parametrize("value, message", [
    (torch.tensor([1, 6, 7]), "SimulatedAcceptanceBatch.sample_acc_lens returned int64 [3] with values in "
                              "[1, 7], expected int64 [3] on cpu with values in [1, 6]"),
    (torch.tensor([1, 2]), "returned int64 [2]"),
    (torch.tensor([1.0, 2.0, 3.0]), "returned float32 [3]"),
    ([1, 2, 3], "returned list"),
], ids=["above-max-len", "short", "float", "list"])
def test_S6_sample_acc_lens_rejects(value, message):
    fails(c.SimulatedAcceptanceBatch, "sample_acc_lens", value, message, 3.0, "match-expected", 6, 3, torch.Generator())


def test_S6_sample_acc_lens_passes_lengths_in_range():
    lengths = torch.tensor([1, 6, 3])
    passes(c.SimulatedAcceptanceBatch, "sample_acc_lens", lengths, 3.0, "match-expected", 6, 3, torch.Generator())


class FakeExecutor:
    def __init__(self, lengths, correct_drafts, write_drafts=False):
        self.lengths, self.correct_drafts, self.write_drafts = lengths, correct_drafts, write_drafts

    def step(self, draft_tokens):
        if self.write_drafts:  # correct drafts written over the caller's drafts
            draft_tokens[:, 1:] = -1
        return self.lengths


def _executor(lengths, correct_drafts):
    return validating(c.SimulatedAcceptance, Canned(FakeExecutor(lengths, correct_drafts))).executor(
        3.5, "match-expected", 4, 0)


def test_S6_executor_passes_lengths_and_correct_drafts_in_the_drafts_dtype():
    drafts = ids(7, 8, 9, 10, 11, 12, 13, 14).reshape(2, 4).int()
    lengths, correct = ids(1, 5), torch.tensor([[-1, -1, -1, -1], [11, 12, 13, 14]], dtype=torch.int32)
    executor = _executor(lengths, correct)
    assert executor.step(drafts) is lengths and executor.correct_drafts is correct


@pytest.mark.parametrize("lengths, correct, message", [
    (ids(0, 5), None, "SimulatedAcceptance.executor().step returned int64 [2] with values in [0, 5], expected "
     "int64 [2] on cpu with values in [1, 5]"),
    (ids(1, 6), None, "with values in [1, 6], expected"),
    (ids(1, 5), torch.full((2, 4), -2, dtype=I64), "SimulatedAcceptance.executor().correct_drafts returned "
     "int64 [2, 4] with values in [-2, -2], expected int64 [2, 4] on cpu with values in [-1, 14]"),
    (ids(1, 5), torch.zeros(2, 3, dtype=I64), "correct_drafts returned int64 [2, 3], expected int64 [2, 4]"),
], ids=["zero-length", "above-gamma-plus-one", "below-sentinel", "short-gamma"])
def test_S6_executor_rejects(lengths, correct, message):
    executor = _executor(lengths, correct)
    drafts = ids(7, 8, 9, 10, 11, 12, 13, 14).reshape(2, 4)
    with violation(message):
        executor.step(drafts)
        executor.correct_drafts


def test_S6_executor_must_have_a_step():
    fails(c.SimulatedAcceptance, "executor", object(), "SimulatedAcceptance.executor returned object, expected an "
          "object with step(draft_tokens) and correct_drafts", 3.5, "match-expected", 4, 0)


# ----------------------------------------------------------------------------- S7 confidence
HIDDEN = torch.zeros(3, 5, 2)  # [B, gamma, d]


@pytest.mark.parametrize("value, message", [
    (torch.full((3, 5), 0.5).double().add(0.6), "Confidence.confidences returned float64 [3, 5] with values in "
     "[1.1, 1.1], expected a floating dtype [3, 5] on cpu with values in [0, 1]"),
    (_nan_at_one(torch.full((3, 5), 0.5)), "returned float32 [3, 5] with NaN at 1 of 15 entries"),
    (torch.full((3, 7), 0.5), "returned float32 [3, 7], expected a floating dtype [3, 5]"),
    (torch.ones(3, 5, dtype=I64), "returned int64 [3, 5], expected a floating dtype [3, 5]"),
], ids=["above-one", "nan", "checkpoint-gamma", "int64"])
def test_S7_confidences_reject(value, message):
    fails(c.Confidence, "confidences", value, message, {}, HIDDEN, None, None, checkpoint_gamma=7)


def test_S7_confidence_outputs_pass_in_range():
    passes(c.Confidence, "confidences", torch.full((3, 5), 1.0), {}, HIDDEN, None, None, checkpoint_gamma=5)
    survival = torch.zeros(2, 3, 5, dtype=torch.float64)
    passes(c.Confidence, "prefix_survival", survival, survival.clone())
    passes(c.Confidence, "fit_sts", torch.tensor([0.05, 20.0]), torch.zeros(8, 2), torch.ones(8, 2, dtype=torch.bool))
    fails(c.Confidence, "prefix_survival", survival[0], "Confidence.prefix_survival returned float64 [3, 5], "
          "expected a floating dtype [2, 3, 5]", survival)


@pytest.mark.parametrize("value, message", [
    (torch.tensor([1.0, 0.0]), "Confidence.fit_sts returned float32 [2] with 1 of 2 entries not finite and > 0, e.g. "
     "0.0, expected a floating dtype [2] on cpu with finite values > 0"),
    (torch.tensor([math.inf, 1.0]), "with 1 of 2 entries not finite and > 0, e.g. inf"),
    (torch.tensor([math.nan, -1.0]), "with 2 of 2 entries not finite and > 0, e.g. nan"),
    (torch.ones(2, device=META), "returned float32 [2] on meta, expected a floating dtype [2] on cpu"),
    (torch.ones(3), "returned float32 [3], expected a floating dtype [2]"),
], ids=["zero", "inf", "nan-and-negative", "device", "long"])
def test_S7_fit_sts_rejects(value, message):
    fails(c.Confidence, "fit_sts", value, message, torch.zeros(8, 2), torch.ones(8, 2, dtype=torch.bool))


# ----------------------------------------------------------------------------- S8 scheduler
@pytest.mark.parametrize("value, message", [
    (ids(0, 4), "PrefixScheduler.schedule returned int64 [2] with values in [0, 4], expected int64 [2] on cpu "
     "with values in [0, 3]"),
    (ids(-1, 2), "with values in [-1, 2]"),
    (torch.zeros(2), "returned float32 [2], expected int64 [2]"),
], ids=["above-gamma", "negative", "float"])
def test_S8_schedule_rejects(value, message):
    fails(c.PrefixScheduler, "schedule", value, message, torch.full((2, 3), 0.5, dtype=torch.float64), [1.0])


def test_S8_schedule_passes_lengths_up_to_gamma():
    passes(c.PrefixScheduler, "schedule", ids(0, 3), torch.full((2, 3), 0.5, dtype=torch.float64), [1.0])


def test_S6_simulated_bonus_rejects_ids_outside_the_vocabulary():
    logits = torch.zeros(2, 3, 4)
    args = (logits, ids(0, 2), torch.zeros(2), torch.Generator())
    fails(c.SimulatedBonus, "simulated_bonus", ids(0, 4), "with ids in [0, 4], expected int64 [2] on cpu with ids in [0, 4)",
          *args)
    passes(c.SimulatedBonus, "simulated_bonus", ids(3, 0), *args)


def _production_call():
    conf = torch.full((2, 3), 0.5, dtype=torch.float64)
    return conf, conf, [1.0] * 8, torch.tensor([1, 0]), torch.tensor([2, 3])


@pytest.mark.parametrize("value, message", [
    (torch.tensor([0, 1]), "ProductionScheduler.schedule_production returned int64 [2] with values [0, 1], "
     "expected int64 [2] on cpu with values in [min_lengths, max_lengths] = [(1, 2), (0, 3)]"),
    (torch.tensor([3, 1]), "with values [3, 1]"),
    (torch.tensor([1.0, 1.0]), "returned float32 [2], expected int64 [2]"),
], ids=["below-min", "above-max", "float"])
def test_S8_schedule_production_rejects(value, message):
    fails(c.ProductionScheduler, "schedule_production", value, message, *_production_call())


def test_S8_schedule_production_passes_lengths_within_bounds():
    passes(c.ProductionScheduler, "schedule_production", torch.tensor([2, 0]), *_production_call())


# ----------------------------------------------------------------------------- S9 loop
class Model:
    vocab_size, gamma = 6, 3


LOOP_ARGS = (Model(), Model(), torch.zeros(2, 4, dtype=I64), 5, 1.0, torch.Generator())
TAUS = ids(4, 1, 0, 2, 2, 1).reshape(2, 3)
LENGTHS = ids(3, 3, 0, 3, 3, 1).reshape(2, 3)


@pytest.mark.parametrize("value, message", [
    ((torch.full((2, 5), 6, dtype=I64), TAUS, LENGTHS), "SpeculativeLoop.generate returned tokens int64 [2, 5] with "
     "ids in [6, 6], expected tokens int64 [2, 5] on cpu with ids in [0, 6)"),
    ((torch.zeros(2, 4, dtype=I64), TAUS, LENGTHS), "returned tokens int64 [2, 4], expected tokens int64 [2, 5]"),
    ((torch.zeros(2, 5, dtype=I64), TAUS + 1, LENGTHS), "returned accept_lengths int64 [2, 3] with values in [1, 5], "
     "expected accept_lengths int64 [2, rounds] on cpu with values in [0, 4]"),
    ((torch.zeros(2, 5, dtype=I64), TAUS, LENGTHS[:, :2]), "returned verify_lengths int64 [2, 2], expected "
     "verify_lengths int64 [2, 3]"),
    ((torch.zeros(2, 5, dtype=I64), TAUS), "returned tuple of 2, expected a tuple (tokens, accept_lengths, "
     "verify_lengths)"),
], ids=["id-at-vocab", "short-tokens", "tau-above-gamma-plus-one", "rounds-differ", "two-outputs"])
def test_S9_generate_rejects(value, message):
    fails(c.SpeculativeLoop, "generate", value, message, *LOOP_ARGS)


def test_S9_generate_bounds_lengths_by_the_gamma_in_use():
    value = (torch.zeros(2, 5, dtype=I64), TAUS.clamp(max=3), LENGTHS)
    passes(c.SpeculativeLoop, "generate", value, *LOOP_ARGS)
    fails(c.SpeculativeLoop, "generate", value,
          "returned verify_lengths int64 [2, 3] with values in [0, 3], expected verify_lengths int64 [2, 3] on cpu "
          "with values in [0, 2]", *LOOP_ARGS, gamma=2)


RECORD = (torch.zeros(2, 5, dtype=I64), TAUS.clamp(max=3), LENGTHS, torch.zeros(2, 3, 3, dtype=I64),
          torch.full((2, 3, 3), 0.5, dtype=torch.float64))


@pytest.mark.parametrize("value, message", [
    (RECORD[:3] + (torch.full((2, 3, 3), 6, dtype=I64), RECORD[4]), "SpeculativeLoopRecord.generate_recorded "
     "returned draft_tokens int64 [2, 3, 3] with ids in [6, 6], expected draft_tokens int64 [2, 3, 3] on cpu with "
     "ids in [0, 6)"),
    (RECORD[:4] + (torch.full((2, 3, 3), 1.5, dtype=torch.float64),), "returned confidences float64 [2, 3, 3] with "
     "values in [1.5, 1.5], expected confidences a floating dtype [2, 3, 3] on cpu with values in [0, 1]"),
    (RECORD[:4] + (torch.full((2, 2, 3), 0.5),), "returned confidences float32 [2, 2, 3], expected confidences a "
     "floating dtype [2, 3, 3]"),
    (RECORD[:3], "returned tuple of 3, expected a tuple (tokens, accept_lengths, verify_lengths, draft_tokens, "
     "confidences)"),
], ids=["draft-id-at-vocab", "confidence-above-1", "rounds-differ", "three-outputs"])
def test_S9_generate_recorded_rejects(value, message):
    fails(c.SpeculativeLoopRecord, "generate_recorded", value, message, *LOOP_ARGS, sps=lambda b: 1.0)


def test_S9_generate_recorded_passes_a_well_formed_record():
    passes(c.SpeculativeLoopRecord, "generate_recorded", RECORD, *LOOP_ARGS, sps=lambda b: 1.0)


# ----------------------------------------------------------------------------- S5 inputs unchanged
class WritesInPlace:
    """A toy adapter object: each method writes into one of its arguments, then returns a
    value in canonical form (so only the input check can fail it)."""

    def sample_truncated(self, logits, temperatures, top_k, top_p, min_p, generator):
        logits.div_(temperatures[:, None])  # tempered in place
        return ids(*[0] * logits.shape[0])

    def draft_block(self, head_type, state_dict, base_logits, first_prev, hidden, temperatures, top_k, generator, *,
                    layout, vocab_size, d2t):
        state_dict["W2.weight"][1, 0] = 7.0
        rows, gamma, _ = base_logits.shape
        return torch.zeros(rows, gamma, dtype=I64), torch.zeros(rows, gamma, vocab_size)

    def generate(self, target, draft, prompt, max_new_tokens, temperature, generator, *, gamma=None, sps=None):
        target.to(torch.bfloat16)  # nn.Module.to converts the caller's model in place
        rows = prompt.shape[0]
        return torch.zeros(rows, max_new_tokens, dtype=I64), ids(1, 1)[None].expand(rows, 2), \
            torch.zeros(rows, 2, dtype=I64)

    def executor(self, value, method, gamma, seed):
        return FakeExecutor(ids(1, 1), None, write_drafts=True)


class TinyModel(torch.nn.Module):
    vocab_size, gamma = 6, 3

    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(6, 2)


def test_S5_an_input_written_in_place_fails_naming_capability_method_argument_and_first_change():
    logits = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    temps = torch.tensor([1.0, 2.0])  # row 0 unchanged: the first change is at [1, 0]
    with violation("TruncatedStepSampler.sample_truncated changed its argument logits in place (SPEC S5: inputs "
                   "stay unchanged): first change at [1, 0]: 4.0 -> 2.0 (3 of 6 elements differ)"):
        validating(c.TruncatedStepSampler, WritesInPlace()).sample_truncated(
            logits, temps, ids(3, 3), torch.ones(2), torch.zeros(2), torch.Generator())


def test_S5_a_tensor_passed_by_keyword_after_plain_arguments_is_checked():
    """The calls whose arguments are all plain values (no tensor to check) skip the clone; a
    tensor among the keywords still gets it."""

    class WritesItsKeyword:
        def scale(self, factor, *, values):
            values.mul_(factor)
            return None

    with violation("Toy.scale changed its argument values in place (SPEC S5: inputs stay unchanged): first change at "
                   "[0]: 1.0 -> 2.0"):
        _Forwarding(WritesItsKeyword(), "Toy").scale(2.0, values=torch.ones(3))


def test_S5_a_tensor_inside_an_argument_is_checked_and_named_by_its_path():
    state = {"W1.weight": torch.zeros(5, 2), "W2.weight": torch.zeros(5, 2)}
    with violation("DraftLayouts.draft_block changed its argument state_dict['W2.weight'] in place (SPEC S5: inputs "
                   "stay unchanged): first change at [1, 0]: 0.0 -> 7.0 (1 of 10 elements differ)"):
        validating(c.DraftLayouts, WritesInPlace()).draft_block(
            "vanilla", state, torch.zeros(2, 3, 5), ids(0, 1), None, torch.ones(2), ids(5, 5), torch.Generator(),
            layout="anchor-first", vocab_size=5, d2t=None)

    class PopsAWeight(WritesInPlace):
        def draft_block(self, head_type, state_dict, base_logits, *args, vocab_size, **kwargs):
            state_dict.pop("W1.weight")  # the container is walked again after the call
            rows, gamma, _ = base_logits.shape
            return torch.zeros(rows, gamma, dtype=I64), torch.zeros(rows, gamma, vocab_size)

    with violation("DraftLayouts.draft_block changed its argument state_dict['W1.weight'] in place (SPEC S5: inputs "
                   "stay unchanged): the tensor is gone"):
        validating(c.DraftLayouts, PopsAWeight()).draft_block(
            "vanilla", dict(state), torch.zeros(2, 3, 5), ids(0, 1), None, torch.ones(2), ids(5, 5),
            torch.Generator(), layout="anchor-first", vocab_size=5, d2t=None)
    with violation("SpeculativeLoop.generate changed its argument target.embed.weight in place (SPEC S5: inputs stay "
                   "unchanged): float32 [6, 2] on cpu became bfloat16 [6, 2] on cpu"):
        validating(c.SpeculativeLoop, WritesInPlace()).generate(TinyModel(), TinyModel(), torch.zeros(2, 4, dtype=I64),
                                                               5, 1.0, torch.Generator())
    executor = validating(c.SimulatedAcceptance, WritesInPlace()).executor(1.5, "match-expected", 4, 0)
    with violation("SimulatedAcceptance.executor().step changed its argument draft_tokens in place (SPEC S5: inputs "
                   "stay unchanged): first change at [0, 1]: 8 -> -1 (6 of 8 elements differ)"):
        executor.step(ids(7, 8, 9, 10, 11, 12, 13, 14).reshape(2, 4))


def test_S5_a_nan_that_stays_nan_is_unchanged_a_nan_written_over_a_value_is_not():
    class RewritesNaN:
        def sample_with_noise(self, logits, temperatures, top_k, noise):
            logits.copy_(torch.where(torch.isnan(logits), -logits, noise))  # -NaN over NaN; noise over the rest
            return ids(0, 0)

    sampler = validating(c.NoiseStepSampler, RewritesNaN())
    logits = torch.tensor([[math.nan, 1.0], [2.0, math.nan]])
    sampler.sample_with_noise(logits, torch.ones(2), ids(2, 2), logits.nan_to_num(nan=0.0))  # unchanged
    with violation("NoiseStepSampler.sample_with_noise changed its argument logits in place (SPEC S5: inputs stay "
                   "unchanged): first change at [0, 1]: 1.0 -> nan (2 of 4 elements differ)"):
        sampler.sample_with_noise(logits, torch.ones(2), ids(2, 2), torch.full((2, 2), math.nan))


def test_S5_a_method_s_input_checks_are_settled_before_it_returns_or_raises():
    """Input checks wait for the method's first read of an output's values; they are judged
    first (a changed input outranks a bad output), and none is left for a later call."""
    import conformance.boundary as boundary

    class Session(FakeSession):
        def load_inputs(self, base_logits, first_prev, hidden):  # returns nothing: no output to read with
            base_logits.fill_(3.0)

    session = validating(c.FoldedDraft, Canned(Session(None))).session(None, 4, 3, 5, F32, torch.device("cpu"), 0)
    base = torch.zeros(2, 3, 5)
    with violation("FoldedSession.load_inputs changed its argument base_logits in place"):
        session.load_inputs(base, ids(0, 1), None)
    assert boundary._PENDING.calls == [] and boundary._PENDING.depth == 0

    class WritesAndReturnsFloats:
        def sample_with_noise(self, logits, temperatures, top_k, noise):
            noise.zero_()
            return torch.zeros(2)  # float ids: the output's form is wrong too

    with violation("NoiseStepSampler.sample_with_noise changed its argument noise in place"):
        validating(c.NoiseStepSampler, WritesAndReturnsFloats()).sample_with_noise(
            torch.zeros(2, 3), torch.ones(2), ids(3, 3), torch.ones(2, 3))
    assert boundary._PENDING.calls == [] and boundary._PENDING.depth == 0
    with violation("NoiseStepSampler.sample_with_noise returned float32 [2], expected int64 [2]"):
        validating(c.NoiseStepSampler, Canned(torch.zeros(2))).sample_with_noise(
            torch.zeros(2, 3), torch.ones(2), ids(3, 3), torch.ones(2, 3))
    # An adapter's own object called outside any validating method checks its inputs at once.
    class Steps:
        def step(self, draft_tokens):
            draft_tokens.add_(1)

    with violation("Executor.step changed its argument draft_tokens in place"):
        boundary._Forwarding(Steps(), "Executor").step(ids(1, 2, 3, 4).reshape(1, 4))
    assert boundary._PENDING.calls == []


@pytest.mark.gpu
@pytest.mark.parametrize("host_copies", [True, False], ids=["host-copies", "counted-on-the-device"])
def test_S5_cuda_inputs_are_checked_with_one_read_back_as_on_the_cpu(host_copies, monkeypatch):
    """On CUDA the unchanged-inputs test of all a call's tensors is read back at once, compared
    on host copies (tensors of at most HOST_COPY_ELEMENTS) or counted on the device; what it
    passes and flags is the CPU's either way: a NaN that stays NaN passes, a value written over
    fails naming its first change, a tensor that changes dtype fails; output ids out of range too."""
    import conformance.boundary as boundary

    monkeypatch.setattr(boundary, "HOST_COPY_ELEMENTS", boundary.HOST_COPY_ELEMENTS if host_copies else 0)
    cuda = torch.device("cuda")

    class Writes:
        def __init__(self, how):
            self.how = how

        def sample_with_noise(self, logits, temperatures, top_k, noise):
            if self.how is None:  # writes nothing, returns an id out of range
                return ids(0, 2).to(cuda)
            self.how(logits, noise)
            return ids(0, 1).to(cuda)

    logits = torch.tensor([[math.nan, 1.0], [2.0, math.nan]], device=cuda)
    args = (torch.ones(2, device=cuda), ids(2, 2).to(cuda), logits.nan_to_num(nan=0.0))
    validating(c.NoiseStepSampler, Writes(lambda x, n: x.copy_(torch.where(torch.isnan(x), -x, x)))
               ).sample_with_noise(logits, *args)  # unchanged: -NaN over NaN
    with violation("NoiseStepSampler.sample_with_noise changed its argument logits in place (SPEC S5: inputs stay "
                   "unchanged): first change at [1, 0]: 2.0 -> 5.0 (1 of 4 elements differ)"):
        validating(c.NoiseStepSampler, Writes(lambda x, n: x[1, 0].fill_(5.0))).sample_with_noise(logits, *args)
    noise = torch.zeros(2, 2, device=cuda)
    with violation("changed its argument noise in place (SPEC S5: inputs stay unchanged): first change at [0, 1]"):
        validating(c.NoiseStepSampler, Writes(lambda x, n: n[0, 1].fill_(1.0))).sample_with_noise(
            torch.zeros(2, 2, device=cuda), *args[:2], noise)
    with violation("NoiseStepSampler.sample_with_noise returned int64 [2] with ids in [0, 2], expected int64 [2] on "
                   "cuda:0 with ids in [0, 2)"):
        validating(c.NoiseStepSampler, Writes(None)).sample_with_noise(torch.zeros(2, 2, device=cuda), *args)

    def becomes_float64(x, n):
        x.data = x.data.double()

    with violation("changed its argument logits in place (SPEC S5: inputs stay unchanged): float32 [2, 2] on cuda:0 "
                   "became float64 [2, 2] on cuda:0"):
        validating(c.NoiseStepSampler, Writes(becomes_float64)).sample_with_noise(torch.zeros(2, 2, device=cuda), *args)
    lengths = torch.tensor([0, 3], device=cuda)  # SPEC S8 lengths in [0, gamma]: extremes read from a copy or reduced
    with violation("PrefixScheduler.schedule returned int64 [2] with values in [0, 3], expected int64 [2] on cuda:0 "
                   "with values in [0, 2]"):
        validating(c.PrefixScheduler, Canned(lengths)).schedule(torch.ones(2, 2, dtype=torch.float64, device=cuda),
                                                               [1.0] * 5)


# ----------------------------------------------------------------------------- deferred checks
DEVICES = [pytest.param("cpu", id="cpu"),
           pytest.param("cuda", id="cuda-host-copies", marks=pytest.mark.gpu),
           pytest.param("cuda-counted", id="cuda-counted-on-the-device", marks=pytest.mark.gpu)]


def _deferred_device(name: str, monkeypatch) -> torch.device:
    """The device of a deferred-checks test; ``cuda-counted``: CUDA with no host copies; ``cpu``:
    CPU tensors' checks queued as CUDA ones are (a block checks them as each call returns)."""
    import conformance.boundary as boundary

    if name == "cuda-counted":
        monkeypatch.setattr(boundary, "HOST_COPY_ELEMENTS", 0)
    if name == "cpu":
        monkeypatch.setattr(boundary, "_deferring", lambda tensors: boundary._DEFERRED.checks is not None)
    return torch.empty(0, device=name.removesuffix("-counted")).device  # as its tensors name it: cuda:0, not cuda


class Scheduler:
    """A PrefixScheduler returning ``lengths[i]`` at its ``i``-th call; ``writes[i]`` (if any)
    writes into the confidences at that call."""

    def __init__(self, lengths, writes=None):
        self.lengths, self.writes, self.calls = lengths, writes or {}, 0

    def schedule(self, confidences, sps):
        write = self.writes.get(self.calls)
        if write is not None:
            write(confidences)
        self.calls += 1
        return self.lengths[self.calls - 1]


@pytest.mark.parametrize("device", DEVICES)
def test_deferred_checks_judge_every_call_as_outside_a_block_and_name_the_call(device, monkeypatch):
    """In a deferred_checks block each call's checks are those outside it: a value out of range
    or an input written in place fails when the block ends, with the message it has outside and
    the number of the first failing call; a NaN that stays NaN is unchanged; a wrong form fails
    at once. Nothing fails inside the block before it reads back."""
    from conformance.boundary import deferred_checks

    device = _deferred_device(device, monkeypatch)
    good, bad = torch.tensor([1], device=device), torch.tensor([3], device=device)
    confidences = torch.tensor([[0.5, math.nan]], dtype=torch.float64, device=device)
    renan = {1: lambda x: x.copy_(torch.where(torch.isnan(x), -x, x))}  # -NaN over NaN: unchanged
    scheduler = validating(c.PrefixScheduler, Scheduler([good, good, bad, good, bad], renan))
    with violation(f"PrefixScheduler.schedule returned int64 [1] with values in [3, 3], expected int64 [1] on "
                   f"{device} with values in [0, 2] (call 3 of a deferred_checks block)"):
        with deferred_checks():
            outs = [scheduler.schedule(confidences, [1.0, 0.5, 0.45]) for _ in range(5)]
            assert outs[2] is bad  # returned as is: judged when the block reads back
    writes = {3: lambda x: x[0, 0].fill_(0.25)}
    scheduler = validating(c.PrefixScheduler, Scheduler([good] * 5 + [bad], writes))
    with violation("PrefixScheduler.schedule changed its argument confidences in place (SPEC S5: inputs stay "
                   "unchanged): first change at [0, 0]: 0.5 -> 0.25 (1 of 2 elements differ) (call 4 of a "
                   "deferred_checks block)"):
        with deferred_checks():
            for _ in range(6):
                scheduler.schedule(confidences.clone(), [1.0, 0.5, 0.45])
    float_lengths = validating(c.PrefixScheduler, Scheduler([good, good.double()]))
    with deferred_checks():
        float_lengths.schedule(confidences, [1.0, 0.5, 0.45])
        with violation("PrefixScheduler.schedule returned float64 [1], expected int64 [1]"):
            float_lengths.schedule(confidences, [1.0, 0.5, 0.45])


@pytest.mark.parametrize("device", DEVICES)
def test_deferred_checks_read_back_once_per_batch_of_checks(device, monkeypatch):
    """A block of executor steps reads its checks back every DEFERRED_CHECKS_PER_READ checks
    and at its end, never per call; a violation found at a read within the block is raised
    there, naming its call."""
    import conformance.boundary as boundary
    from conformance.boundary import deferred_checks

    device = _deferred_device(device, monkeypatch)
    reads, read_back = [], boundary._read_back
    monkeypatch.setattr(boundary, "_read_back", lambda values: reads.append(len(values)) or read_back(values))
    synchronized, synchronize = [], torch.cuda.Stream.synchronize
    monkeypatch.setattr(torch.cuda.Stream, "synchronize", lambda self: synchronized.append(self) or synchronize(self))
    monkeypatch.setattr(boundary, "DEFERRED_CHECKS_PER_READ", 10)  # a step queues two: its input and its output
    lengths = [torch.tensor([2, 5], device=device)] * 12 + [torch.tensor([2, 6], device=device)] * 20
    executor = validating(c.SimulatedAcceptance, Canned(FakeExecutor(None, None))).executor(3.5, "match-expected",
                                                                                            4, 0)
    executor._impl._impl.step = lambda drafts: lengths.pop(0)
    drafts = torch.arange(8, device=device).reshape(2, 4)
    with deferred_checks():
        for _ in range(12):
            executor.step(drafts)
    assert len(reads) <= 3 and len(synchronized) <= 3, (reads, synchronized)  # at steps 5 and 10, and the end
    reads.clear()
    synchronized.clear()
    with violation("expected int64 [2] on " + str(device) + " with values in [1, 5] (call 1 of a deferred_checks"):
        with deferred_checks():
            for step in range(20):
                executor.step(drafts)
    assert step == 4  # raised at the first read, after the fifth step
    assert boundary._DEFERRED.checks is None and boundary._PENDING.calls == []


def test_a_deferred_block_checks_cpu_tensors_as_each_call_returns():
    from conformance.boundary import deferred_checks

    scheduler = validating(c.PrefixScheduler, Scheduler([ids(1), ids(3), ids(1)]))
    with deferred_checks():
        scheduler.schedule(torch.zeros(1, 2, dtype=torch.float64), [1.0, 0.5, 0.45])
        with violation("PrefixScheduler.schedule returned int64 [1] with values in [3, 3], expected int64 [1] on cpu "
                       "with values in [0, 2]"):
            scheduler.schedule(torch.zeros(1, 2, dtype=torch.float64), [1.0, 0.5, 0.45])


def test_a_violation_in_a_deferred_block_outranks_the_exception_that_left_it(monkeypatch):
    from conformance.boundary import deferred_checks

    _deferred_device("cpu", monkeypatch)
    scheduler = validating(c.PrefixScheduler, Scheduler([ids(3)]))
    with violation("(call 1 of a deferred_checks block)") as raised:
        with deferred_checks():
            scheduler.schedule(torch.zeros(1, 2, dtype=torch.float64), [1.0, 0.5, 0.45])
            raise KeyError("the test's own error")
    assert isinstance(raised.value.__context__, KeyError)
    with pytest.raises(KeyError):  # no violation: the block's own exception leaves it
        with deferred_checks():
            raise KeyError("the test's own error")


class WritesItsOwnBuffers(FakeSession):
    """A FoldedSession that copies its inputs into static buffers and overwrites ``out`` /
    ``corrected_out`` on every replay (SPEC S4), views of which the caller still holds."""

    def __init__(self):
        super().__init__(None)
        self.buffers = (torch.zeros(4, 3, dtype=I64), torch.zeros(4, 3, 5))
        self.bs = 4

    def load_inputs(self, base_logits, first_prev, hidden):
        self.bs = base_logits.shape[0]
        self.buffers[1][: self.bs].copy_(base_logits)

    def replay(self):
        self.buffers[0].add_(1)
        self.buffers[1].add_(1.0)
        return tuple(b[: self.bs] for b in self.buffers)


def test_S5_writes_into_the_iut_s_own_buffers_and_handles_are_not_flagged():
    session = validating(c.FoldedDraft, Canned(WritesItsOwnBuffers())).session(None, 4, 3, 5, F32,
                                                                               torch.device("cpu"), 0)
    base = torch.zeros(2, 3, 5)
    session.load_inputs(base, ids(0, 1), None)
    held = session.replay()
    again = session.replay()  # overwrote ``held`` (an output of the previous call, not an argument)
    assert again[0].data_ptr() == held[0].data_ptr() and int(held[0][0, 0]) == 2
    assert torch.equal(base, torch.zeros(2, 3, 5))

    class ReusedBuffer:  # SPEC S6: correct drafts written into a reused buffer
        buffer = torch.zeros(2, 4, dtype=I64)

        def step(self, draft_tokens):
            self.buffer.copy_(draft_tokens.masked_fill(torch.arange(4) > 0, -1))
            return ids(2, 2)

        @property
        def correct_drafts(self):
            return self.buffer

    executor = validating(c.SimulatedAcceptance, Canned(ReusedBuffer())).executor(2.0, "match-expected", 4, 0)
    executor.step(ids(7, 8, 9, 10, 11, 12, 13, 14).reshape(2, 4))
    executor.step(ids(1, 2, 3, 4, 5, 6, 7, 8).reshape(2, 4))

    class KeepsStateInItsHead:  # an opaque handle (SPEC: the IUT's own) may change
        def apply_block_logits(self, head, base_logits, token_ids, hidden):
            head["calls"] += 1
            return base_logits.clone()

    head = {"calls": torch.zeros(())}
    validating(c.MarkovBlock, KeepsStateInItsHead()).apply_block_logits(head, BASE, TOKENS, None)
    assert int(head["calls"]) == 1


def test_S5_inputs_are_not_checked_while_a_cuda_graph_is_being_captured(monkeypatch):
    import conformance.boundary as boundary

    monkeypatch.setattr(boundary, "_capturing", lambda tensors: True)
    logits = torch.ones(2, 3)
    validating(c.TruncatedStepSampler, WritesInPlace()).sample_truncated(
        logits, torch.full((2,), 2.0), ids(3, 3), torch.ones(2), torch.zeros(2), torch.Generator())
    assert torch.equal(logits, torch.full((2, 3), 0.5))  # written, and not checked (a clone would be recorded)


# ----------------------------------------------------------------------------- end to end
def test_S3_law_case_names_a_float_step_sampler_one_row_too_long(tmp_path):
    """Issue 12: through the main job, a StepSampler returning float ids one row too long
    fails the S3 law case with the boundary's message (not bincount's NotImplementedError)."""
    cmd = [sys.executable, "-m", "conformance.cli", "run", "--workers", "0", "--report", str(tmp_path),
           "--impl", "tests.toy_adapters:float_long_step_sampler", "-k", "test_S3_law and flat-T2"]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    (record,) = json.loads((tmp_path / "results.json").read_text())["tests"]
    assert record["outcome"] == "failed"
    assert record["failure"] == {"type": "BoundaryViolation", "suite_bug": False, "out_of_memory": False}
    found = re.search(r"StepSampler\.sample returned float32 \[(\d+)\], expected int64 \[(\d+)\] on cpu "
                      r"with ids in \[0, 8\)", record["reason"])
    assert found and int(found[1]) == int(found[2]) + 1, record["reason"]
