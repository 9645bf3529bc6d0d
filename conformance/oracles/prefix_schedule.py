"""The oracle of SPEC S8's prefix scheduler (paper Algorithm 1), in plain Python from the
paper's text, shared by the S8 scheduler tests and the S9 loop's per-round schedule check.

Confidences arrive as lists of floats (``conf[r][j]``, 0-based ``j``), the SPS table as a
list (``sps[B - 1]`` at forward batch size ``B``); every product and sum runs in float64,
left to right. It shares no code with ``dspark_ref``.
"""

from __future__ import annotations

from fractions import Fraction

import torch

__all__ = ["survival", "candidate_path", "algorithm_1", "theta_trace", "oracle_lengths", "check_against_oracle"]


def survival(conf: list[list[float]], exact: bool = False) -> list[list[float]] | list[list[Fraction]]:
    """Algorithm 1 lines 1-3 (SPEC S8): ``a[r][j] = prod_{i<=j} c[r][i]``, multiplied left to
    right, in float64 or, with ``exact``, as :class:`~fractions.Fraction` (each ``c`` read
    exactly; the production oracle's survivals)."""
    rows = []
    for row in conf:
        acc, prefix = (Fraction(1) if exact else 1.0), []
        for c in row:
            acc *= Fraction(c) if exact else c
            prefix.append(acc)
        rows.append(prefix)
    return rows


def candidate_path(a: list[list[float]]) -> list[tuple[int, int]]:
    """Algorithm 1 line 4: candidates ``(r, j)`` (0-based j) with ``a > 0``, ``a`` descending;
    ties in row-major order, one of the orders SPEC S8 allows."""
    return sorted(
        ((r, j) for r, row in enumerate(a) for j, value in enumerate(row) if value > 0),
        key=lambda rj: (-a[rj[0]][rj[1]], rj[0], rj[1]),
    )


def _thetas(rows: int, a: list[list[float]], path: list[tuple[int, int]], sps: list[float]):
    """Algorithm 1 lines 5-14, lazily: ``Theta = tau * SPS(B)`` after admitting 0, 1, ... candidates
    of ``path``, from ``B = R``, ``tau = R``; each admission adds one to ``B`` and its survival to ``tau``."""
    batch, tau = rows, float(rows)
    yield tau * sps[batch - 1]
    for r, j in path:
        batch, tau = batch + 1, tau + a[r][j]
        yield tau * sps[batch - 1]


def algorithm_1(conf: list[list[float]], sps: list[float]):
    """Paper Algorithm 1, line by line. Returns (admitted count, survival, path, Theta trace).

    Lines 5-15: from ``B = R``, ``tau = R``, ``best = R * SPS(R)``, admit path candidates
    while ``Theta = tau * SPS(B)`` strictly rises; break at the first that does not (the
    trace ends with it, so ``sps`` need only reach the batch size of that admission).
    """
    a = survival(conf)
    path = candidate_path(a)
    thetas = _thetas(len(conf), a, path, sps)
    best = next(thetas)
    count, trace = 0, [best]
    for admitted, theta in enumerate(thetas, start=1):
        trace.append(theta)
        if theta > best:
            best, count = theta, admitted
        else:
            break
    return count, a, path, trace


def theta_trace(conf: list[list[float]], sps: list[float]):
    """``(survival, path, Theta after admitting 0..n candidates)`` along the WHOLE path
    (``n = len(path)``; ``sps`` covers batch sizes ``1..R + n``): Algorithm 1 stops at the first
    non-improvement of this trace, the retrospective variant (SPEC S8) admits its argmax."""
    a = survival(conf)
    path = candidate_path(a)
    return a, path, list(_thetas(len(conf), a, path, sps))


def oracle_lengths(path: list[tuple[int, int]], count: int, rows: int) -> list[int]:
    """Each request's verify length after admitting the first ``count`` candidates of ``path``."""
    lengths = [0] * rows
    for r, j in path[:count]:
        lengths[r] = j + 1
    return lengths


def check_against_oracle(label: str, conf: list[list[float]], sps: list[float], lengths: torch.Tensor) -> None:
    """The IUT's ``lengths [R]`` int64 admit Algorithm 1's count of draft tokens, as a top set in
    prefix order (SPEC S8 orders ties only within a request, so tied candidates of different
    requests may be admitted in any order).

    Raises:
        AssertionError: naming ``label``, the inputs, Algorithm 1's count and example lengths,
            and what the IUT returned.
    """
    count, a, path, _ = algorithm_1(conf, sps)
    rows, gamma = len(conf), len(conf[0])
    where = (f"{label}: confidences {conf}, SPS {sps}; Algorithm 1 admits "
             f"{count} draft tokens, e.g. lengths {oracle_lengths(path, count, rows)}")
    assert lengths.dtype == torch.int64 and tuple(lengths.shape) == (rows,), (
        f"{where}; expected int64 lengths of shape ({rows},), got {lengths.dtype} {tuple(lengths.shape)}"
    )
    got = lengths.cpu().tolist()
    for r, length in enumerate(got):
        assert 0 <= length <= gamma and (length == 0 or a[r][length - 1] > 0), (
            f"{where}; got lengths {got}: request {r} verifies {length} draft tokens, beyond its "
            f"block or a zero-survival position"
        )
    assert sum(got) == count, f"{where}; got lengths {got} admitting {sum(got)}"
    admitted = [a[r][j] for r in range(rows) for j in range(got[r])]
    passed_over = [a[r][j] for r in range(rows) for j in range(got[r], gamma) if a[r][j] > 0]
    assert not admitted or not passed_over or min(admitted) >= max(passed_over), (
        f"{where}; got lengths {got}, which pass over a candidate of survival {max(passed_over)} "
        f"while admitting one of {min(admitted)}"
    )
