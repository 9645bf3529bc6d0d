"""``python -m conformance.drift.probe IMPL``: whether the adapter ``IMPL`` (an ``--impl``
form) loads in this interpreter, run by the drift check in a fresh process with the engine's
directories on ``PYTHONPATH`` (each engine imports into a process of its own).

Exit 0 when it loads; 1 with the load error on stderr when it does not: the adapter's own
:class:`~conformance.loading.AdapterLoadError` where ``load_adapter`` wrapped one (its
message names the release and the missing piece), else ``load_adapter``'s.
"""

from __future__ import annotations

import sys

from conformance.loading import AdapterLoadError, load_adapter


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m conformance.drift.probe IMPL", file=sys.stderr)
        return 2
    try:
        load_adapter(argv[0])
    except AdapterLoadError as exc:
        while isinstance(exc.__cause__, AdapterLoadError):
            exc = exc.__cause__
        print(exc, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
