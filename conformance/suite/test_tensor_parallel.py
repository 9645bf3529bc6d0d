"""Conformance tests for SPEC S5 "Tensor parallelism" (with S8 and the S10 bug "tensor-parallel
ranks that diverge in draft noise or verify budget").

Two ranks run as two processes in one ``torch.distributed`` group
(:mod:`conformance.suite.support.tp_ranks`; gloo on CPU, or NCCL with one GPU per rank, by the
same code; the processes are started at a pytest process's first case and reused, each case
in a new group with new inputs and generators) and each calls the implementation's own
:class:`~conformance.contract.TensorParallelRound` on identical request inputs: head weights,
base and target logits, confidences, and each request's seed and position. The ranks must
return identical draft tokens, verify lengths, accepted counts and committed tokens, bit for
bit (SPEC S0: ids and counts are exact).

What may differ between the ranks is their local state, which SPEC S5's "same inputs" does
not include: each rank's own generator and the steps-per-second table it profiled itself
(the scheduler's cost input, SPEC S8). The ``same-local-state`` case gives both ranks the
same of each (an implementation that seeds a rank by its rank fails it); the
``rank-local-state`` case gives them different generator seeds and different tables (an
implementation that draws from its rank's generator, or plans from its own table, without
synchronising, fails it); ``rank-local-state-vanilla`` and ``nccl-two-gpus-vanilla`` repeat
the rank-local cases with the vanilla head, which every engine ships (vLLM has no gated head).
The ``zero-length-rows`` cases plan a mixed batch, some rows at verify length 0 beside
verifying rows, with rank-local state differing: a row that verifies nothing still draws its
token, and an implementation that takes that draw from the rank's generator fails them.
An implementation passes by per-request seeds (vLLM) or by broadcasting rank 0's draws and
plan (SGLang's ``SpecTpSync``).

To add a case: add ``case(...): parameters`` to the dict of its family below.
"""

from __future__ import annotations

import pytest
import torch

from conformance.cases import case, case_id
from conformance.contract import TensorParallelRound
from conformance.inputs import markov_head_state
from conformance.inputs.seeding import input_generator, sub_seed
from conformance.suite.support.tp_ranks import RankFailure, RankPool, run_ranks

BATCH, GAMMA, VOCAB, RANK, HIDDEN = 6, 4, 32, 4, 6
WORLD = 2
#: Greedy rows (T = 0, top_k = 1) and sampling rows (T in [0.7, 1.3], no top-k cut).
TEMPERATURES = (0.0, 0.7, 1.0, 1.3, 0.0, 1.0)
OUTPUTS = ("draft_tokens", "verify_lengths", "accepted", "tokens")


def rank_sps(slope: float) -> list[float]:
    """A profiled steps-per-second table ``1 / (1 + slope * b)`` at batch sizes ``b = 1 ..
    B (gamma + 1)``: a larger ``slope`` makes verify tokens dearer, so Algorithm 1 admits fewer."""
    return [1.0 / (1.0 + slope * b) for b in range(1, BATCH * (GAMMA + 1) + 1)]


