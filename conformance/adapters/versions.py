"""An engine's release as a comparable tuple, read by ``packaging`` (PEP 440).

The loaders compare an installed engine's version with the first release that shipped each
DSpark module (``FIRST_RELEASE``, ``MIN_VERSION``): a pre-release, post-release or local build
of ``X.Y.Z`` (``"0.5.23rc1"``, ``"0.25.0+cu129"``) counts as ``X.Y.Z``, whose modules it ships.
:func:`installed_release` reads an installed distribution's version and holds it to such a
minimum.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from packaging.version import InvalidVersion, Version

from conformance.loading import AdapterLoadError

__all__ = ["release_of", "installed_release"]


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


def installed_release(dist: str, minimum: tuple[int, int, int], install: str, *, requirement: str) -> str:
    """The version text of the installed distribution ``dist`` (e.g. ``"0.1.0"``), at least
    ``minimum`` by :func:`release_of`.

    Args:
        dist: the distribution name, e.g. ``"dspark-mlx"``.
        minimum: the oldest release accepted, e.g. ``(0, 1, 0)``.
        install: the install line ending each message.
        requirement: who asks for ``minimum``, read before ``"<dist> >= <minimum>"`` in the
            message: ``"DSpark needs"`` (the first release with DSpark) or ``"the functions the
            adapter calls need"`` (the first release shipping all of them).

    Raises:
        AdapterLoadError: ``dist`` is not installed, or older than ``minimum``.
    """
    try:
        text = version(dist)
    except PackageNotFoundError as exc:
        raise AdapterLoadError(f"{dist}: the package is not installed; {install}") from exc
    if release_of(dist, text) < minimum:
        raise AdapterLoadError(f"{dist}=={text}: {requirement} {dist} >= {'.'.join(map(str, minimum))}; {install}")
    return text
