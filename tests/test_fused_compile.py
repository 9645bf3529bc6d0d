"""The fused race kernel compiled for a CUDA GPU on a machine without one (SPEC S3).

The interpreter runs the kernel's ``LIBDEVICE=False`` branches; the GPU branches (libdevice
calls, ``ex2.approx``, the bit-pattern noise check) are only compiled where a GPU is. Triton
compiles for a ``GPUTarget`` without a device, down to a cubin with the ``ptxas`` its wheel
ships, so CPU CI catches a GPU-only compile error of every constexpr value here.
"""

from __future__ import annotations

import os

import pytest

from dspark_ref import fused_checks, fused_sampling

triton = pytest.importorskip("triton")
if fused_sampling.triton is None:
    pytest.skip("fused_sampling has no triton", allow_module_level=True)

try:
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
except ImportError:  # an older triton layout
    pytest.skip("triton has no GPUTarget / ASTSource", allow_module_level=True)

_PTXAS = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "ptxas")
needs_ptxas = pytest.mark.skipif(not os.path.exists(_PTXAS) and os.environ.get("TRITON_PTXAS_PATH") is None,
                                 reason="triton's wheel ships no ptxas here")
_SM90 = 90  # Hopper (H100 / H200), the GPUs the GPU tier runs on


def _compile(counter_noise: bool, has_greedy: bool, dtype: str):
    pointers = {"logits_ptr": dtype, "temps_ptr": "fp32", "greedy_ptr": "i8", "noise_ptr": "fp32",
                "rng_ptr": "i64" if counter_noise else "i32", "part_max_ptr": "fp32", "part_key_ptr": "fp32",
                "part_idx_ptr": "i32", "sync_ptr": "i32", "out_ptr": "i64", "signal_ptr": "i64"}
    signature = {name: "*" + kind for name, kind in pointers.items()}
    signature |= dict.fromkeys(("rows", "vocab_size", "chunk", "splits", "logits_row_stride",
                                "noise_row_stride", "launch_id"), "i32")
    constants = dict(BLOCK=512, SPLITS_POW2=32, COUNTER_NOISE=counter_noise, HAS_GREEDY=has_greedy, LIBDEVICE=True,
                     SIGNAL_SLOTS=fused_checks.SLOTS)
    signature |= dict.fromkeys(constants, "constexpr")
    aligned = {(index,): [["tt.divisibility", 16]] for index in range(len(pointers))}
    source = ASTSource(fused_sampling._fused_race_kernel, signature, constants, aligned)
    # enable_fp_fusion: a launch's default through triton 3.9, which warns when it is left unset.
    options = dict(num_warps=4, enable_fp_fusion=True)
    return triton.compile(source, target=GPUTarget("cuda", _SM90, 32), options=options)


@needs_ptxas
@pytest.mark.skipif(fused_sampling.KERNEL_INTERPRETED, reason="the interpreter replaces triton.jit")
@pytest.mark.parametrize("counter_noise, has_greedy, dtype",
                         [(False, True, "fp32"), (True, True, "bf16"), (False, False, "bf16"), (True, False, "fp32")])
def test_s3_fused_kernel_compiles_for_sm90_without_a_gpu(counter_noise, has_greedy, dtype):
    kernel = _compile(counter_noise, has_greedy, dtype)
    assert "ex2.approx" in kernel.asm["ptx"]  # the weights' exp2 (module note)
    assert len(kernel.asm["cubin"]) > 0