def tp_payload(head_type, case_seed, rank_local, zero_length_rows=()):
    """The saved ``tp_round`` inputs: shared request inputs, then each rank's local state.
    ``zero_length_rows``: rows whose first confidence is 0 (survival 0 at every position, so
    Algorithm 1 admits none of their drafts: verify length 0), the other rows' confidences
    then in [0.9, 1] (admitted under every table of :func:`rank_sps`)."""
    gen = input_generator(case_seed)
    state = markov_head_state(head_type, VOCAB, RANK, HIDDEN, torch.Generator().manual_seed(sub_seed(case_seed, "head")))
    base = 1.5 * torch.randn(BATCH, GAMMA, VOCAB, generator=gen)
    target = base[:, :1] + torch.randn(BATCH, GAMMA + 1, VOCAB, generator=gen)
    temps = torch.tensor(TEMPERATURES, dtype=torch.float32)
    shared = {
        "head_type": head_type, "state_dict": state, "base_logits": base,
        "first_prev": torch.randint(VOCAB, (BATCH,), generator=gen),
        "hidden": None if head_type == "vanilla" else torch.randn(BATCH, GAMMA, HIDDEN, generator=gen),
        "target_logits": target, "temperatures": temps,
        "top_k": torch.where(temps == 0, 1, VOCAB).to(torch.int64),
        "confidences": 0.35 + 0.65 * torch.rand(BATCH, GAMMA, generator=gen, dtype=torch.float64),
        "seeds": torch.randint(2**62, (BATCH,), generator=gen), "positions": torch.randint(1, 4096, (BATCH,),
                                                                                         generator=gen),
    }
    if zero_length_rows:
        shared["confidences"] = 0.9 + 0.1 * torch.rand(BATCH, GAMMA, generator=gen, dtype=torch.float64)
        shared["confidences"][list(zero_length_rows), 0] = 0.0
    seed = sub_seed(case_seed, "rank-generator")
    # rank-local: rank r's generator seeded seed + r, its table 10x steeper per rank (fewer verify tokens)
    local = [{"generator_seed": seed + rank * rank_local, "sps": rank_sps(0.02 * (1 + 9 * rank * rank_local))}
             for rank in range(WORLD)]
    return {"shared": shared, "local": local}


def check_ranks_agree(case, results):
    for name in OUTPUTS:
        first = results[0][name]
        for rank, result in enumerate(results[1:], start=1):
            assert torch.equal(result[name], first), (
                f"{case.id}: rank {rank} computed {name} {result[name].tolist()}, rank 0 computed {first.tolist()} "
                f"on identical request inputs (SPEC S5: every rank with the same inputs and seeds computes identical "
                f"draft tokens, verify lengths, accepted counts and emitted tokens)"
            )


@pytest.fixture(scope="session")
def rank_pool():
    """The rank processes of this pytest process (an xdist worker), started at its first
    tensor-parallel case, reused by the next (a failed case ends them; the next starts new
    ones) and ended with the session: a rank's start-up (torch, the suite, the adapter) is
    seconds, its round a fraction of one."""
    pool = RankPool()
    yield pool
    pool.close()


def run_case(case, impl, backend, head_type, rank_local, case_seed, workdir, pool, zero_length_rows=()):
    """Both ranks' outputs; an IUT that raises ``NotImplementedError`` on a rank is a skip."""
    try:
        return run_ranks(impl, backend, tp_payload(head_type, case_seed, rank_local, zero_length_rows), workdir,
                         world_size=WORLD, pool=pool)
    except RankFailure as exc:
        if exc.kind == "unsupported":
            pytest.skip(f"{case.id}: TensorParallelRound: {exc}")
        raise AssertionError(f"{case.id}: {exc}") from None


# case -> (head type, rank-local state differs)
CPU_CASES = {
    case("S5/tensor-parallel/gloo-same-local-state", "two ranks (gloo, two processes), identical inputs and local "
         "state: identical drafts, verify lengths, accepted counts, tokens", ["S5.tensor-parallel"]): ("vanilla", False),
    case("S5/tensor-parallel/gloo-rank-local-state", "two ranks whose generators and profiled SPS tables differ: "
         "still identical (per-request seeds or rank 0's decisions broadcast)", ["S5.tensor-parallel"]): ("gated", True),
    case("S5/tensor-parallel/gloo-rank-local-state-vanilla", "the rank-local case with the vanilla Markov head, the "
         "one head every engine ships (vLLM has no gated head): still identical", ["S5.tensor-parallel"]): ("vanilla", True),
}


@pytest.mark.parametrize("case", CPU_CASES, ids=case_id)
def test_S5_tensor_parallel_ranks_agree(case, require, dspark_impl, dspark_device, case_seed, tmp_path,
                                        rank_pool):
    require(TensorParallelRound)
    if dspark_device.type != "cpu":
        pytest.skip(f"{case.id}: the gloo case runs its ranks on the CPU; the NCCL case covers CUDA")
    head_type, rank_local = CPU_CASES[case]

    results = run_case(case, dspark_impl, "gloo", head_type, rank_local, case_seed, tmp_path, rank_pool)

    check_ranks_agree(case, results)


