"""Boundary validation: what an adapter returns is checked before any test uses it.

:func:`validating` wraps the object an adapter offers for one capability of
:mod:`conformance.contract` in a proxy with the Protocol's methods. Each call goes to the
adapter's object with the arguments it was given (no optional argument added); what comes
back is checked against the Protocol's canonical form (type, dtype, shape from the call's
arguments, device, id range, finiteness where the SPEC requires it) and then handed to the
test as is (views stay views: SPEC S4 reads buffer addresses). A violation raises
:class:`BoundaryViolation`, an ``AssertionError``, so the case fails (it is not an error
of the suite) with a message naming the capability, the method, what was expected and
what came back::

    StepSampler.sample returned float32 [5], expected int64 [4] on cpu with ids in [0, 8)

Exceptions raised by the adapter (``ValueError`` for a rejected input, ``Inconclusive``)
pass through untouched, except that a ``NotImplementedError`` raised by one of the adapter's
methods (an unsupported feature, as the contract names it) comes out as
:class:`UnsupportedFeature`, a subclass naming the capability and the method: a test that
catches ``NotImplementedError`` still does, and the plugin reports a test it ends as a skip
with that name and the adapter's reason (never a pass, never a failure). The checks
are whole-tensor reductions (dtype, shape, min / max, NaN), never a Python loop over
elements, and run after a call has returned, never inside a CUDA-graph capture
(``FoldedSession.capture`` returns nothing). The plugin's ``require`` fixture applies
them, so no test has to.

Inputs unchanged (SPEC S5 invariance: an implementation leaves its inputs unchanged): every
call through a proxy (each capability's methods, and ``step`` of a simulated-acceptance
executor) first clones every tensor it is given, as an argument or inside one (items of
lists, tuples and mappings such as a ``state_dict``, fields of dataclasses, parameters and
buffers of an ``nn.Module`` such as the S9 tiny models), and after the call has returned
compares each with its clone exactly (``torch.equal``; a NaN that stays NaN is unchanged).
A CUDA tensor of at most ``HOST_COPY_ELEMENTS`` is copied to the host instead, before and
after the call, both copies read with the call's one wait on the device. Inside a
:func:`deferred_checks` block (a case's loop of thousands of serial calls) the CUDA checks
are read back in batches, not after each call.
A change fails the case, naming the argument and its first changed element::

    SimulatedBonus.simulated_bonus changed its argument target_logits in place (SPEC S5: inputs
    stay unchanged): first change at [0, 0, 0]: 28.0 -> 2800000.0 (23520 of 24000 elements differ)

Left out: the opaque handles (``head``, see ``_NOT_CHECKED``), which the IUT built and may
keep state in. No Protocol lets a method write into a tensor the caller passes: the S4
static buffers (``out``, ``corrected_out``) and the S6 correct-drafts buffer belong to the
IUT, and a view of them the caller holds is an output of an earlier call, never an
argument, so overwriting them is never flagged. Not checked exactly: tensors on the
``meta`` device (they hold no values), and calls made while the current CUDA stream is
capturing a graph (a clone or a comparison would be recorded into the graph, or sync).

To add a capability: write a ``_Validating<Name>`` class below (one method per Protocol
method, naming only the arguments its checks read and forwarding the rest as given;
``Expected`` records built from those arguments) and list it in ``_VALIDATORS``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
import types
import numbers
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Sequence

import torch

from . import contract as c

__all__ = ["BoundaryViolation", "UnsupportedFeature", "deferred_checks", "validating"]


class BoundaryViolation(AssertionError):
    """An adapter returned a value outside its capability's contract, or changed a tensor it
    was given (SPEC S5): the case fails."""


class UnsupportedFeature(NotImplementedError):
    """The adapter's ``NotImplementedError`` from ``where`` (``"Capability.method"``): the IUT
    lacks the feature that call needs. ``str()`` is the adapter's message."""

    def __init__(self, where: str, reason: str) -> None:
        super().__init__(reason)
        self.where = where


def _unsupported(where: str, exc: NotImplementedError) -> UnsupportedFeature:
    return exc if isinstance(exc, UnsupportedFeature) else UnsupportedFeature(where, str(exc))


# ----------------------------------------------------------------------------- inputs unchanged
# Arguments the input check leaves out, per "Capability.method": an opaque handle is the
# IUT's own object (from its load_head), which it may keep state in (caches, converted weights).
_NOT_CHECKED: dict[str, tuple[str, ...]] = {
    "MarkovBlock.sample_block": ("head",),
    "MarkovBlock.apply_block_logits": ("head",),
    "FoldedDraft.session": ("head",),
    "SpeculativeRound.round": ("head",),
}


_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


def _positional_names(function: Any, *, bound: bool) -> tuple[tuple[str, ...], str]:
    """The names of ``function``'s positional parameters (``self`` dropped unless ``bound``)
    and the name that numbers the positional arguments past them (``args[0]``, ...)."""
    names: list[str] = []
    rest = "args"
    for parameter in list(inspect.signature(function).parameters.values())[0 if bound else 1:]:
        if parameter.kind not in _POSITIONAL:
            rest = parameter.name if parameter.kind is inspect.Parameter.VAR_POSITIONAL else rest
            break
        names.append(parameter.name)
    return tuple(names), rest


@functools.cache
def _protocol_names(protocol: type, method: str) -> tuple[tuple[str, ...], str] | None:
    """:func:`_positional_names` of the Protocol's ``method``, or None if it has none."""
    function = getattr(protocol, method, None)
    return _positional_names(function, bound=False) if inspect.isfunction(function) else None


def _arguments(names: tuple[tuple[str, ...], str], args: tuple, kwargs: dict) -> list[tuple[str, Any]]:
    """``(name, value)`` of each argument of a call: positional ones named by ``names``
    (:func:`_positional_names`), keywords by their keyword."""
    positional, rest = names
    named = [(positional[i] if i < len(positional) else f"{rest}[{i - len(positional)}]", value)
             for i, value in enumerate(args)]
    return named + list(kwargs.items())


#: Argument types that hold no tensor: :func:`_tensors` returns on them at once. A call of the
#: S6 law cases passes four of them (value, method, max_len, generator), 110,000-250,000 calls
#: a case; the checks of Mapping (an ABC) and dataclasses cost 45 us a call there (2 cores).
_HOLDS_NO_TENSOR = (type(None), bool, int, float, complex, str, bytes, torch.Generator, torch.device, torch.dtype)
#: The exact types of ``_HOLDS_NO_TENSOR``: a call whose every argument has one of them takes
#: no tensor, so :meth:`_Forwarding._checked` calls it without the clone-and-compare check
#: (one set lookup an argument; an S6 law case makes 110,000-250,000 such calls).
_NO_TENSOR_TYPES = frozenset(_HOLDS_NO_TENSOR)


