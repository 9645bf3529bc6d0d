"""Load SGLang's DSpark modules from the installed wheel without its server stack.

``import sglang`` runs the package ``__init__``, which imports the whole server (HTTP
frontend, transformers, model loaders, distributed runtime). The DSpark kernels and
components are plain modules inside that wheel, so this loader imports them directly:

* **No sglang package ``__init__`` runs.** Every package under ``sglang/`` is registered as
  a bare module whose ``__path__`` points into site-packages, so submodules import from
  their real files. (Package ``__init__`` files in SGLang are import hubs for the server.)
* **Stubs replace the server modules the DSpark files import** (``_SERVER_STUBS``): types
  used only in annotations, distributed helpers, the model loader, KV-cache managers.
  A stub hands out inert placeholders that raise :class:`StubCalled` if SGLang ever calls
  them, so a stub can never silently stand in for behaviour under test.
* **Platform flags** (``sglang.srt.utils.is_cuda`` & co., read at import time) get explicit
  values: CUDA as torch sees it, no NPU/HIP/MUSA/XPU, and SGLang's CPU *engine* off (its
  own default), so SGLang picks its CUDA kernels or its torch reference paths by tensor
  device, as in a normal install.
* **Third-party packages a ``--no-deps`` install lacks** are stubbed only while loading and
  only when missing (``_MISSING_THIRD_PARTY``, each with its reason in
  ``_THIRD_PARTY_REASONS``): ``huggingface_hub`` (imported, never called, by ``spec_utils``),
  FlashInfer's renorm kernels (``None``: SGLang then uses its own torch renorm fallback,
  exactly as on a platform without FlashInfer) and ``sgl_kernel``, SGLang's compiled CUDA
  kernels, of which 0.5.17-0.5.20's ``spec_utils`` imports ``fast_topk`` when CUDA is
  present (for EAGLE's tree top-k, a path DSpark never takes): a placeholder that raises
  :class:`StubCalled` if it is ever called. Without it those releases do not load on CUDA.

* **Real functions inside a stubbed module** (``_REAL_FUNCTIONS``): where a DSpark path calls
  a plain torch function that lives in a server module (``top_p_normalize_probs_torch`` in
  ``sglang.srt.layers.sampler``, the torch top-p renorm that ``dflash_utils`` falls back
  to where no platform kernel is loaded), the stub carries that function compiled from the
  installed wheel's own source file (its tracebacks name that file); the rest of the
  module stays a stub.

If SGLang was already imported the normal way, its modules are used as they are.

To support a new SGLang release: add its DSpark modules to ``DSPARK_MODULES`` (by API
generation; a module that only later releases of a generation ship also goes into
``FIRST_RELEASE``) and, if its DSpark files import a new server module, a line to
``_SERVER_STUBS`` with the reason.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import functools
import importlib.util
import os
import sys
import types
from collections.abc import Iterator, Mapping
from importlib.metadata import PackageNotFoundError, version
from typing import Any, Literal

import torch

from conformance.adapters.engine_import import (
    StubCalled,
    Stubs,
    WheelFinder,
    import_engine_module,
    install_finder,
)
from conformance.adapters.versions import release_of
from conformance.loading import AdapterLoadError

__all__ = [
    "MIN_VERSION",
    "PHILOX_VERSION",
    "DSPARK_MODULES",
    "FIRST_RELEASE",
    "SGLangModules",
    "StubCalled",
    "installed_version",
    "generation_of",
    "modules_for",
    "load_sglang",
]

MIN_VERSION = (0, 5, 17)  # first release with the DSpark speculative algorithm
PHILOX_VERSION = (0, 5, 22)  # first release of the Philox-keyed draft (MarkovSampleStep)

Generation = Literal["folded", "philox"]

_SPEC = "sglang.srt.speculative"
_DSPARK_OPS = "sglang.kernels.ops.speculative.dspark"

# The modules both API generations ship under the same names.
_SHARED_MODULES: dict[str, str] = {
    "heads": "sglang.srt.models.dspark",
    "draft": f"{_SPEC}.dspark_components.dspark_draft",
    "draft_sampler": f"{_SPEC}.dspark_components.dspark_draft_sampler",
    "accept": f"{_DSPARK_OPS}.dspark_accept",
    "verify": f"{_SPEC}.dspark_components.dspark_verify",
    "spec_utils": f"{_SPEC}.spec_utils",
    "dflash_utils": f"{_SPEC}.dflash_utils",  # verify target probs (top-k / top-p renorm)
    "tp_sync": f"{_SPEC}.spec_tp_sync",
    "environ": "sglang.srt.environ",
    "schedule": f"{_DSPARK_OPS}.dspark_schedule",  # compute_sort_survival, ScheduleVerifyLensTopk
    "planner": f"{_SPEC}.dspark_components.dspark_planner",  # HostConfidenceBudgetPlanner
    "sps": f"{_SPEC}.dspark_components.dspark_sps",  # profile_sps_table
    "sts_fit": "sglang.benchmark.dspark_sts_fit",  # fit_sts_temperatures
}

#: Short name -> module, per API generation (``folded``: 0.5.17-0.5.21, ``philox``: 0.5.22+).
DSPARK_MODULES: dict[str, dict[str, str]] = {
    "folded": {"step": f"{_DSPARK_OPS}.dspark_draft_model", **_SHARED_MODULES},  # SampleStepTokens
    "philox": {
        "step": f"{_DSPARK_OPS}.markov_sample",  # MarkovSampleStep
        "blockwise": f"{_DSPARK_OPS}.blockwise_rejection",
        **_SHARED_MODULES,
    },
}

#: Modules of a generation that its first releases lack: short name -> first release.
#: ``load_sglang`` leaves them out of older releases (``"name" in modules`` is then False).
FIRST_RELEASE: dict[str, tuple[int, ...]] = {
    "tp_sync": (0, 5, 19),  # SpecTpSync; 0.5.17-0.5.18 draft and verify take no tp_sync
    "blockwise": (0, 5, 23),  # BlockwiseRejection; 0.5.22 has only the chain kernel
}

#: Server modules the DSpark files import, with why they are not needed here. Only
#: modules actually imported by the installed version are created.
_SERVER_STUBS: dict[str, str] = {
    "sglang.srt.utils.common": "server utilities (psutil, requests, PIL); names only",
    "sglang.srt.utils.async_probe": "debug probe decorator target",
    "sglang.srt.utils.nvtx_utils": "profiling ranges",
    # Package hub (its __init__ re-exports parallel_state): 0.5.17-0.5.20's planner imports
    # get_tp_group from it for DP verify-tier gathers, a scheduling path never run here.
    "sglang.srt.distributed": "process-group hub (get_tp_group); the suite runs one rank",
    "sglang.srt.distributed.communication_op": "TP all-gather; the suite runs one rank",
    "sglang.srt.distributed.parallel_state": "process groups; one rank",
    "sglang.srt.layers.linear": "quantised parallel linears (Nemotron head only)",
    "sglang.srt.layers.logits_processor": "target LM-head processing; base logits are inputs",
    "sglang.srt.layers.quantization.unquant": "isinstance target of a QKV helper",
    "sglang.srt.layers.sampler": "the target sampler; not part of DSpark verify",
    "sglang.srt.layers.dp_attention": "data-parallel attention groups",
    "sglang.srt.lora.layers": "LoRA wrappers of the draft embedding",
    "sglang.srt.model_loader.weight_utils": "checkpoint loading; weights come as tensors",
    "sglang.srt.models.dflash": "DFlash backbone base class; the suite feeds base logits",
    "sglang.srt.managers.schedule_batch": "scheduler batch types (annotations)",
    "sglang.srt.managers.utils": "scheduler helpers",
    "sglang.srt.model_executor.forward_batch_info": "forward-batch types (annotations)",
    "sglang.srt.model_executor.runner_utils.pool": "CUDA-graph memory pools of the runner",
    "sglang.srt.mem_cache.allocation": "KV-cache allocation",
    "sglang.srt.mem_cache.memory_pool": "KV-cache pools",
    "sglang.srt.runtime_context": "server-wide config singletons",
    "sglang.srt.server_args": "server arguments (annotation of the 0.5.17-0.5.18 planner)",
    "sglang.srt.arg_groups.overrides": "server-argument views",
    "sglang.srt.configs.hybrid_arch": "model-config helpers",
    "sglang.srt.constrained.base_grammar_backend": "grammar masks; no constrained decoding",
    "sglang.srt.speculative.spec_info": "algorithm enum of the worker",
    "sglang.srt.speculative.dflash_info": "DFlash verify input (worker path)",
    "sglang.srt.speculative.dflash_info_v2": "DFlash draft input type (annotations)",
    "sglang.srt.speculative.draft_worker_common": "worker helpers",
    "sglang.srt.kernel_plugins.nvidia.binding": "optional NVIDIA megakernel (not used: None)",
    "sglang.kernels.ops.speculative.cache_locs": "KV-cache location kernels",
    "sglang.kernels.ops.speculative.eagle": "EAGLE kernels",
    "sglang.kernels.ops.speculative.sampling": "JIT tree-sampling kernel (tree verify only)",
    "sglang.kernels.ops.sampling": "target-sampler softmax (package hub)",
}


def _cuda_platform() -> bool:
    return torch.cuda.is_available() and torch.version.cuda is not None


def _false() -> bool:
    return False


#: Stubbed modules that carry some of their real functions (plain torch code a DSpark path
#: calls), compiled from the installed wheel's source: module -> function names.
_REAL_FUNCTIONS: dict[str, tuple[str, ...]] = {
    # dflash_utils' top-p renorm fallback (verify target probs with top_p < 1), 0.5.18+.
    "sglang.srt.layers.sampler": ("top_p_normalize_probs_torch",),
}


def _functions_from_source(path: str, module_name: str, names: tuple[str, ...]) -> dict[str, Any]:
    """The top-level functions ``names`` of the source file ``path``, compiled from that file
    alone (globals: ``torch``); names the file lacks are left out (a placeholder then)."""
    if not os.path.exists(path):
        return {}
    with open(path, encoding="utf-8") as handle:
        tree = ast.parse(handle.read(), filename=path)
    nodes = [node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name in names]
    namespace: dict[str, Any] = {"torch": torch, "__name__": module_name}
    exec(compile(ast.Module(body=nodes, type_ignores=[]), path, "exec"), namespace)  # SGLang's own code
    return {node.name: namespace[node.name] for node in nodes}


#: Modules whose names are read at import time: explicit values, plus placeholders for
#: everything else they export.
_PLATFORM_STUBS: dict[str, dict[str, Any]] = {
    "sglang.srt.utils": {
        "is_cuda": _cuda_platform,
        "is_cpu": _false,  # SGLang's x86 CPU engine (SGLANG_USE_CPU_ENGINE), off by default
        "is_npu": _false,
        "is_hip": _false,
        "is_musa": _false,
        "is_xpu": _false,
        "is_gfx95_supported": _false,
    },
    # 0.5.22+: platform renorm kernels; None selects dflash_utils' torch fallback.
    "sglang.kernels.ops.sampling.renorm": {"top_k_renorm_prob": None, "top_p_renorm_prob": None},
}

#: Third-party modules stubbed (only while loading, only when not installed). Explicit
#: names only: any other name raises ImportError, so SGLang's own try/except fallbacks run.
_MISSING_THIRD_PARTY: dict[str, dict[str, Any]] = {
    "huggingface_hub": {"snapshot_download": None},
    "flashinfer": {},
    "flashinfer.sampling": {"top_k_renorm_probs": None, "top_p_renorm_probs": None},
    # "sgl_kernel": placeholders, added below _STUBS.
}

#: Why each module of ``_MISSING_THIRD_PARTY`` may be a stub (the message of ``StubCalled``).
_THIRD_PARTY_REASONS: dict[str, str] = {
    "huggingface_hub": "checkpoint download in spec_utils; weights come as tensors",
    "flashinfer": "FlashInfer package hub; no name of it is used",
    "flashinfer.sampling": "renorm kernels; None selects SGLang's torch fallback",
    "sgl_kernel": "compiled CUDA kernels; 0.5.17-0.5.20 spec_utils imports fast_topk on CUDA "
                  "for EAGLE tree top-k selection, which DSpark never runs",
}


def _stub_reason(module: str) -> str:
    return _SERVER_STUBS.get(module) or _THIRD_PARTY_REASONS.get(module) or "platform stub"


_STUBS = Stubs("SGLang's server or platform", _stub_reason)
_MISSING_THIRD_PARTY["sgl_kernel"] = {"fast_topk": _STUBS.placeholder("sgl_kernel", "fast_topk")}  # StubCalled if called


def _stub_values(fullname: str, path: str) -> Mapping[str, Any] | None:
    """The values of the stub serving ``fullname`` (``path``: its file without ``.py``), or
    None where the real module loads."""
    if fullname not in _SERVER_STUBS and fullname not in _PLATFORM_STUBS:
        return None
    values = dict(_PLATFORM_STUBS.get(fullname, {}))
    if fullname in _REAL_FUNCTIONS:
        values.update(_functions_from_source(path + ".py", fullname, _REAL_FUNCTIONS[fullname]))
    return values


@dataclasses.dataclass(frozen=True)
class SGLangModules:
    """The loaded DSpark modules of one installed SGLang.

    Attributes:
        version: the installed version string, e.g. ``"0.5.23"``.
        generation: ``"folded"`` (0.5.17-0.5.21) or ``"philox"`` (0.5.22+).
        modules: short name (keys of :func:`modules_for` the version) -> module.
    """

    version: str
    generation: Generation
    modules: Mapping[str, types.ModuleType]

    def __getitem__(self, short_name: str) -> types.ModuleType:
        try:
            return self.modules[short_name]
        except KeyError:
            raise KeyError(f"sglang=={self.version} has no DSpark module {short_name!r}{_since(short_name)}") from None

    def __contains__(self, short_name: object) -> bool:
        return short_name in self.modules

    @property
    def release(self) -> tuple[int, ...]:
        """``(major, minor, patch)`` of :attr:`version`, for version-dependent signatures."""
        return release_of("sglang", self.version)


def _since(short_name: str) -> str:
    first = FIRST_RELEASE.get(short_name)
    return "" if first is None else f" (first shipped in sglang {'.'.join(map(str, first))})"


def modules_for(version_text: str) -> dict[str, str]:
    """Short name -> module name of the DSpark modules ``version_text`` ships.

    Raises:
        AdapterLoadError: a release older than ``MIN_VERSION`` (no DSpark).
    """
    release = release_of("sglang", version_text)
    return {
        short_name: module_name
        for short_name, module_name in DSPARK_MODULES[generation_of(version_text)].items()
        if release >= FIRST_RELEASE.get(short_name, MIN_VERSION)
    }


def installed_version() -> str:
    """The version of the installed ``sglang`` distribution.

    Raises:
        AdapterLoadError: ``sglang`` is not installed (the message says how to install it).
    """
    try:
        return version("sglang")
    except PackageNotFoundError as exc:
        raise AdapterLoadError(
            "sglang: the package is not installed; install the wheel without its server "
            "dependencies: pip install --no-deps --target DIR 'sglang==X' msgspec, then PYTHONPATH=DIR"
        ) from exc


def generation_of(version_text: str) -> Generation:
    """Which DSpark API generation a version string belongs to.

    Raises:
        AdapterLoadError: a release older than ``MIN_VERSION`` (no DSpark).
    """
    release = release_of("sglang", version_text)
    if release < MIN_VERSION:
        raise AdapterLoadError(
            f"sglang=={version_text}: DSpark needs sglang >= {'.'.join(map(str, MIN_VERSION))}"
        )
    return "philox" if release >= PHILOX_VERSION else "folded"


@functools.cache
def load_sglang() -> SGLangModules:
    """Import the DSpark modules of the installed SGLang without its server (see module note).

    Cached: the import happens once per process.

    Raises:
        AdapterLoadError: not installed, too old, or a DSpark module failed to import; the
            message names the version, the module and the missing piece.
    """
    version_text = installed_version()
    generation = generation_of(version_text)
    names = modules_for(version_text)
    already_imported = getattr(sys.modules.get("sglang"), "__file__", None) is not None
    if not already_imported:
        _install_finder(version_text)
    loaded: dict[str, types.ModuleType] = {}
    with _missing_third_party_stubs():
        for short_name, module_name in names.items():
            loaded[short_name] = _import(version_text, module_name)
    return SGLangModules(version=version_text, generation=generation, modules=loaded)


def _install_finder(version_text: str) -> None:
    spec = importlib.util.find_spec("sglang")
    if spec is None or not spec.submodule_search_locations:
        raise AdapterLoadError(f"sglang=={version_text}: the installed package has no files")
    root = os.path.dirname(list(spec.submodule_search_locations)[0])
    install_finder(WheelFinder("sglang", root, _STUBS, _stub_values))


@contextlib.contextmanager
def _missing_third_party_stubs() -> Iterator[None]:
    """Stub the absent modules of ``_MISSING_THIRD_PARTY`` for the body, then remove them."""
    added: list[str] = []
    for name, values in _MISSING_THIRD_PARTY.items():
        parent = name.rpartition(".")[0]
        if name in sys.modules or (parent and parent not in added):
            continue  # installed, or a submodule of an installed package
        if not parent and importlib.util.find_spec(name) is not None:
            continue
        sys.modules[name] = _STUBS.module(name, values, strict=True)
        added.append(name)
    try:
        yield
    finally:
        for name in added:
            sys.modules.pop(name, None)


#: Where a stub goes for a module the DSpark files import and this environment lacks.
_STUB_HINT = ("If it is a server module, add a stub to conformance/adapters/sglang/loader.py:_SERVER_STUBS "
              "(a third-party one: _MISSING_THIRD_PARTY, with its reason)")


def _import(version_text: str, module_name: str) -> types.ModuleType:
    return import_engine_module(f"sglang=={version_text}", module_name, _STUB_HINT)
