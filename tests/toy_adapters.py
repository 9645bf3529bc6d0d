"""Small adapters used by tests/test_cli.py to exercise the plugin and the main job."""

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