def _tensors(value: Any, path: str, found: dict[str, torch.Tensor], seen: set[int]) -> None:
    """Every tensor in ``value`` into ``found``, keyed by its path (``state_dict['W1.weight']``)."""
    if isinstance(value, torch.Tensor):  # first: torch.Generator's metaclass makes the next check slow
        if id(value) not in seen:
            seen.add(id(value))
            found[path] = value
        return
    if isinstance(value, _HOLDS_NO_TENSOR):  # the common arguments, before the slower checks below
        return
    if id(value) in seen:
        return
    seen.add(id(value))
    if isinstance(value, torch.nn.Module):
        for name, tensor in [*value.named_parameters(), *value.named_buffers()]:
            found.setdefault(f"{path}.{name}", tensor)
    elif isinstance(value, Mapping):
        for key, item in value.items():
            _tensors(item, f"{path}[{key!r}]", found, seen)
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            if not isinstance(item, _HOLDS_NO_TENSOR):  # a table of floats (an SPS curve) names no path
                _tensors(item, f"{path}[{i}]", found, seen)
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for field in dataclasses.fields(value):
            _tensors(getattr(value, field.name), f"{path}.{field.name}", found, seen)


def _inputs(where: str, arguments: list[tuple[str, Any]]) -> dict[str, torch.Tensor]:
    """The tensors a call receives, by path, less the opaque handles of ``_NOT_CHECKED``."""
    left_out = _NOT_CHECKED.get(where, ())
    found: dict[str, torch.Tensor] = {}
    seen: set[int] = set()
    for name, value in arguments:
        if name not in left_out:
            _tensors(value, name, found, seen)
    return {path: t for path, t in found.items() if t.device.type != "meta"}


#: A CUDA tensor of at most this many elements is checked on a host copy, taken without waiting
#: and read with the call's one wait, in place of a clone (6.8 us on an H100), a comparison and
#: its count (19.6 us) on the device: an S8 schedule call through the boundary took 151.0 us
#: where it took 169.6 us (results/perf/h100-session28/, s8bench-cuda.txt of calls A and B).
HOST_COPY_ELEMENTS = 4096


@dataclasses.dataclass(frozen=True)
class _HostCopy:
    """The values of a small CUDA tensor copied to the host before a call (readable once
    ``stream``, where the copy was queued, has been waited on), with the form of the tensor
    they came from."""

    values: torch.Tensor
    device: torch.device
    stream: torch.cuda.Stream

    @property
    def dtype(self) -> torch.dtype:
        return self.values.dtype

    @property
    def shape(self) -> torch.Size:
        return self.values.shape


def _copied_to_host(tensor: torch.Tensor) -> bool:
    """Whether the boundary checks ``tensor`` on a host copy (a CUDA tensor of at most
    :data:`HOST_COPY_ELEMENTS` elements)."""
    return tensor.is_cuda and tensor.numel() <= HOST_COPY_ELEMENTS


def _snapshot(tensor: torch.Tensor) -> torch.Tensor | _HostCopy:
    """What a call's input is compared with after the call: a clone on its device, or a
    :class:`_HostCopy` of a CUDA tensor of at most ``HOST_COPY_ELEMENTS`` elements."""
    tensor = tensor.detach()
    if _copied_to_host(tensor):
        return _HostCopy(tensor.to("cpu", non_blocking=True), tensor.device, torch.cuda.current_stream(tensor.device))
    return tensor.clone()


def _capturing(tensors: dict[str, torch.Tensor]) -> bool:
    """Whether the current CUDA stream is capturing a graph (never checked on a CPU-only call)."""
    return any(t.is_cuda for t in tensors.values()) and torch.cuda.is_current_stream_capturing()


def _same_form(before: torch.Tensor | _HostCopy, after: torch.Tensor) -> bool:
    """Same dtype, shape and device (a tensor of another form has changed, whatever its values)."""
    return (before.dtype, before.shape, before.device) == (after.dtype, after.shape, after.device)


def _change(before: torch.Tensor | _HostCopy, after: torch.Tensor, copy: torch.Tensor | None = None) -> str | None:
    """How ``after`` differs from ``before`` (its snapshot from before the call), or None.
    Exact (``torch.equal``): every changed value counts, except a NaN that stays NaN (its
    payload aside) and a zero that changes sign; a new dtype, shape or device counts too.
    ``copy``: ``after``'s host copy, read with ``before``'s where that is a :class:`_HostCopy`."""
    if not _same_form(before, after):
        return (f"{_name(before.dtype)} {list(before.shape)} on {before.device} became "
                f"{_name(after.dtype)} {list(after.shape)} on {after.device}")
    if isinstance(before, _HostCopy):
        before, after = before.values, copy
    after = after.detach()
    if torch.equal(before, after):
        return None
    differs = before != after
    if before.is_floating_point() or before.is_complex():
        differs &= ~(torch.isnan(before) & torch.isnan(after))
    count = int(differs.sum())
    if count == 0:
        return None
    index = tuple(differs.nonzero()[0].tolist())
    return (f"first change at {list(index)}: {before[index].item()!r} -> {after[index].item()!r} "
            f"({count} of {before.numel()} elements differ)")


def _check_unchanged(where: str, before: dict[str, torch.Tensor | _HostCopy], after: dict[str, torch.Tensor],
                     unchanged: set[str], copies: dict[str, torch.Tensor]) -> None:
    """Raises :class:`BoundaryViolation` naming the first argument whose tensor changed;
    ``unchanged``: paths already seen unchanged, ``copies``: host copies of the tensors now
    at the paths of host-copied inputs (:func:`_read`)."""
    for path, clone in before.items():
        if path in unchanged:
            continue
        now = after.get(path)
        change = "the tensor is gone" if now is None else _change(clone, now, copies.get(path))
        if change is not None:
            raise BoundaryViolation(_changed_in_place(where, path, change))


def _changed_in_place(where: str, path: str, change: str) -> str:
    return f"{where} changed its argument {path} in place (SPEC S5: inputs stay unchanged): {change}"


