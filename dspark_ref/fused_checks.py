"""Value checks of eager fused-race launches (SPEC S3): read now, or deferred.

The fused kernel (``fused_sampling``) flags bad values in a device word: bit 1 a NaN or
``+inf`` logit, 2 a row of logits that is all ``-inf``, 4 noise that is NaN, infinite or
negative (``-0.0`` is not: it is not below 0), 8 a NaN, infinite or negative temperature.
The flags are exact, so a flagged launch is always an error. An eager launch on CUDA
carries a launch id ``>= 2``, and its last program writes ``launch_id << 32 | flags`` to word
``launch_id % SLOTS`` of a ring of int64 words in pinned host memory (:class:`LaunchSignal`);
the host reads that word instead of synchronizing the stream and copying the flag word.

Two ways to read it (``check`` of ``fused_exponential_race``):

* ``"sync"`` (the default): the call polls its word before it returns and raises there, with
  the ``sampling`` checks' message. Its time is the launch, the kernel and one device-to-host
  round trip in series: an asynchronous call that checks nothing returns before its kernel
  ends (H100, ``B=1``: 16-18 us against 9.5 us for SGLang's unchecked ``MarkovSampleStep``).
* ``"deferred"``: the call returns as soon as the kernel is launched, as CUDA reports an
  asynchronous error at a later call. Its flags are read by the next call on the device,
  either way, before that call launches anything, and by :func:`check_deferred`; a flagged
  launch raises ``ValueError`` there, naming its launch id and the flagged values. At most
  ``SLOTS - 1`` deferred launches wait unread; one more makes the call wait for the oldest.

Under the Triton interpreter no kernel writes host memory: the host reads the device word
after the launch (``flags_now``), and a deferred call queues those flags the same way, so
CPU tests see the deferred semantics exactly.
"""

from __future__ import annotations

import collections

import torch

__all__ = ["CHECKS", "FLAG_CAUSES", "SLOTS", "LaunchSignal", "check_deferred", "flagged_error", "signal_for"]

CHECKS = ("sync", "deferred")  # when an eager call reads its launch's flags (module note)
SLOTS = 64  # pinned words per device (a power of two: the kernel takes launch_id & (SLOTS - 1))
#: Flag bits of the kernel's value-check word and what each means (module note).
FLAG_CAUSES = (
    (1, "logits: NaN or +inf values"),
    (2, "logits: a row that is all -inf"),
    (4, "noise: NaN, infinite or negative values"),
    (8, "temperatures: NaN, infinite or negative values"),
)
_SPINS = 20_000  # polls of a pinned word (well under a millisecond) before a blocking wait
_FIRST_ID, _LAST_ID = 2, 2**31 - 1