#: Sampling rows (1, 3) and a greedy row (4) planned at verify length 0 among verifying rows.
ZERO_LENGTH_ROWS = (1, 3, 4)
# case -> head type (rank-local state differs in each)
ZERO_LENGTH_CASES = {
    case("S5/tensor-parallel/gloo-zero-length-rows-vanilla", "a mixed plan: sampling and greedy rows at verify "
         "length 0 beside verifying rows, rank-local generators and tables differ: identical results (the rows "
         "that verify nothing still draw from the request's seed)", ["S5.tensor-parallel"]): "vanilla",
    case("S5/tensor-parallel/gloo-zero-length-rows-gated", "the mixed plan with the gated Markov head",
         ["S5.tensor-parallel"]): "gated",
}


@pytest.mark.parametrize("case", ZERO_LENGTH_CASES, ids=case_id)
def test_S5_tensor_parallel_zero_length_rows_agree(case, require, dspark_impl, dspark_device, case_seed, tmp_path,
                                                   rank_pool):
    """Rows ``ZERO_LENGTH_ROWS`` get survival 0 (Algorithm 1, SPEC S8, admits none of their
    drafts), the others survivals that every rank's table admits; the ranks' generators
    differ. A row that verifies nothing still emits a token drawn from ``p_1``, and SPEC S5
    asks that draw of every rank alike."""
    require(TensorParallelRound)
    if dspark_device.type != "cpu":
        pytest.skip(f"{case.id}: the gloo case runs its ranks on the CPU")

    results = run_case(case, dspark_impl, "gloo", ZERO_LENGTH_CASES[case], True, case_seed, tmp_path,
                       rank_pool, zero_length_rows=ZERO_LENGTH_ROWS)

    check_ranks_agree(case, results)
    lengths = results[0]["verify_lengths"]
    zero = torch.zeros(BATCH, dtype=torch.bool)
    zero[list(ZERO_LENGTH_ROWS)] = True
    assert bool((lengths[zero] == 0).all()) and bool((lengths[~zero] > 0).all()), (
        f"{case.id}: expected verify length 0 on rows {list(ZERO_LENGTH_ROWS)} (survival 0: Algorithm 1 admits none "
        f"of their drafts) and > 0 on the others (survivals >= 0.9^{GAMMA}), got {lengths.tolist()}"
    )


# case -> head type (rank-local state differs in each)
NCCL_CASES = {
    case("S5/tensor-parallel/nccl-two-gpus", "two ranks on two GPUs (NCCL), rank-local state differs: "
         "identical results", ["S5.tensor-parallel"]): "gated",
    case("S5/tensor-parallel/nccl-two-gpus-vanilla", "the NCCL case with the vanilla Markov head (vLLM has no gated "
         "head): identical results", ["S5.tensor-parallel"]): "vanilla",
}


@pytest.mark.gpu
@pytest.mark.parametrize("case", NCCL_CASES, ids=case_id)
def test_S5_tensor_parallel_ranks_agree_on_two_gpus(case, dspark_adapter, dspark_impl, case_seed, tmp_path,
                                                    rank_pool):
    if torch.cuda.device_count() < WORLD:
        pytest.skip(f"{case.id}: needs {WORLD} CUDA devices for one NCCL rank each, found "
                    f"{torch.cuda.device_count()}")
    if dspark_adapter.get(TensorParallelRound) is None:
        pytest.skip(f"capability TensorParallelRound not offered by {dspark_adapter.name}")
    why = dspark_adapter.unmet(TensorParallelRound, "cuda")
    if why is not None:
        pytest.skip(f"capability TensorParallelRound of {dspark_adapter.name} {why}")

    results = run_case(case, dspark_impl, "nccl", NCCL_CASES[case], True, case_seed, tmp_path, rank_pool)

    check_ranks_agree(case, results)
