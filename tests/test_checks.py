"""conformance.checks: each check accepts what it should and names the argument when it refuses."""

from __future__ import annotations

import math

import pytest
import torch

from conformance.checks import check_choice, check_float, check_int, check_tensor


def test_good_values_pass_through():
    assert check_int("n", 3, minimum=1, maximum=3) == 3
    assert check_float("alpha", 1, minimum=0.0) == 1.0 and isinstance(check_float("alpha", 1), float)
    assert check_choice("mode", "auto", ("off", "auto")) == "auto"
    t = torch.zeros(2, 3)
    assert check_tensor("x", t, shape=(2, None), dtypes=(torch.float32,)) is t


@pytest.mark.parametrize("call, error, message", [
    (lambda: check_int("n", True), TypeError, "n: expected an int, got bool (True)"),
    (lambda: check_int("n", 2.0), TypeError, "n: expected an int, got float (2.0)"),
    (lambda: check_int("n", 0, minimum=1), ValueError, "n: expected an int >= 1, got 0"),
    (lambda: check_int("n", 5, maximum=4), ValueError, "n: expected an int <= 4, got 5"),
    (lambda: check_float("alpha", False), TypeError, "alpha: expected a real number, got bool (False)"),
    (lambda: check_float("alpha", "0.1"), TypeError, "alpha: expected a real number, got str ('0.1')"),
    (lambda: check_float("alpha", math.nan), ValueError, "alpha: expected a finite number, got nan"),
    (lambda: check_float("alpha", math.inf), ValueError, "alpha: expected a finite number, got inf"),
    (lambda: check_float("alpha", -0.5, minimum=0.0), ValueError, "alpha: expected a number >= 0.0, got -0.5"),
    (lambda: check_float("alpha", 1.5, maximum=1.0), ValueError, "alpha: expected a number <= 1.0, got 1.5"),
    (lambda: check_choice("mode", "on", ("off", "auto")), ValueError,
     "mode: expected one of ('off', 'auto'), got 'on'"),
    (lambda: check_tensor("x", [1.0]), TypeError, "x: expected a torch.Tensor, got list"),
    (lambda: check_tensor("x", torch.zeros(2), dtypes=(torch.int64, torch.int32)), TypeError,
     "x: expected dtype int64 or int32, got torch.float32"),
    (lambda: check_tensor("x", torch.zeros(2), ndim=2), ValueError,
     "x: expected a 2-D tensor, got 1-D with shape (2,)"),
    (lambda: check_tensor("x", torch.zeros(2, 3), shape=(2, 4)), ValueError,
     "x: expected shape (2, 4), got (2, 3)"),
    (lambda: check_tensor("x", torch.zeros(2, 3), shape=(None, 4)), ValueError,
     "x: expected shape ('*', 4), got (2, 3)"),
])
def test_a_refusal_names_the_argument_and_what_was_expected(call, error, message):
    with pytest.raises(error) as info:
        call()
    assert str(info.value) == message