class LaunchSignal:
    """One device's pinned ring of flag words (None under the interpreter), its launch ids
    and its deferred launches not yet read (module note)."""

    def __init__(self, device: torch.device, pinned: bool) -> None:
        self.device = device
        self.words = torch.zeros(SLOTS, dtype=torch.int64, pin_memory=True) if pinned else None
        self._view = None if self.words is None else self.words.numpy()
        self._launch_id = _FIRST_ID - 1
        # (launch id, flags): flags None until read from the ring (CUDA), known at once otherwise.
        self.deferred: collections.deque[tuple[int, int | None]] = collections.deque()

    def next_id(self) -> int:
        """The next launch id, in ``[2, 2^31)`` (from 2: triton 3.6 turns an int argument equal
        to 1 into a constant even under ``do_not_specialize``, which would build a second kernel)."""
        self._launch_id = self._launch_id + 1 if self._launch_id < _LAST_ID else _FIRST_ID
        return self._launch_id

    def ready(self, launch_id: int) -> int | None:
        """The flags of launch ``launch_id`` if its word is written, else None."""
        value = int(self._view[launch_id & (SLOTS - 1)])
        return value & 0xFFFFFFFF if value >> 32 == launch_id else None

    def wait(self, launch_id: int) -> int:
        """The flags of launch ``launch_id``: poll its word, then (a long queue ahead of the
        kernel) wait on the stream without holding the GIL. Raises RuntimeError if the word
        was never written."""
        for _ in range(_SPINS):
            flags = self.ready(launch_id)
            if flags is not None:
                return flags
        torch.cuda.current_stream(self.device).synchronize()
        flags = self.ready(launch_id)
        if flags is None:
            raise RuntimeError(f"fused_exponential_race: launch {launch_id} did not write its flags")
        return flags

    def make_room(self) -> None:
        """Before a launch: read the deferred launches whose words are written, and wait for
        the oldest while more than ``SLOTS - 2`` stay unread, so that no launch's word is
        overwritten before it is read. Raises as :meth:`collect`."""
        if self.deferred:
            self.collect(wait_for=len(self.deferred) - (SLOTS - 2))

    def collect(self, *, wait_for: int | None = None) -> None:
        """Read the deferred launches, oldest first: wait for the first ``wait_for`` (all if
        None), then read the others whose words are written. Raises ValueError
        (:func:`flagged_error`) for the first flagged one, which leaves the queue."""
        waited = 0
        while self.deferred:
            launch_id, flags = self.deferred[0]
            if flags is None:
                if wait_for is None or waited < wait_for:
                    flags = self.wait(launch_id)
                else:
                    flags = self.ready(launch_id)
                    if flags is None:
                        return
            waited += 1
            self.deferred.popleft()
            if flags:
                raise flagged_error(launch_id, flags, deferred=True)


_SIGNALS: dict[torch.device, LaunchSignal] = {}


def signal_for(device: torch.device, *, pinned: bool) -> LaunchSignal:
    """The device's :class:`LaunchSignal` (made on first use; ``pinned``: with a ring of
    pinned words, for compiled CUDA launches)."""
    signal = _SIGNALS.get(device)
    if signal is None:
        signal = _SIGNALS[device] = LaunchSignal(device, pinned)
    return signal


def flagged_error(launch_id: int, flags: int, *, deferred: bool) -> ValueError:
    """The error of a flagged launch: its id, its check mode and every flagged cause."""
    causes = "; ".join(text for bit, text in FLAG_CAUSES if flags & bit)
    call = "a call with check='deferred'" if deferred else "the call"
    return ValueError(f"fused_exponential_race: {call} (launch {launch_id}) read bad values: {causes}")


def _device_key(device: object) -> torch.device:
    """``device`` as the key its tensors' launches are queued under (``"cpu:0"`` is ``"cpu"``,
    ``"cuda"`` the current CUDA device). Raises TypeError / ValueError naming ``device``."""
    if not isinstance(device, (str, torch.device)):
        raise TypeError(f"device: expected a str or torch.device, got {type(device).__name__}")
    try:
        key = torch.device(device)
    except RuntimeError as error:
        raise ValueError(f"device: expected a device such as 'cuda:0' or 'cpu', got {device!r}") from error
    if key.type == "cpu":
        return torch.device("cpu")
    if key.type == "cuda" and key.index is None:
        return torch.device("cuda", torch.cuda.current_device() if torch.cuda.is_available() else 0)
    return key


def check_deferred(device: torch.device | str | None = None) -> None:
    """Wait for the ``check="deferred"`` calls of ``fused_exponential_race`` on ``device``
    (default: every device) and raise for the first that flagged bad values (module note).
    A device with no deferred call returns at once.

    Raises:
        TypeError / ValueError: ``device`` not None, a str or a torch.device naming a device.
        ValueError: a deferred call read NaN / +inf logits, an all ``-inf`` row, NaN, infinite
            or negative noise or temperatures; the message names its launch id and causes.
        RuntimeError: a launch never wrote its flags (the device failed).
    """
    devices = list(_SIGNALS) if device is None else [_device_key(device)]
    for key in devices:
        signal = _SIGNALS.get(key)
        if signal is not None:
            signal.collect()