class _Pending(threading.local):
    """The input checks of the calls a validating method has made and not yet read back:
    ``calls`` of ``(where, snapshots by path, the arguments)``, the arguments as the tensors by
    path where each tensor was an argument itself, else as ``(name, value)`` pairs to walk
    again (:func:`_inputs`); ``depth``, how many validating methods are running (0: a call
    outside one checks its inputs at once)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, torch.Tensor | _HostCopy],
                               dict[str, torch.Tensor] | list[tuple[str, Any]]]] = []
        self.depth = 0


_PENDING = _Pending()


def _read(*values: torch.Tensor, wait: torch.device | None = None) -> list[float]:
    """The values of 0-d tensors, read back at once with the pending input checks (SPEC S5).

    On CUDA each read-back waits for the device; a validating method's checks therefore read
    once: the equality of every CUDA input with its snapshot (a count of differing elements
    on the device, or a host copy of a small one, :data:`HOST_COPY_ELEMENTS`) and the
    extremes its value rules need go back together (an S8 sampled case makes 146,499
    schedule calls). The inputs are judged first, in call and argument order, as they were
    checked before the outputs: a changed one raises :class:`BoundaryViolation` (a NaN that
    stayed NaN is judged unchanged by the exact test of :func:`_change`, to which the
    one-read count of differing elements leaves it). ``wait``: a CUDA device whose current
    stream is waited on too (a caller's host copy from it is then readable).

    Returns:
        Each value as a Python number, in order.
    """
    calls, _PENDING.calls = _PENDING.calls, []
    checks = [(where, before, now if isinstance(now, dict) else _inputs(where, now)) for where, before, now in calls]
    counted, copies = [], {}  # (check, path) of CUDA inputs compared on the device / host copies of them now
    for index, (_, before, after) in enumerate(checks):
        for path, snapshot in before.items():
            now = after.get(path)
            if now is None or not _same_form(snapshot, now):
                continue  # judged by _change's form test
            if isinstance(snapshot, _HostCopy):
                copies[index, path] = now.detach().to("cpu", non_blocking=True)
            elif snapshot.is_cuda:
                counted.append((index, path))
    differing = [(checks[i][1][path] != checks[i][2][path].detach()).sum() for i, path in counted]  # int64
    read = _read_back([*differing, *values])  # waits on the current stream of their device
    devices = {checks[i][1][path].device for i, path in copies} | {wait} - {None}
    streams = {checks[i][1][path].stream for i, path in copies} | {torch.cuda.current_stream(d) for d in devices}
    _wait_for(streams, read_back=[*differing, *values])
    unchanged = {key for key, count in zip(counted, read) if count == 0}
    unchanged |= {(i, path) for (i, path), copy in copies.items()
                  if _change(checks[i][1][path], checks[i][2][path], copy) is None}
    for index, (where, before, after) in enumerate(checks):
        _check_unchanged(where, before, after, {path for i, path in unchanged if i == index},
                         {path: copy for (i, path), copy in copies.items() if i == index})
    return read[len(differing):]


def _wait_for(streams: set[torch.cuda.Stream], *, read_back: Sequence[torch.Tensor]) -> None:
    """Wait on each of ``streams`` that the read-back of ``read_back`` (:func:`_read_back`, which
    waits on the current stream of their device) has not waited on already."""
    waited = {torch.cuda.current_stream(v.device) for v in read_back if v.is_cuda}
    for stream in streams - waited:
        stream.synchronize()


def _read_back(values: list[torch.Tensor]) -> list[float | int]:
    """0-d tensors' values: on the CPU (or across devices) each as it is, else one read-back
    where they share a device (through float64 where their dtypes differ: exact for integers
    below 2^53)."""
    if not values:
        return []
    devices = {v.device for v in values}
    if len(devices) > 1 or devices == {torch.device("cpu")}:  # nothing to wait for on the CPU
        return [v.item() for v in values]
    if len({v.dtype for v in values}) > 1:  # one dtype (the int64 counts and extremes of ids) needs no conversion
        values = [v.double() for v in values]
    return torch.stack(values).tolist()


# ----------------------------------------------------------------------------- deferred checks
@dataclasses.dataclass(frozen=True)
class _Check:
    """A check of a :func:`deferred_checks` block, judged when the block reads back: ``call``,
    the block's 1-based count of the validating call that made it; ``values``, 0-d tensors
    to read back; ``streams``, CUDA streams whose queued host copies ``judge`` reads;
    ``judge(numbers)``, the violation given ``values`` as numbers, or None."""

    call: int
    values: tuple[torch.Tensor, ...]
    streams: tuple[torch.cuda.Stream, ...]
    judge: Callable[[list[float | int]], str | None]


class _Deferred(threading.local):
    """The open :func:`deferred_checks` block of this thread: ``checks`` not yet read back
    (None: no block open, every call is checked as it returns) and ``calls``, its validating
    calls that have returned."""

    def __init__(self) -> None:
        self.checks: list[_Check] | None = None
        self.calls = 0


_DEFERRED = _Deferred()

#: A :func:`deferred_checks` block reads its checks back whenever this many are queued (each
#: holds a few 0-d tensors or host copies) and at its end.
DEFERRED_CHECKS_PER_READ = 4096


@contextlib.contextmanager
def deferred_checks() -> Iterator[None]:
    """A block whose calls through validating proxies are checked without waiting on the device.

    The checks are the same as outside the block (inputs unchanged, SPEC S5; outputs of the
    canonical form). On CUDA their evidence is taken as each call returns (a host copy of a
    small input or output, :data:`HOST_COPY_ELEMENTS`, or a count or extremes on its device)
    and read back with the block's other checks every :data:`DEFERRED_CHECKS_PER_READ` and
    when the block ends, so a loop of thousands of serial calls (S6 executor steps, S8
    schedule calls) does not wait on the device after each. What needs no device values (a
    returned type, dtype, shape or device), a value rule other than id and count ranges, and
    every check of CPU tensors (nothing to wait for) are judged as the call returns, as
    outside a block. Blocks nest (the outermost reads).

    Raises:
        BoundaryViolation: on leaving the block (or at a read within it), the first violation
            in call order, its message ending with the call's number in the block. It takes
            precedence over an exception leaving the block, which becomes its context.

    Example:
        >>> with deferred_checks():
        ...     lengths = [scheduler.schedule(confidences, sps) for _ in range(1000)]  # doctest: +SKIP
    """
    if _DEFERRED.checks is not None:
        yield
        return
    _DEFERRED.checks, _DEFERRED.calls = [], 0
    try:
        yield
    finally:
        try:
            _read_deferred()
        finally:
            _DEFERRED.checks = None


def _deferring(tensors: Iterable[torch.Tensor]) -> bool:
    """Whether the checks of ``tensors`` are queued: inside a :func:`deferred_checks` block,
    for CUDA tensors (on the CPU nothing waits, and queuing costs more than checking)."""
    return _DEFERRED.checks is not None and any(t.is_cuda for t in tensors)


def _defer(values: Sequence[torch.Tensor], streams: Sequence[torch.cuda.Stream],
           judge: Callable[[list[float | int]], str | None]) -> None:
    _DEFERRED.checks.append(_Check(_DEFERRED.calls + 1, tuple(values), tuple(streams), judge))


def _defer_extremes(value: torch.Tensor, judge: Callable[[int, int], str | None]) -> None:
    """Queues ``judge(min, max)`` of an integer tensor (read from a host copy where it is a small
    CUDA tensor, as :func:`_extremes` does)."""
    if _copied_to_host(value):
        copy = value.to("cpu", non_blocking=True)
        _defer((), (torch.cuda.current_stream(value.device),), lambda _: judge(*map(int, torch.aminmax(copy))))
    else:
        _defer(torch.aminmax(value), (), lambda read: judge(int(read[0]), int(read[1])))


def _defer_unchanged(where: str, before: dict[str, torch.Tensor | _HostCopy], after: dict[str, torch.Tensor]) -> None:
    """Queues the comparison of each input with its snapshot from before the call; a tensor
    gone or of a new form is judged at once (no value to read)."""
    for path, snapshot in before.items():
        now = after.get(path)
        if now is None or not _same_form(snapshot, now):
            _check_unchanged(where, {path: snapshot}, after, set(), {})  # raises: gone, or of a new form
        now = now.detach()
        if isinstance(snapshot, _HostCopy):
            copy = now.to("cpu", non_blocking=True)
            streams = (snapshot.stream, torch.cuda.current_stream(now.device))
            _defer((), streams, functools.partial(_judge_copy, where, path, snapshot, now, copy))
        else:
            _defer(((snapshot != now).sum(),), (), functools.partial(_judge_count, where, path, snapshot, now))


def _judge_copy(where: str, path: str, snapshot: _HostCopy, now: torch.Tensor, copy: torch.Tensor,
                _: list) -> str | None:
    change = _change(snapshot, now, copy)
    return None if change is None else _changed_in_place(where, path, change)


def _judge_count(where: str, path: str, snapshot: torch.Tensor, now: torch.Tensor, read: list) -> str | None:
    """A count of differing elements taken as the call returned; where it is not 0, the exact
    test of :func:`_change` on the tensor as it is now words it (a NaN that stayed NaN is
    unchanged)."""
    if read[0] == 0:
        return None
    change = _change(snapshot, now)
    return None if change is None else _changed_in_place(where, path, change)


def _read_deferred() -> None:
    """Reads back the queued checks of the open block in one wait (a device's 0-d tensors
    stacked, its host copies' streams waited on) and raises the first violation."""
    checks, _DEFERRED.checks = _DEFERRED.checks, []
    values = [v for check in checks for v in check.values]
    read = _read_back(values)
    _wait_for({s for check in checks for s in check.streams}, read_back=values)
    offset = 0
    for check in checks:
        problem = check.judge(read[offset:offset + len(check.values)])
        offset += len(check.values)
        if problem is not None:
            raise BoundaryViolation(f"{problem} (call {check.call} of a deferred_checks block)")


def _returned() -> None:
    """A validating call has returned: read its input checks back, or count it in the open
    :func:`deferred_checks` block and read the block's checks once enough are queued."""
    if _PENDING.calls:
        _read()
    if _DEFERRED.checks is not None:
        _DEFERRED.calls += 1
        if len(_DEFERRED.checks) >= DEFERRED_CHECKS_PER_READ:
            _read_deferred()


def _settles(method: Callable[..., Any]) -> Callable[..., Any]:
    """``method`` of a validating proxy, its calls' input checks read back before it returns
    or raises (a changed input takes precedence over what the method raised), or queued in
    the open :func:`deferred_checks` block."""

    @functools.wraps(method)
    def settled(*args: Any, **kwargs: Any) -> Any:
        _PENDING.depth += 1
        try:
            return method(*args, **kwargs)
        finally:
            _PENDING.depth -= 1
            if not _PENDING.depth:
                _returned()

    return settled


def _settling(cls: type) -> type:
    """Wraps each public method and property of ``cls`` with :func:`_settles`."""
    for name, member in list(vars(cls).items()):
        if name.startswith("_"):
            continue
        if isinstance(member, property) and member.fget is not None:
            setattr(cls, name, property(_settles(member.fget), doc=member.__doc__))
        elif inspect.isfunction(member):
            setattr(cls, name, _settles(member))
    return cls


class _Forwarding:
    """The adapter's object as a boundary proxy calls it: every attribute is the adapter's;
    a ``NotImplementedError`` from a method call or an attribute read becomes
    :class:`UnsupportedFeature` naming ``owner.attribute``. Every method call leaves the
    tensors it receives unchanged (SPEC S5), or raises :class:`BoundaryViolation`; the
    arguments are named by ``protocol``'s signature of the method (else by the adapter's)."""

    def __init__(self, impl: Any, owner: str, protocol: type | None = None) -> None:
        self._impl, self._owner, self._protocol = impl, owner, protocol
        # name -> (function, instance, checked call) of the last bound method read: a bound
        # method is a new object at every read, its checked call is made once (S6's law
        # cases call sample_acc_len 100,000-250,000 times).
        self._calls: dict[str, tuple[Any, Any, Callable[..., Any]]] = {}

    def __getattr__(self, name: str) -> Any:
        try:
            value = getattr(self._impl, name)
        except NotImplementedError as exc:
            raise _unsupported(f"{self._owner}.{name}", exc) from exc
        if not callable(value):
            return value
        if not isinstance(value, types.MethodType):
            return self._checked(f"{self._owner}.{name}", name, value)
        function, instance, call = self._calls.get(name, (None, None, None))
        if function is not value.__func__ or instance is not value.__self__:
            call = self._checked(f"{self._owner}.{name}", name, value)
            self._calls[name] = (value.__func__, value.__self__, call)
        return call

    def _checked(self, where: str, name: str, value: Callable[..., Any]) -> Callable[..., Any]:
        """``value`` (the adapter's attribute ``name``) called with its inputs checked."""
        names = None if self._protocol is None else _protocol_names(self._protocol, name)
        if names is None:
            try:
                names = _positional_names(value, bound=True)
            except (TypeError, ValueError):  # no signature to read: arguments by position
                names = ((), "args")

        @functools.wraps(value)
        def call(*args: Any, **kwargs: Any) -> Any:
            if _NO_TENSOR_TYPES.issuperset(map(type, args)) and (
                    not kwargs or _NO_TENSOR_TYPES.issuperset(map(type, kwargs.values()))):  # no tensor to check
                try:
                    return value(*args, **kwargs)
                except NotImplementedError as exc:
                    raise _unsupported(where, exc) from exc
            arguments = _arguments(names, args, kwargs)
            inputs = _inputs(where, arguments)
            checked = not _capturing(inputs)
            before = {path: _snapshot(t) for path, t in inputs.items()} if checked else {}
            try:
                out = value(*args, **kwargs)
            except NotImplementedError as exc:
                raise _unsupported(where, exc) from exc
            if before:  # none when the call took no tensor (or a graph capture left them unchecked)
                # Tensors passed as arguments themselves stay the caller's objects: where every
                # checked tensor was one (its path is the argument's name), no second walk.
                flat = before.keys() <= {name for name, _ in arguments}
                if _deferring(inputs.values()):
                    _defer_unchanged(where, before, inputs if flat else _inputs(where, arguments))
                else:
                    _PENDING.calls.append((where, before, inputs if flat else arguments))
            if not _PENDING.depth:  # outside a validating method: no output check to read with
                _returned()
            return out

        return call

    def __repr__(self) -> str:
        return repr(self._impl)


# ----------------------------------------------------------------------------- value rules
def _extremes(value: torch.Tensor) -> tuple[int, int]:
    """``(min, max)`` of an integer tensor, read back at once (from a host copy where it is a
    small CUDA tensor, :data:`HOST_COPY_ELEMENTS`)."""
    if _copied_to_host(value):
        copy = value.detach().to("cpu", non_blocking=True)
        _read(wait=value.device)
        low, high = torch.aminmax(copy)
    else:
        low, high = _read(*torch.aminmax(value))
    return int(low), int(high)


@dataclasses.dataclass(frozen=True)
class Ids:
    """Integers in ``[low, high)`` (token ids; ``low = -1`` admits the padding sentinel)."""

    low: int
    high: int

    def __str__(self) -> str:
        return f"ids in [{self.low}, {self.high})"

    def violation(self, value: torch.Tensor) -> str | None:
        return self.judge(*_extremes(value))

    def judge(self, low: int, high: int) -> str | None:
        """The violation of a tensor whose extremes are ``low`` and ``high``, or None."""
        return None if self.low <= low and high < self.high else f"ids in [{low}, {high}]"


@dataclasses.dataclass(frozen=True)
class Counts:
    """Integers in the closed range ``[low, high]`` (accepted counts, lengths)."""

    low: int
    high: int

    def __str__(self) -> str:
        return f"values in [{self.low}, {self.high}]"

    def violation(self, value: torch.Tensor) -> str | None:
        return self.judge(*_extremes(value))

    def judge(self, low: int, high: int) -> str | None:
        """The violation of a tensor whose extremes are ``low`` and ``high``, or None."""
        return None if self.low <= low and high <= self.high else f"values in [{low}, {high}]"


@dataclasses.dataclass(frozen=True)
class Probabilities:
    """Floats in ``[0, 1]``, no NaN (confidences and survivals, SPEC S7)."""

    def __str__(self) -> str:
        return "values in [0, 1]"

    def violation(self, value: torch.Tensor) -> str | None:
        nan, low, high = _read(torch.isnan(value).sum(), *torch.aminmax(value))
        if nan:
            return f"NaN at {int(nan)} of {value.numel()} entries"
        return None if 0.0 <= low and high <= 1.0 else f"values in [{low:.6g}, {high:.6g}]"


@dataclasses.dataclass(frozen=True)
class Positive:
    """Finite floats ``> 0`` (STS temperatures, SPEC S7)."""

    def __str__(self) -> str:
        return "finite values > 0"

    def violation(self, value: torch.Tensor) -> str | None:
        bad = ~torch.isfinite(value) | (value <= 0)
        (count,) = _read(bad.sum())
        count = int(count)
        return f"{count} of {value.numel()} entries not finite and > 0, e.g. {float(value[bad][0])}" if count else None


@dataclasses.dataclass(frozen=True, eq=False)
class LogitsOf:
    """Logits with no NaN and no +inf where ``inputs`` (the base logits) have none; -inf
    (a masked token) is allowed (SPEC S2: ``L_k = U_k + bias_k`` with a finite bias)."""

    inputs: torch.Tensor

    def __str__(self) -> str:
        return "no NaN or +inf (the base logits have none)"

    def violation(self, value: torch.Tensor) -> str | None:
        bad = int(_read((torch.isnan(value) | torch.isposinf(value)).sum())[0])
        if not bad or bool((torch.isnan(self.inputs) | torch.isposinf(self.inputs)).any()):
            return None
        return f"NaN or +inf at {bad} of {value.numel()} entries"


# ----------------------------------------------------------------------------- tensors
def _name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _form(value: torch.Tensor, device_ok: bool) -> str:
    """How a returned tensor is named in a violation: dtype, shape, and its device if wrong."""
    return f"{_name(value.dtype)} {list(value.shape)}" + ("" if device_ok else f" on {value.device}")


def _same_device(got: torch.device, want: torch.device) -> bool:
    """Same type, and the same index where ``want`` names one (``cuda`` matches ``cuda:0``)."""
    return got.type == want.type and (want.index is None or got.index == want.index)


@dataclasses.dataclass(frozen=True)
class Expected:
    """The canonical form of one returned tensor.

    Attributes:
        dtypes: the allowed dtypes; empty means any floating dtype.
        shape: sizes; a ``str`` entry names a size that any value matches (e.g. ``"rounds"``).
        device: where it must live (an index-free ``cuda`` matches any CUDA device).
        values: a value rule (:class:`Ids`, :class:`Counts`, :class:`Probabilities`,
            :class:`Positive`, :class:`LogitsOf`) or None.
    """

    dtypes: tuple[torch.dtype, ...]
    shape: tuple[int | str, ...]
    device: torch.device
    values: Any = None

    def __str__(self) -> str:
        dtypes = " or ".join(_name(d) for d in dict.fromkeys(self.dtypes)) or "a floating dtype"
        text = f"{dtypes} [{', '.join(str(s) for s in self.shape)}] on {self.device}"
        return text if self.values is None else f"{text} with {self.values}"

    def check(self, where: str, value: Any, what: str = "") -> torch.Tensor:
        """``value`` if it has this form; ``what`` names it among a call's outputs.

        Raises:
            BoundaryViolation: ``{where} returned [what] <what came back>, expected [what]
                <this form>``.
        """
        what = f"{what} " if what else ""
        if not isinstance(value, torch.Tensor):
            raise BoundaryViolation(
                f"{where} returned {what}{type(value).__name__}, expected {what}a torch.Tensor {self}"
            )
        dtype_ok = value.dtype in self.dtypes if self.dtypes else value.is_floating_point()
        shape_ok = value.dim() == len(self.shape) and all(
            isinstance(want, str) or want == got for want, got in zip(self.shape, value.shape)
        )
        device_ok = _same_device(value.device, self.device)
        if not (dtype_ok and shape_ok and device_ok):
            raise BoundaryViolation(f"{where} returned {what}{_form(value, device_ok)}, expected {what}{self}")
        if self.values is None or value.numel() == 0:
            return value
        if isinstance(self.values, (Ids, Counts)) and _deferring((value,)):
            rule = self.values
            _defer_extremes(value.detach(), lambda low, high: self._said(where, what, value, rule.judge(low, high)))
            return value
        problem = self._said(where, what, value, self.values.violation(value.detach()))
        if problem is not None:
            raise BoundaryViolation(problem)
        return value

    def _said(self, where: str, what: str, value: torch.Tensor, problem: str | None) -> str | None:
        """The violation a value rule found in ``value`` (of the right form), in words; None for none."""
        return None if problem is None else (f"{where} returned {what}{_form(value, True)} with {problem}, "
                                             f"expected {what}{self}")


def _pair(where: str, value: Any, names: Sequence[str]) -> tuple:
    """``value`` as a tuple of ``len(names)`` items, or a violation naming them."""
    if not isinstance(value, (tuple, list)) or len(value) != len(names):
        shown = type(value).__name__ + (f" of {len(value)}" if isinstance(value, (tuple, list)) else "")
        raise BoundaryViolation(f"{where} returned {shown}, expected a tuple ({', '.join(names)})")
    return tuple(value)


def _integer(where: str, value: Any, low: int, high: int | None = None) -> Any:
    """``value`` if it is an integer (not a bool) in ``[low, high]`` (``high`` None: no bound)."""
    if type(value) is int and low <= value and (high is None or value <= high):  # the common case, first
        return value
    bound = f">= {low}" if high is None else f"in [{low}, {high}]"
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise BoundaryViolation(f"{where} returned {type(value).__name__} {value!r}, expected an int {bound}")
    if value < low or (high is not None and value > high):
        raise BoundaryViolation(f"{where} returned {value}, expected an int {bound}")
    return value


def _flag(where: str, value: Any, what: str = "") -> bool:
    """``value`` if it is a bool; ``what`` names it among a call's outputs."""
    what = f"{what} " if what else ""
    if not isinstance(value, bool):
        raise BoundaryViolation(f"{where} returned {what}{type(value).__name__} {value!r}, expected {what}a bool")
    return value


def _ints(*shape: int | str, device: torch.device, values: Any) -> Expected:
    return Expected((torch.int64,), shape, device, values)


# ----------------------------------------------------------------------------- proxies
class _Validating:
    """Base proxy: holds the adapter's object; ``_where(method)`` names a call. A subclass's
    public methods read their calls' input checks back with their own (:func:`_settling`)."""

    capability: type

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        _settling(cls)

    def __init__(self, impl: Any) -> None:
        self._impl = _Forwarding(impl, self.capability.__name__, self.capability)

    def _where(self, method: str) -> str:
        return f"{self.capability.__name__}.{method}"

    def __repr__(self) -> str:
        return f"validating({self.capability.__name__}, {self._impl!r})"


class _ValidatingStepSampler(_Validating):
    capability = c.StepSampler

    def sample(self, logits, temperatures, top_k, vocab_size, *args, **kwargs):
        out = self._impl.sample(logits, temperatures, top_k, vocab_size, *args, **kwargs)
        return _ints(logits.shape[0], device=logits.device, values=Ids(0, vocab_size)).check(self._where("sample"), out)


class _ValidatingNoiseStepSampler(_Validating):
    capability = c.NoiseStepSampler

    def sample_with_noise(self, logits, *args, **kwargs):
        out = self._impl.sample_with_noise(logits, *args, **kwargs)
        expected = _ints(logits.shape[0], device=logits.device, values=Ids(0, logits.shape[-1]))
        return expected.check(self._where("sample_with_noise"), out)


class _ValidatingTruncatedStepSampler(_Validating):
    capability = c.TruncatedStepSampler

    def sample_truncated(self, logits, *args, **kwargs):
        out = self._impl.sample_truncated(logits, *args, **kwargs)
        expected = _ints(logits.shape[0], device=logits.device, values=Ids(0, logits.shape[-1]))
        return expected.check(self._where("sample_truncated"), out)


def _corrected(base_logits: torch.Tensor) -> Expected:
    """Corrected logits of ``base_logits [B, gamma, V]`` (SPEC S2): float32 or the base
    logits' dtype, on their device."""
    return Expected((torch.float32, base_logits.dtype), tuple(base_logits.shape), base_logits.device,
                    LogitsOf(base_logits))


class _ValidatingMarkovBlock(_Validating):
    capability = c.MarkovBlock

    def load_head(self, *args, **kwargs):
        return self._impl.load_head(*args, **kwargs)  # an opaque handle

    def sample_block(self, head, base_logits, *args, **kwargs):
        where = self._where("sample_block")
        out = self._impl.sample_block(head, base_logits, *args, **kwargs)
        tokens, corrected = _pair(where, out, ("tokens", "corrected_logits"))
        batch, gamma, vocab = base_logits.shape
        _ints(batch, gamma, device=base_logits.device, values=Ids(0, vocab)).check(where, tokens, "tokens")
        _corrected(base_logits).check(where, corrected, "corrected_logits")
        return out

    def apply_block_logits(self, head, base_logits, *args, **kwargs):
        out = self._impl.apply_block_logits(head, base_logits, *args, **kwargs)
        return _corrected(base_logits).check(self._where("apply_block_logits"), out)


class _ValidatingDraftLayouts(_Validating):
    capability = c.DraftLayouts

    def draft_block(self, head_type, state_dict, base_logits, *args, layout, vocab_size, **kwargs):
        where = self._where("draft_block")
        out = self._impl.draft_block(head_type, state_dict, base_logits, *args, layout=layout,
                                     vocab_size=vocab_size, **kwargs)
        tokens, corrected = _pair(where, out, ("tokens", "corrected_logits"))
        batch, queries, _ = base_logits.shape
        gamma = queries - 1 if layout == "bonus-anchor" else queries
        _ints(batch, gamma, device=base_logits.device, values=Ids(0, vocab_size)).check(where, tokens, "tokens")
        Expected((torch.float32, base_logits.dtype), (batch, gamma, vocab_size), base_logits.device,
                 LogitsOf(base_logits)).check(where, corrected, "corrected_logits")
        return out


class _ValidatingFoldedSession(_Validating):
    """A session of :class:`_ValidatingFoldedDraft`: ``replay`` is checked against the
    session's ``gamma``, ``vocab_size``, ``lm_dtype``, ``device`` and the batch size of
    the last ``stage`` / ``load_inputs`` (``max_bs`` before either)."""

    capability = c.FoldedSession

    def __init__(self, impl: Any, *, max_bs: int, gamma: int, vocab_size: int, lm_dtype: torch.dtype,
                 device: torch.device) -> None:
        super().__init__(impl)
        self._bs, self._gamma, self._vocab, self._dtype, self._device = max_bs, gamma, vocab_size, lm_dtype, device
        self._base: torch.Tensor | None = None

    @property
    def graph_replays(self) -> int:
        return _integer(self._where("graph_replays"), self._impl.graph_replays, 0)

    @property
    def sample_block_calls(self) -> int | None:
        calls = self._impl.sample_block_calls
        return None if calls is None else _integer(self._where("sample_block_calls"), calls, 0)

    def stage(self, bs, *args, **kwargs):
        self._bs = bs
        return self._impl.stage(bs, *args, **kwargs)

    def load_inputs(self, base_logits, *args, **kwargs):
        self._bs, self._base = base_logits.shape[0], base_logits
        return self._impl.load_inputs(base_logits, *args, **kwargs)

    def capture(self, *args, **kwargs):
        return self._impl.capture(*args, **kwargs)

    def replay(self, *args, **kwargs):
        where = self._where("replay")
        out = self._impl.replay(*args, **kwargs)
        tokens, corrected = _pair(where, out, ("tokens", "corrected"))
        shape = (self._bs, self._gamma)
        _ints(*shape, device=self._device, values=Ids(0, self._vocab)).check(where, tokens, "tokens")
        rule = None if self._base is None else LogitsOf(self._base)
        Expected((self._dtype,), (*shape, self._vocab), self._device, rule).check(where, corrected, "corrected")
        return out


class _ValidatingFoldedDraft(_Validating):
    capability = c.FoldedDraft

    def session(self, head, max_bs, gamma, vocab_size, lm_dtype, device, *args, **kwargs):
        out = self._impl.session(head, max_bs, gamma, vocab_size, lm_dtype, device, *args, **kwargs)
        if not isinstance(out, c.FoldedSession):
            raise BoundaryViolation(
                f"{self._where('session')} returned {type(out).__name__}, expected a FoldedSession (stage, "
                "load_inputs, capture, replay, graph_replays, sample_block_calls)"
            )
        return _ValidatingFoldedSession(out, max_bs=max_bs, gamma=gamma, vocab_size=vocab_size,
                                        lm_dtype=lm_dtype, device=torch.device(device))


class _ValidatingFoldGate(_Validating):
    capability = c.FoldGate

    def buffer_bytes(self, *args, **kwargs):
        return _integer(self._where("buffer_bytes"), self._impl.buffer_bytes(*args, **kwargs), 0)

    def folds_sampling(self, *args, **kwargs):
        return _flag(self._where("folds_sampling"), self._impl.folds_sampling(*args, **kwargs))


class _ValidatingFoldRouting(_Validating):
    capability = c.FoldRouting

    def route(self, *args, **kwargs):
        where = self._where("route")
        out = self._impl.route(*args, **kwargs)
        for name, flag in zip(("folded_draft", "eager_accept"), _pair(where, out, ("folded_draft", "eager_accept"))):
            _flag(where, flag, name)
        return out


def _committed(where: str, out: Any, draft_tokens: torch.Tensor, vocab: int) -> Any:
    """SPEC S5 result: ``accepted[B]`` int64 in ``[0, l]``, ``tokens[B, l+1]`` int64 ids
    in ``[-1, V)`` (-1 pads after the emitted token), on the drafts' device."""
    accepted, tokens = _pair(where, out, ("accepted", "tokens"))
    batch, num_drafts = draft_tokens.shape
    _ints(batch, device=draft_tokens.device, values=Counts(0, num_drafts)).check(where, accepted, "accepted")
    _ints(batch, num_drafts + 1, device=draft_tokens.device, values=Ids(-1, vocab)).check(where, tokens, "tokens")
    return out


class _ValidatingChainVerifier(_Validating):
    capability = c.ChainVerifier

    def verify(self, draft_tokens, target_logits, *args, **kwargs):
        out = self._impl.verify(draft_tokens, target_logits, *args, **kwargs)
        return _committed(self._where("verify"), out, draft_tokens, target_logits.shape[-1])


class _ValidatingTruncatedChainVerifier(_Validating):
    capability = c.TruncatedChainVerifier

    def verify_truncated(self, draft_tokens, target_logits, *args, **kwargs):
        out = self._impl.verify_truncated(draft_tokens, target_logits, *args, **kwargs)
        return _committed(self._where("verify_truncated"), out, draft_tokens, target_logits.shape[-1])


class _ValidatingGreedyVerifier(_Validating):
    capability = c.GreedyVerifier

    def verify_greedy(self, draft_tokens, target_logits, *args, **kwargs):
        out = self._impl.verify_greedy(draft_tokens, target_logits, *args, **kwargs)
        return _committed(self._where("verify_greedy"), out, draft_tokens, target_logits.shape[-1])


@_settling
class _ValidatingExecutor:
    """The verify-step executor of :class:`_ValidatingSimulatedAcceptance` (SPEC S6)."""

    def __init__(self, impl: Any, gamma: int) -> None:
        self._impl, self._gamma = _Forwarding(impl, "SimulatedAcceptance.executor()"), gamma
        self._drafts: torch.Tensor | None = None

    def step(self, draft_tokens):
        out = self._impl.step(draft_tokens)
        self._drafts = draft_tokens
        expected = _ints(draft_tokens.shape[0], device=draft_tokens.device, values=Counts(1, self._gamma + 1))
        return expected.check("SimulatedAcceptance.executor().step", out)

    @property
    def correct_drafts(self):
        out = self._impl.correct_drafts
        if self._drafts is None:  # defined only after a step
            return out
        drafts = self._drafts
        highest = int(drafts.max()) if drafts.numel() else -1
        expected = Expected((torch.int64, drafts.dtype), tuple(drafts.shape), drafts.device, Counts(-1, highest))
        return expected.check("SimulatedAcceptance.executor().correct_drafts", out)


class _ValidatingSimulatedAcceptance(_Validating):
    capability = c.SimulatedAcceptance

    def sample_acc_len(self, value, method, max_len, *args, **kwargs):
        out = self._impl.sample_acc_len(value, method, max_len, *args, **kwargs)
        return _integer(self._where("sample_acc_len"), out, 1, max_len)

    def executor(self, value, method, gamma, *args, **kwargs):
        out = self._impl.executor(value, method, gamma, *args, **kwargs)
        if not callable(getattr(out, "step", None)):
            raise BoundaryViolation(
                f"{self._where('executor')} returned {type(out).__name__}, expected an object with "
                "step(draft_tokens) and correct_drafts"
            )
        return _ValidatingExecutor(out, gamma)


class _ValidatingSimulatedAcceptanceBatch(_Validating):
    capability = c.SimulatedAcceptanceBatch

    def sample_acc_lens(self, value, method, max_len, n, *args, **kwargs):
        out = self._impl.sample_acc_lens(value, method, max_len, n, *args, **kwargs)
        expected = _ints(n, device=torch.device("cpu"), values=Counts(1, max_len))
        return expected.check(self._where("sample_acc_lens"), out)


class _ValidatingSimulatedBonus(_Validating):
    capability = c.SimulatedBonus

    def simulated_bonus(self, target_logits, *args, **kwargs):
        out = self._impl.simulated_bonus(target_logits, *args, **kwargs)
        rows, _, vocab = target_logits.shape
        expected = _ints(rows, device=target_logits.device, values=Ids(0, vocab))
        return expected.check(self._where("simulated_bonus"), out)


class _ValidatingConfidence(_Validating):
    capability = c.Confidence

    def confidences(self, state_dict, hidden, *args, **kwargs):
        out = self._impl.confidences(state_dict, hidden, *args, **kwargs)
        expected = Expected((), tuple(hidden.shape[:2]), hidden.device, Probabilities())
        return expected.check(self._where("confidences"), out)

    def prefix_survival(self, confidences):
        out = self._impl.prefix_survival(confidences)
        expected = Expected((), tuple(confidences.shape), confidences.device, Probabilities())
        return expected.check(self._where("prefix_survival"), out)

    def fit_sts(self, raw, *args, **kwargs):
        out = self._impl.fit_sts(raw, *args, **kwargs)
        return Expected((), (raw.shape[-1],), raw.device, Positive()).check(self._where("fit_sts"), out)


class _ValidatingPrefixScheduler(_Validating):
    capability = c.PrefixScheduler

    def schedule(self, confidences, *args, **kwargs):
        out = self._impl.schedule(confidences, *args, **kwargs)
        rows, gamma = confidences.shape
        return _ints(rows, device=confidences.device, values=Counts(0, gamma)).check(self._where("schedule"), out)


@dataclasses.dataclass(frozen=True)
class Between:
    """Integers between two per-row bounds (``[R]`` tensors), inclusive."""

    low: torch.Tensor
    high: torch.Tensor

    def __str__(self) -> str:
        return f"values in [min_lengths, max_lengths] = {list(zip(self.low.tolist(), self.high.tolist()))}"

    def violation(self, value: torch.Tensor) -> str | None:
        inside = bool(_read(((value >= self.low) & (value <= self.high)).all())[0])
        return None if inside else f"values {value.tolist()}"


class _ValidatingProductionScheduler(_Validating):
    capability = c.ProductionScheduler

    def schedule_production(self, stale_confidences, confidences, cost, min_lengths, max_lengths):
        out = self._impl.schedule_production(stale_confidences, confidences, cost, min_lengths, max_lengths)
        rows, device = stale_confidences.shape[0], stale_confidences.device
        expected = _ints(rows, device=device, values=Between(min_lengths, max_lengths))
        return expected.check(self._where("schedule_production"), out)


class _ValidatingSpeculativeLoop(_Validating):
    capability = c.SpeculativeLoop

    def generate(self, target, draft, prompt, max_new_tokens, *args, **kwargs):
        where = self._where("generate")
        out = self._impl.generate(target, draft, prompt, max_new_tokens, *args, **kwargs)
        _check_generation(where, _pair(where, out, _GENERATION), target, draft, prompt, max_new_tokens,
                          kwargs.get("gamma"))
        return out


_GENERATION = ("tokens", "accept_lengths", "verify_lengths")


def _check_generation(where, outputs, target, draft, prompt, max_new_tokens, gamma) -> tuple[int, int, int]:
    """Checks ``SpeculativeLoop.generate``'s three outputs (the head of ``generate_recorded``'s
    five); returns ``(rows, rounds, block)``."""
    tokens, taus, lengths = outputs[:3]
    rows, device, block = prompt.shape[0], prompt.device, draft.gamma if gamma is None else gamma
    _ints(rows, max_new_tokens, device=device, values=Ids(0, target.vocab_size)).check(where, tokens, "tokens")
    _ints(rows, "rounds", device=device, values=Counts(0, block + 1)).check(where, taus, "accept_lengths")
    rounds = taus.shape[1]
    _ints(rows, rounds, device=device, values=Counts(0, block)).check(where, lengths, "verify_lengths")
    return rows, rounds, block


class _ValidatingSpeculativeLoopRecord(_Validating):
    capability = c.SpeculativeLoopRecord

    def generate_recorded(self, target, draft, prompt, max_new_tokens, *args, **kwargs):
        where = self._where("generate_recorded")
        out = self._impl.generate_recorded(target, draft, prompt, max_new_tokens, *args, **kwargs)
        outputs = _pair(where, out, _GENERATION + ("draft_tokens", "confidences"))
        rows, rounds, block = _check_generation(where, outputs, target, draft, prompt, max_new_tokens,
                                                kwargs.get("gamma"))
        drafts, confidences, device = outputs[3], outputs[4], prompt.device
        _ints(rows, rounds, block, device=device, values=Ids(0, target.vocab_size)).check(where, drafts,
                                                                                        "draft_tokens")
        Expected((), (rows, rounds, block), device, Probabilities()).check(where, confidences, "confidences")
        return out


@dataclasses.dataclass(frozen=True)
class Laws:
    """Probability vectors over the last axis: entries in ``[0, 1]``, no NaN, each summing
    to 1 within ``tolerance`` (a bf16 law rounds its sum by up to ``V * 2^-9`` relative)."""

    tolerance: float = 1e-2

    def __str__(self) -> str:
        return f"laws over the last axis (entries in [0, 1], sums within {self.tolerance:g} of 1)"

    def violation(self, value: torch.Tensor) -> str | None:
        problem = Probabilities().violation(value)
        if problem is not None:
            return problem
        (error,) = _read((value.double().sum(dim=-1) - 1).abs().max())
        return None if error <= self.tolerance else f"a sum {error:.3g} away from 1"


class _ValidatingSpeculativeRound(_Validating):
    capability = c.SpeculativeRound

    def load_head(self, *args, **kwargs):
        return self._impl.load_head(*args, **kwargs)

    def round(self, head, base_logits, first_prev, hidden, target_logits, *args, **kwargs):
        where = self._where("round")
        out = self._impl.round(head, base_logits, first_prev, hidden, target_logits, *args, **kwargs)
        names = ("draft_tokens", "accepted", "tokens", "draft_probs")
        draft_tokens, accepted, tokens, draft_probs = _pair(where, out, names)
        rows, gamma, vocab = base_logits.shape
        device = base_logits.device
        _ints(rows, gamma, device=device, values=Ids(0, vocab)).check(where, draft_tokens, "draft_tokens")
        _ints(rows, device=device, values=Counts(0, gamma)).check(where, accepted, "accepted")
        _ints(rows, gamma + 1, device=device, values=Ids(-1, vocab)).check(where, tokens, "tokens")
        if draft_probs is not None:
            Expected((), (rows, gamma, vocab), device, Laws()).check(where, draft_probs, "draft_probs")
        return out


class _ValidatingTensorParallelRound(_Validating):
    capability = c.TensorParallelRound

    def tp_round(self, group, head_type, state_dict, base_logits, *args, **kwargs):
        where = self._where("tp_round")
        out = self._impl.tp_round(group, head_type, state_dict, base_logits, *args, **kwargs)
        draft_tokens, lengths, accepted, tokens = _pair(where, out, ("draft_tokens", "verify_lengths", "accepted",
                                                                     "tokens"))
        rows, gamma, vocab = base_logits.shape
        device = base_logits.device
        _ints(rows, gamma, device=device, values=Ids(0, vocab)).check(where, draft_tokens, "draft_tokens")
        _ints(rows, device=device, values=Counts(0, gamma)).check(where, lengths, "verify_lengths")
        _ints(rows, device=device, values=Counts(0, gamma)).check(where, accepted, "accepted")
        _ints(rows, gamma + 1, device=device, values=Ids(-1, vocab)).check(where, tokens, "tokens")
        return out


_VALIDATORS: dict[type, type[_Validating]] = {
    proxy.capability: proxy
    for proxy in (
        _ValidatingStepSampler, _ValidatingNoiseStepSampler, _ValidatingTruncatedStepSampler,
        _ValidatingMarkovBlock, _ValidatingDraftLayouts, _ValidatingFoldedDraft, _ValidatingFoldGate,
        _ValidatingFoldRouting,
        _ValidatingChainVerifier, _ValidatingTruncatedChainVerifier, _ValidatingGreedyVerifier,
        _ValidatingTensorParallelRound,
        _ValidatingSimulatedAcceptance, _ValidatingSimulatedAcceptanceBatch, _ValidatingSimulatedBonus,
        _ValidatingConfidence, _ValidatingPrefixScheduler,
        _ValidatingProductionScheduler,
        _ValidatingSpeculativeLoop, _ValidatingSpeculativeLoopRecord, _ValidatingSpeculativeRound,
    )
}


def validating(capability: type, impl: Any) -> Any:
    """``impl`` (the adapter's object for ``capability``) behind the boundary checks.

    Args:
        capability: a Protocol of ``conformance.contract.CAPABILITIES``.
        impl: the object implementing it.

    Returns:
        A proxy with the Protocol's methods; each returns what ``impl`` returned, after
        checking it (:class:`BoundaryViolation` otherwise).

    Raises:
        ValueError: ``capability`` is not a capability of the contract.

    Example:
        >>> from conformance.adapters import reference
        >>> sampler = validating(c.StepSampler, reference.StepSampler())
        >>> sampler.sample(torch.zeros(2, 4), torch.ones(2), torch.ones(2, dtype=torch.int64), 4,
        ...                torch.Generator()).tolist()
        [0, 0]
    """
    proxy = _VALIDATORS.get(capability)
    if proxy is None:
        raise ValueError(f"capability: {capability!r} is not a capability of the contract")
    return proxy(impl)
