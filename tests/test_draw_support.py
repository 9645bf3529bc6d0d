"""The S6 harness's exact support check (``conformance.suite.support.draws``): its fast path
(set operations over a list of plain ints) passes only what the per-draw check passes, and
every bad draw still fails, named (issue 45)."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

from conformance.suite.support.draws import check_support

ALLOWED = {4, 5}


@pytest.mark.parametrize("values", [
    [], [4], [4, 5, 5, 4] * 50_000, [np.int64(4), 5], torch.tensor([4, 5]).tolist(), [True],
], ids=["empty", "one", "200000-ints", "numpy-int", "tensor-tolist", "bool-as-1"])
def test_draws_in_the_support_pass(values):
    check_support("S6/x", values, ALLOWED | {1}, "lengths")


@pytest.mark.parametrize("values, message", [
    ([4, 5] * 1000 + [3], "draw 2000 is 3 (int)"),
    ([6, 4], "draw 0 is 6 (int)"),
    ([4, 5.0], "draw 1 is 5.0 (float)"),
    ([4, 4.5], "draw 1 is 4.5 (float)"),
    ([4, "5"], "draw 1 is '5' (str)"),
    ([4, None], "draw 1 is None (NoneType)"),
    ([4, torch.tensor(5)], "draw 1 is tensor(5) (Tensor)"),
    ([4, np.float64(5.0)], f"draw 1 is {np.float64(5.0)!r} (float64)"),
    ([4, np.int64(7)], f"draw 1 is {np.int64(7)!r} (int64)"),
    ([4, True], "draw 1 is True (bool)"),
], ids=["outside-late", "outside-first", "float-of-a-support-value", "float", "str", "none", "tensor",
        "numpy-float", "numpy-int-outside", "bool-outside"])
def test_a_bad_draw_fails_naming_it(values, message):
    expected = f"S6/x: lengths: {message}; expected an int in [4, 5]"
    with pytest.raises(AssertionError, match=f"^{re.escape(expected)}$"):
        check_support("S6/x", values, ALLOWED, "lengths")
