"""An engine's release as a comparable tuple, read by ``packaging`` (PEP 440).

The loaders compare an installed engine's version with the first release that shipped each
DSpark module (``FIRST_RELEASE``, ``MIN_VERSION``): a pre-release, post-release or local build
of ``X.Y.Z`` (``"0.5.23rc1"``, ``"0.25.0+cu129"``) counts as ``X.Y.Z``, whose modules it ships.
"""

from __future__ import annotations

from packaging.version import InvalidVersion, Version

from conformance.loading import AdapterLoadError

__all__ = ["release_of"]


def release_of(engine: str, text: str) -> tuple[int, int, int]:
    """``(major, minor, patch)`` of ``engine``'s version ``text``, missing parts 0
    (``"0.33.0"`` -> ``(0, 33, 0)``, ``"0.5.23rc1"`` -> ``(0, 5, 23)``, ``"1.0"`` -> ``(1, 0, 0)``).

    Raises:
        AdapterLoadError: ``text`` is not a PEP 440 version (the message names the engine).
    """
    try:
        release = Version(text).release
    except (InvalidVersion, TypeError) as exc:
        raise AdapterLoadError(f"{engine}=={text}: not a PEP 440 version, so its DSpark modules cannot be "
                               f"told from its release") from exc
    return (release + (0, 0))[:3]
