"""Small adapters used by tests/test_cli.py (the plugin and the main job),
tests/test_numerics.py (the two SPEC S0 levels), tests/test_boundary.py (broken return
values) and tests/test_tensor_parallel.py (rank processes that hang, die or raise)."""

import copy
import os
import time

import torch

from conformance import contract as c
from conformance.adapters import reference
from dspark_ref import markov


class _InconclusiveSimulated(reference.SimulatedAcceptance):
    """Pretends its verify-step path never ran (e.g. a benchmark mode that was not enabled)."""

    def executor(self, value, method, gamma, seed):
        raise c.Inconclusive("simulated verify step is disabled in this build")


class _NoCudaSimulated(reference.SimulatedAcceptance):
    """Its verify-step path needs a CUDA device this machine lacks (e.g. the engine probes
    the current CUDA device): the run must report a skip saying so, not INCONCLUSIVE."""

    def executor(self, value, method, gamma, seed):
        raise c.CannotRunHere("the executor calls torch.cuda.current_device(); no CUDA device here")


class _NoMultinomial(reference.SimulatedAcceptance):
    """Lacks one feature of a capability it offers (an unsupported method): raises
    ``NotImplementedError`` for it, which the run must report as a skip naming it."""

    def sample_acc_len(self, value, method, max_len, generator):
        if method == "multinomial":
            raise NotImplementedError("no multinomial method here")
        return super().sample_acc_len(value, method, max_len, generator)


def batched_simulated() -> c.Adapter:
    """The reference's simulated acceptance plus its vectorised batch (not offered by the
    reference adapter itself): the S6 law cases draw through the batch and pass."""
    return c.Adapter("toy:batched-simulated", c.Conventions(),
                     {c.SimulatedAcceptance: reference.SimulatedAcceptance(),
                      c.SimulatedAcceptanceBatch: reference.SimulatedAcceptanceBatch()})


def no_multinomial() -> c.Adapter:
    return c.Adapter("toy:no-multinomial", c.Conventions(), {c.SimulatedAcceptance: _NoMultinomial()})


def only_simulated() -> c.Adapter:
    """Offers one capability; every other test must skip naming its capability."""
    return c.Adapter("toy:only-simulated", c.Conventions(), {c.SimulatedAcceptance: reference.SimulatedAcceptance()})


def inconclusive() -> c.Adapter:
    return c.Adapter("toy:inconclusive", c.Conventions(), {c.SimulatedAcceptance: _InconclusiveSimulated()})


def no_cuda_device() -> c.Adapter:
    return c.Adapter("toy:no-cuda-device", c.Conventions(), {c.SimulatedAcceptance: _NoCudaSimulated()})


def unmatched_ledger() -> c.Adapter:
    return c.Adapter(
        "toy:unmatched-ledger", c.Conventions(), {c.SimulatedAcceptance: reference.SimulatedAcceptance()},
        expected_failures=(c.ExpectedFailure("test_S6_does_not_exist", "S6", "stale entry"),),
    )


def cuda_only_confidence() -> c.Adapter:
    """Simulated acceptance everywhere, the confidence head declared CUDA-only: on CPU the S7
    cases must skip with the declared reason, and S6 still runs."""
    return c.Adapter(
        "toy:cuda-only-confidence", c.Conventions(),
        {c.SimulatedAcceptance: reference.SimulatedAcceptance(), c.Confidence: reference.Confidence()},
        requirements={c.Confidence: c.Requirement(devices=("cuda",), reason="toy kernel")},
    )


def cuda_build_confidence() -> c.Adapter:
    """The confidence head declared to need a CUDA build of torch (any test device)."""
    return c.Adapter(
        "toy:cuda-build-confidence", c.Conventions(), {c.Confidence: reference.Confidence()},
        requirements={c.Confidence: c.Requirement(cuda_build=True, reason="toy capture query")},
    )


def failing_with_met_requirement() -> c.Adapter:
    """A known-bug simulated acceptance whose requirement is met everywhere: it must fail,
    never skip."""
    from conformance.loading import load_adapter

    mutant = load_adapter("mutant:simulated-rounded-once")
    return mutant.replace(
        name="toy:failing-met-requirement",
        requirements={c.SimulatedAcceptance: c.Requirement(devices=("cpu", "cuda"), reason="met")},
    )


class _Float64TeacherForcing(reference.MarkovBlock):
    """Teacher forcing accumulated in float64 and rounded once to float32: the same
    arithmetic as the reference's float32 step-by-step adds in another precision (SPEC S0)."""

    @torch.no_grad()
    def apply_block_logits(self, head, base_logits, token_ids, hidden):
        wide = copy.deepcopy(head).double()
        hidden = None if hidden is None else hidden.double()
        return markov.apply_block_logits(wide, base_logits.double(), token_ids, hidden).float()


class _Float32Survival(reference.Confidence):
    """Prefix survival as a float32 cumulative product, whatever the input dtype (as SGLang's
    ``compute_sort_survival``)."""

    def prefix_survival(self, confidences):
        return torch.cumprod(confidences.float(), dim=-1)


