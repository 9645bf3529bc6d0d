"""Small adapters used by tests/test_cli.py and tests/test_boundary.py to exercise the plugin
and the main job."""

import torch

from conformance import contract as c
from conformance.adapters import reference


class _InconclusiveSimulated(reference.SimulatedAcceptance):
    """Pretends its verify-step path never ran (e.g. a benchmark mode that was not enabled)."""

    def executor(self, value, method, gamma, seed):
        raise c.Inconclusive("simulated verify step is disabled in this build")


def only_simulated() -> c.Adapter:
    """Offers one capability; every other test must skip naming its capability."""
    return c.Adapter("toy:only-simulated", c.Conventions(), {c.SimulatedAcceptance: reference.SimulatedAcceptance()})


def inconclusive() -> c.Adapter:
    return c.Adapter("toy:inconclusive", c.Conventions(), {c.SimulatedAcceptance: _InconclusiveSimulated()})


def unmatched_ledger() -> c.Adapter:
    return c.Adapter(
        "toy:unmatched-ledger", c.Conventions(), {c.SimulatedAcceptance: reference.SimulatedAcceptance()},
        expected_failures=(c.ExpectedFailure("test_S6_does_not_exist", "S6", "stale entry"),),
    )


class _FloatLongStepSampler(reference.StepSampler):
    """Returns its ids as float32, one row too many (the broken adapter of issue 12)."""

    def sample(self, logits, temperatures, top_k, vocab_size, generator):
        tokens = super().sample(logits, temperatures, top_k, vocab_size, generator)
        return torch.cat([tokens, tokens[:1]]).float()


def float_long_step_sampler() -> c.Adapter:
    """Its StepSampler breaks the contract: the boundary must name what came back."""
    return c.Adapter("toy:float-long-step-sampler", c.Conventions(), {c.StepSampler: _FloatLongStepSampler()})
