"""A lost CUDA context: which case lost it, and what that means for the cases after it.

An out-of-bounds access in a kernel (an engine reading a sentinel ``-1`` draft as an index,
say) poisons the process's CUDA context: every later CUDA call in that process raises the
same error, and kernel errors surface asynchronously, at whatever call comes next. Left
alone, one such case fails every later case of its worker with an error that is not theirs,
and an expected-failure entry (a strict xfail) would take the crash as its finding.

The plugin therefore (SPEC S0 "reporting"):

* synchronizes after every suite test on a CUDA run, so an asynchronous kernel error is
  reported by the case whose kernels raised it (:func:`synchronize`);
* never lets a context error count as an expected failure (:func:`is_context_error`);
* ends every later case of the same process in setup with :class:`CudaContextLost`, which
  names the case that lost the context: those cases did not run, and the main job runs
  them again in a fresh process (:func:`lost_cases`; ``conformance.runner``).
"""

from __future__ import annotations

__all__ = [
    "CudaContextLost", "is_context_error", "is_out_of_memory", "lost_cases", "out_of_memory_cases", "synchronize",
]

_NOT_RUN = "not run: the CUDA context of this process was lost by "

# Errors after which the CUDA context of the process is unusable (CUDA runtime docs: "the
# process is left in an inconsistent state and any further CUDA work will return the same
# error"). Out-of-memory is not among them: it leaves the context usable.
_STICKY = (
    "illegal memory access",
    "illegal instruction",
    "misaligned address",
    "unspecified launch failure",
    "device-side assert triggered",
    "operation not supported on global/shared address space",
    "cudaErrorIllegalAddress",
    "cudaErrorLaunchFailure",
    "cudaErrorInvalidAddressSpace",
)


class CudaContextLost(RuntimeError):
    """A case that did not run: an earlier case of this process lost the CUDA context.

    ``culprit``: the case id of that earlier case; ``error``: its error's first line.
    """

    def __init__(self, culprit: str, error: str) -> None:
        super().__init__(f"{_NOT_RUN}{culprit} ({error}); rerun this case on its own (--case) to see its result")
        self.culprit = culprit
        self.error = error


def is_context_error(exc: BaseException) -> bool:
    """Whether ``exc`` is (or follows from) a CUDA error that leaves the context unusable:
    one of the sticky errors by its text, or any other CUDA error after which a one-element
    kernel on the current device fails too."""
    if isinstance(exc, CudaContextLost):
        return True
    text = str(exc)
    if "CUDA error" not in text:
        return False
    return any(marker in text for marker in _STICKY) or not _context_usable()


def _context_usable() -> bool:
    import torch

    if not (torch.cuda.is_available() and torch.cuda.is_initialized()):
        return True
    try:
        torch.ones(1, device="cuda").add_(1)
        torch.cuda.synchronize()
    except Exception:  # whatever the broken context raises: the answer is "unusable"
        return False
    return True


def release_cached_memory() -> None:
    """Return the memory PyTorch's caching allocator holds in this process to the device
    (``torch.cuda.empty_cache``), so that the other workers of a run can allocate it: each
    xdist worker otherwise keeps the peak of its largest case cached until it exits. A no-op
    where CUDA is not initialised."""
    import torch

    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.empty_cache()


def synchronize() -> None:
    """Wait for every kernel this process launched, so that an asynchronous CUDA error is
    raised here, by the case that launched the kernel. A no-op where CUDA is not initialised.

    Raises:
        torch.AcceleratorError (or RuntimeError on older torch): a kernel of this case failed.
    """
    import torch

    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()


#: The type name of PyTorch's caching allocator's error (``torch.OutOfMemoryError``).
OUT_OF_MEMORY = "OutOfMemoryError"
#: How torch words the CUDA runtime's ``cudaErrorMemoryAllocation`` (a ``torch.AcceleratorError``,
#: a ``RuntimeError`` before torch 2.9): an allocation outside the caching allocator failed (a
#: library's workspace, a CUDA graph's memory pool, an engine's own buffers).
_RUNTIME_OUT_OF_MEMORY = "CUDA error: out of memory"


def is_out_of_memory(exc: BaseException) -> bool:
    """Whether ``exc`` says the device ran out of memory: ``torch.OutOfMemoryError`` or the
    CUDA runtime's out-of-memory error, which leaves the context usable. Beside other xdist
    workers on one card, either may be their memory, not the case's (SGLang 0.5.23's
    ``S4/gpu-replay/sequence-float32`` raised the runtime's at 16 workers on an H100)."""
    return type(exc).__name__ == OUT_OF_MEMORY or _RUNTIME_OUT_OF_MEMORY in str(exc)


def out_of_memory_cases(records: list[dict]) -> list[str]:
    """The case ids of the records (``results.json`` ``tests``) of cases that failed because
    the device ran out of memory (their ``failure``'s ``out_of_memory``, :func:`is_out_of_memory`):
    beside other workers on one card, that may be their memory, not the case's."""
    return [r["case"] for r in records
            if r["outcome"] == "failed" and (r.get("failure") or {}).get("out_of_memory")]


def lost_cases(records: list[dict]) -> list[str]:
    """The case ids of the records (``results.json`` ``tests``) of cases that did not run
    because an earlier case of their process lost the CUDA context."""
    return [r["case"] for r in records if r["outcome"] in ("failed", "error") and _NOT_RUN in (r["reason"] or "")]