def reordered() -> c.Adapter:
    """The reference with float64 teacher forcing and float32 survival: conformant, not
    bit-identical (SPEC S0)."""
    return reference.make_adapter().replace(
        name="toy:reordered", capabilities={c.MarkovBlock: _Float64TeacherForcing(), c.Confidence: _Float32Survival()},
    )


class _FloatLongStepSampler(reference.StepSampler):
    """Returns its ids as float32, one row too many (the broken adapter of issue 12)."""

    def sample(self, logits, temperatures, top_k, vocab_size, generator):
        tokens = super().sample(logits, temperatures, top_k, vocab_size, generator)
        return torch.cat([tokens, tokens[:1]]).float()


def float_long_step_sampler() -> c.Adapter:
    """Its StepSampler breaks the contract: the boundary must name what came back."""
    return c.Adapter("toy:float-long-step-sampler", c.Conventions(), {c.StepSampler: _FloatLongStepSampler()})


class _LosesTheCudaContext(reference.SimulatedAcceptance):
    """Raises what a kernel's out-of-bounds access leaves behind (the error text torch gives
    for it), as if the context were lost, on every call."""

    def sample_acc_len(self, value, method, max_len, generator):
        raise RuntimeError("CUDA error: an illegal memory access was encountered")


def loses_the_cuda_context() -> c.Adapter:
    """Every S6 simulated-acceptance call loses the CUDA context; the ledger expects the
    match-expected law case to fail (a finding), which the crash must not satisfy."""
    return c.Adapter(
        "toy:loses-the-cuda-context", c.Conventions(), {c.SimulatedAcceptance: _LosesTheCudaContext()},
        expected_failures=(c.ExpectedFailure("test_S6_match_expected_law", "S6", "a finding", ("cpu",)),),
    )


def loses_the_cuda_context_as_declared() -> c.Adapter:
    """As :func:`loses_the_cuda_context`, with the ledger entry declaring the lost context
    (``loses_cuda_context``): that case is then the expected failure it says."""
    return c.Adapter(
        "toy:loses-the-cuda-context-declared", c.Conventions(), {c.SimulatedAcceptance: _LosesTheCudaContext()},
        expected_failures=(c.ExpectedFailure("test_S6_match_expected_law", "S6", "a finding", ("cpu",),
                                             loses_cuda_context=True),),
    )


def unavailable_confidence() -> c.Adapter:
    """Simulated acceptance offered; the confidence head declared unavailable (the engine
    release ships it, a module it needs did not import): its S7 cases must be INCONCLUSIVE."""
    return c.Adapter(
        "toy:unavailable-confidence", c.Conventions(), {c.SimulatedAcceptance: reference.SimulatedAcceptance()},
        unavailable={c.Confidence: "toy.confidence did not import (No module named 'regex'); "
                                   "pip install --target DIR regex"},
    )


def carried_forward_ledger() -> c.Adapter:
    """Release 1.1 of a toy engine whose ledger confirmed a finding on the S6 degenerate
    values only up to 1.0 (its newest measured): the entry is carried forward to 1.1, where
    the reference passes the case, so the run must show a strict XPASS naming the entry."""
    from conformance.adapters.ledgers import Entry, Ledger, Scope

    ledger = Ledger("docs/toy-findings.md",
                    (Entry("test_S6_lengths_stay_in_range", "S6", "T1: a toy finding",
                           (Scope(">=0.9,<=1.0", ("cpu", "cuda")),)),),
                    newest_measured={"cpu": "1.0", "cuda": "1.0"})
    return c.Adapter("toy:engine==1.1", c.Conventions(), {c.SimulatedAcceptance: reference.SimulatedAcceptance()},
                     expected_failures=ledger.expected_failures("1.1"))


class _TPRankFault(reference.TensorParallelRound):
    """``fault`` in ``tp_round``: on rank 1 ``"hang"`` (before the first collective) or
    ``"exit"`` (code 3, after the round, saying so), on every rank ``"unsupported"``
    (``NotImplementedError``); otherwise the reference's round."""

    def __init__(self, fault: str) -> None:
        super().__init__()
        self.fault = fault

    def tp_round(self, group, *args, **kwargs):
        if self.fault == "unsupported":
            raise NotImplementedError("toy: no tensor parallelism")
        if group.rank == 1 and self.fault == "hang":
            time.sleep(3600)
        out = super().tp_round(group, *args, **kwargs)
        if group.rank == 1 and self.fault == "exit":
            print("toy: rank 1 leaves", flush=True)
            os._exit(3)
        return out


def tp_rank_hangs() -> c.Adapter:
    return c.Adapter("toy:tp-rank-hangs", c.Conventions(), {c.TensorParallelRound: _TPRankFault("hang")})


def tp_rank_exits() -> c.Adapter:
    return c.Adapter("toy:tp-rank-exits", c.Conventions(), {c.TensorParallelRound: _TPRankFault("exit")})


def tp_unsupported() -> c.Adapter:
    return c.Adapter("toy:tp-unsupported", c.Conventions(), {c.TensorParallelRound: _TPRankFault("unsupported")})

