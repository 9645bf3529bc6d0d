"""A case's input streams, derived from its case seed (``conformance.seeds``): the sub-seed of
one use inside a case and the CPU generator its inputs are drawn from, independent of the
IUT's ``case_generator`` stream."""

from __future__ import annotations

import torch

from conformance.seeds import derive_seed

__all__ = ["sub_seed", "input_generator"]


def sub_seed(case_seed: int, label: str) -> int:
    """An independent seed for one use inside a case (inputs, weights, a session)."""
    return derive_seed(case_seed, label)


def input_generator(case_seed: int) -> torch.Generator:
    """CPU generator for a case's inputs, independent of the IUT's ``case_generator`` stream."""
    return torch.Generator().manual_seed(sub_seed(case_seed, "inputs"))
