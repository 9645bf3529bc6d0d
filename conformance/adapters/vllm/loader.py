"""Load vLLM's DSpark modules from the installed wheel without its engine.

``import vllm`` runs the package ``__init__``, which pulls in the engine (config system,
distributed runtime, model registry, compiled ``_C``). DSpark's kernels and its Markov loop
live in plain modules of the V2 model runner, so this loader imports them directly, the way
:mod:`conformance.adapters.sglang.loader` does for SGLang:

* **No vllm package ``__init__`` runs**, except the plain ones the DSpark files read names
  from (``_PLAIN_PACKAGES``, e.g. ``vllm.utils``: uuid and torch only). Every other package
  under ``vllm/`` is registered as a bare module whose ``__path__`` points at the wheel's files.
* **Stubs replace the few engine modules the DSpark files import** (``_ENGINE_STUBS``, each
  with its reason). A stub hands out inert placeholders that raise :class:`StubCalled` when
  called, except for the explicit values a module reads at import time (``_STUB_VALUES``):
  ``init_logger`` returns a standard :mod:`logging` logger, ``CUDAGraphMode.NONE`` is a real
  enum member (a default argument), and ``vllm.triton_utils`` hands out the installed
  ``triton`` / ``triton.language`` / libdevice, as vLLM's own module does when Triton is
  present.
* **The libdevice shim** (``TRITON_INTERPRET=1`` only): Triton's interpreter cannot run
  libdevice externs (``create_extern_elementwise`` is not implemented there, so
  ``libdevice.log1p(x)`` yields ``None``). Under the interpreter ``tldevice`` is the real
  libdevice module with the externs vLLM's kernels use (``_NUMPY_EXTERNS``: ``log1p``,
  ``expm1``) replaced by their numpy functions applied to the interpreter's arrays. And
  Triton 3.9's interpreter types ``mask & is_valid_req`` (a bool block and a bool scalar
  loaded from a comparison, as in vLLM's ``gumbel_sample`` cache store) as int32, where
  the compiler keeps int1, and its store then rejects the mask ("mask has unsupported
  dtype"): :func:`_install_interpreter_mask_fix` turns an integer mask into ``mask != 0``
  before a masked load or store. On a GPU neither is installed: the real libdevice and compiler run.

* **Plain helpers of engine-bound modules** (:func:`source_functions`): a function whose module
  cannot be imported without the engine (``SpeculativeConfig``'s synthetic-rate helpers,
  ``maybe_prefix``) is compiled from the wheel's file alone, never restated.

If vLLM was already imported the normal way, its modules are used as they are.

To support a new vLLM release: add its DSpark modules to ``DSPARK_MODULES`` (or to
``OPTIONAL_MODULES`` when only some releases ship one); if its DSpark files import a new
engine module, add a line to ``_ENGINE_STUBS`` with the reason (or to ``_PLAIN_PACKAGES``
for a plain package ``__init__``).
"""

from __future__ import annotations

import ast
import dataclasses
import enum
import functools
import importlib.util
import logging
import os
import sys
import types
from collections.abc import Mapping
from importlib.metadata import PackageNotFoundError, version
from typing import Any

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
    "INSTALL_EXTRAS",
    "INSTALL_HINT",
    "DSPARK_MODULES",
    "OPTIONAL_MODULES",
    "VLLMModules",
    "StubCalled",
    "installed_version",
    "load_vllm",
    "ships",
    "defines_name",
    "source_functions",
]

MIN_VERSION = (0, 25, 0)  # first release with DSpark (V2 model runner only)

#: PyPI packages the adapter's modules import beyond what ``pip install --no-deps`` brings and
#: the suite's own environment (torch, triton, numpy): ``regex`` (``vllm.utils.platform_utils``,
#: reached from adaptive verification through ``vllm.utils.torch_utils``; 0.33.0, 0.34.0; none
#: on 0.25.x). The drift check (``conformance.drift``) installs them with the engine; re-exported
#: as ``conformance.adapters.vllm.INSTALL_EXTRAS``.
INSTALL_EXTRAS: tuple[str, ...] = ("regex",)
#: How to install a release for the adapter (``{version}``: the release, or ``X``).
INSTALL_HINT = ("pip install --no-deps --target DIR 'vllm=={version}' " + " ".join(INSTALL_EXTRAS)
                + ", then PYTHONPATH=DIR")

_WORKER = "vllm.v1.worker.gpu"

#: Short name -> module. Every release from ``MIN_VERSION`` ships all of them.
DSPARK_MODULES: dict[str, str] = {
    "gumbel": f"{_WORKER}.sample.gumbel",  # gumbel_sample, apply_temperature
    "rejection": f"{_WORKER}.spec_decode.rejection_sampler_utils",  # rejection_sample
    "speculator": f"{_WORKER}.spec_decode.dspark.speculator",  # DSparkSpeculator._sample_sequential
}

#: Modules only some releases ship, loaded where the wheel has their file. A shipped module
#: that fails to import is left out (``"name" in modules`` False) and recorded in
#: ``VLLMModules.missing`` with the reason (the capabilities it feeds are then unavailable,
#: not silently absent); one the wheel does not ship is simply absent.
OPTIONAL_MODULES: dict[str, str] = {
    "acceptance": f"{_WORKER}.spec_decode.acceptance_estimator",
    "adaptive": f"{_WORKER}.spec_decode.adaptive_verification",  # AdaptiveVerificationManager, 0.28.0+
    "draft_logits": f"{_WORKER}.spec_decode.draft_logits",  # DraftLogitsCache, 0.34.0+
    # DSparkConfidenceHead, Qwen3DSparkForCausalLM.compute_confidence (0.28.0+ wire them in)
    "dspark_model": "vllm.model_executor.models.qwen3_dspark",
}

#: Engine modules the DSpark files import, with why they are not needed here.
_ENGINE_STUBS: dict[str, str] = {
    "vllm.triton_utils": "Triton import hub (reads vllm.envs and the platform); explicit values",
    "vllm.config": "engine configuration package (VllmConfig annotations)",
    "vllm.config.compilation": "compilation config; only CUDAGraphMode.NONE, a default argument",
    "vllm.logger": "vLLM's logging setup; init_logger returns a standard logger",
    "vllm.v1.worker.gpu.spec_decode.dflash.speculator":
        "DFlash speculator base class (backbone forward, KV cache, CUDA graphs); the suite feeds "
        "base logits to the DSpark Markov loop",
    "vllm.v1.worker.gpu.spec_decode.dspark.utils": "draft checkpoint loading; weights come as tensors",
    "vllm.distributed.parallel_state":
        "process groups: adaptive verification's get_tp_group broadcasts profiled cost curves; "
        "TensorParallelRound answers it over the suite's rank group (tensor_parallel._TPGroup)",
    "vllm.platforms": "platform detection; explicit values: no pinned host memory, CUDA as torch sees it",
    "vllm.v1.utils": "engine-process utilities (ZMQ, uvloop); CpuGpuBuffer, built only by the "
                     "adaptive-verification manager's __init__, which the adapter does not run",
    "vllm.v1.worker.gpu.async_utils": "step-timing collection and side streams (annotations; the "
                                      "admitted-count copy to the host, off here)",
    "vllm.v1.worker.gpu.attn_utils": "attention-backend capability checks of the adaptive manager's factory",
    "vllm.v1.attention.backend": "attention-backend enum of the adaptive manager's factory",
    # Imported by batch-sharded sampling (0.34.0+: the draft logits cache and the drafter
    # import it); the adapter's caches and Markov loop are replicated, never sharded.
    "vllm.v1.core.sched.output": "scheduler output types (GrammarOutput: batch-sharded grammar masks only)",
    "vllm.v1.outputs": "engine output types (LogprobsTensors, SamplingMaskLists: sampler outputs only)",
    "vllm.distributed.device_communicators.pynccl":
        "NCCL communicator (annotations; the batch-sharded Markov loop's all-gather)",
    # Imported by the DSpark model file (qwen3_dspark: the confidence head); the suite builds
    # the head alone, never the backbone, the LM head or the weight loader.
    "vllm.model_executor.layers.linear":
        "parallel linear layers (quantization methods, TP weight loaders); ReplicatedLinear is "
        "explicit: replicated and unquantized it is F.linear (UnquantizedLinearMethod.apply)",
    "vllm.model_executor.layers.logits_processor": "LM-head logits processor (backbone only)",
    "vllm.model_executor.layers.quantization": "quantization configs (annotations only)",
    "vllm.model_executor.layers.quantization.utils.nvfp4_emulation_utils": "NVFP4 LM-head helpers (backbone only)",
    "vllm.model_executor.layers.vocab_parallel_embedding": "parallel LM head (backbone only)",
    "vllm.model_executor.models.qwen3_dflash": "DFlash Qwen3 backbone classes (bases of the model, never built)",
    "vllm.v1.worker.gpu.spec_decode.dspark.config":
        "speculator config (engine config validation, 0.34.0+); a class attribute of the model, never read",
    "vllm.model_executor.models.utils": "model helpers (weight loaders); maybe_prefix is vLLM's, compiled from the file",
}


#: Packages of the wheel whose ``__init__`` is plain Python and runs as it is (the DSpark
#: files import names it defines), with what it holds.
_PLAIN_PACKAGES: dict[str, str] = {
    "vllm.utils": "small helpers over uuid and torch (random_uuid, read by the V2 input batch, 0.34.0+)",
}


_STUBS = Stubs("vLLM's engine", lambda module: _ENGINE_STUBS.get(module, "engine stub"))


class _CUDAGraphMode(enum.Enum):
    """Stand-in for ``vllm.config.compilation.CUDAGraphMode``: the one member DSpark reads
    (a default argument of ``_generate_draft``, never run here)."""

    NONE = 0


class _Platform:
    """Stand-in for ``vllm.platforms.current_platform``: the two questions the adaptive
    verification imports ask (``PIN_MEMORY``, the GPU-sync checker's mode)."""

    @staticmethod
    def is_pin_memory_available() -> bool:
        return False

    @staticmethod
    def is_cuda_alike() -> bool:
        return torch.cuda.is_available()


_NUMPY_EXTERNS = ("log1p", "expm1")


def _interpreted_extern(name: str):
    """A libdevice extern for Triton's interpreter: numpy's ``name`` on the tensor's array."""
    import numpy as np
    import triton.language as tl
    from triton.runtime.interpreter import TensorHandle

    numpy_fn = getattr(np, name)

    def extern(x):
        handle = x.handle
        with np.errstate(all="ignore"):  # lanes a tl.where discards may be out of domain, as on a GPU
            data = numpy_fn(handle.data)
        return tl.core.tensor(TensorHandle(data, handle.dtype), x.type)

    extern.__name__ = name
    return extern


def _libdevice() -> Any:
    import triton.language.extra.libdevice as libdevice

    if os.environ.get("TRITON_INTERPRET") != "1":
        return libdevice
    shim = types.ModuleType("vllm_conformance_libdevice_shim")
    shim.__dict__.update({k: v for k, v in vars(libdevice).items() if not k.startswith("__")})
    for name in _NUMPY_EXTERNS:
        setattr(shim, name, _interpreted_extern(name))
    return shim


def _install_interpreter_mask_fix() -> None:
    """Under ``TRITON_INTERPRET=1`` only: masked loads and stores accept an ``int1`` mask
    whose array is not bool (see the module note). Idempotent."""
    if os.environ.get("TRITON_INTERPRET") != "1":
        return
    import numpy as np
    import triton.language as tl
    from triton.runtime import interpreter

    builder = interpreter.InterpreterBuilder
    if getattr(builder, "_dspark_mask_fix", False):
        return

    def as_bool(mask):
        if mask is None or mask.data.dtype == np.bool_ or not np.issubdtype(mask.data.dtype, np.integer):
            return mask
        return interpreter.TensorHandle(mask.data != 0, tl.int1)

    load, store = builder.create_masked_load, builder.create_masked_store
    builder.create_masked_load = lambda self, ptrs, mask, *rest: load(self, ptrs, as_bool(mask), *rest)
    builder.create_masked_store = lambda self, ptrs, value, mask, *rest: store(self, ptrs, value, as_bool(mask), *rest)
    builder._dspark_mask_fix = True


def _triton_values() -> dict[str, Any]:
    import math

    import triton
    import triton.language as tl

    return {"HAS_TRITON": True, "triton": triton, "tl": tl, "tldevice": _libdevice(),
            "LOG2E": math.log2(math.e), "LOGE2": math.log(2.0)}


#: Names a stubbed module must really provide (read at import time); everything else is a
#: placeholder. Callables are evaluated when the stub is made.
def _replicated_linear() -> dict[str, Any]:
    import torch

    class ReplicatedLinear(torch.nn.Module):
        """Stand-in for vLLM's ``ReplicatedLinear`` on one device, unquantized: ``weight
        [out, in]`` and ``bias [out]`` in ``params_dtype``, ``forward(x) = F.linear(x, weight,
        bias)`` (``UnquantizedLinearMethod.apply``), the bias returned apart only with
        ``skip_bias_add``; ``(output, bias)`` unless ``return_bias=False``."""

        def __init__(self, input_size: int, output_size: int, bias: bool = True, skip_bias_add: bool = False,
                     params_dtype: Any = None, quant_config: Any = None, prefix: str = "", *,
                     return_bias: bool = True, **_: Any) -> None:
            super().__init__()
            dtype = params_dtype or torch.get_default_dtype()
            self.skip_bias_add, self.return_bias = skip_bias_add, return_bias
            self.weight = torch.nn.Parameter(torch.empty(output_size, input_size, dtype=dtype), requires_grad=False)
            self.bias = torch.nn.Parameter(torch.empty(output_size, dtype=dtype), requires_grad=False) if bias else None

        def forward(self, x):
            output = torch.nn.functional.linear(x, self.weight, None if self.skip_bias_add else self.bias)
            return output if not self.return_bias else (output, self.bias if self.skip_bias_add else None)

    return {"ReplicatedLinear": ReplicatedLinear}


def _model_utils() -> dict[str, Any]:
    root = _package_root("installed")
    return source_functions(root, "installed", "vllm/model_executor/models/utils.py", ("maybe_prefix",))


_STUB_VALUES: dict[str, Any] = {
    "vllm.triton_utils": _triton_values,
    "vllm.logger": lambda: {"init_logger": logging.getLogger},
    "vllm.config.compilation": lambda: {"CUDAGraphMode": _CUDAGraphMode},
    "vllm.platforms": lambda: {"current_platform": _Platform()},
    "vllm.model_executor.layers.linear": _replicated_linear,
    "vllm.model_executor.models.utils": _model_utils,
}


def _stub_values(fullname: str, path: str) -> Mapping[str, Any] | None:
    """The values of the stub serving ``fullname``, or None where the real module loads."""
    if fullname not in _ENGINE_STUBS:
        return None
    values = _STUB_VALUES.get(fullname)
    return values() if values else {}


@dataclasses.dataclass(frozen=True)
class VLLMModules:
    """The loaded DSpark modules of one installed vLLM.

    Attributes:
        version: the installed version string, e.g. ``"0.33.0"``.
        root: the directory holding the ``vllm`` package (read for constants).
        modules: short name -> module (``DSPARK_MODULES``, plus the optional ones that loaded).
        missing: optional short name -> why it did not load, for modules the wheel ships.
    """

    version: str
    root: str
    modules: Mapping[str, types.ModuleType]
    missing: Mapping[str, str] = dataclasses.field(default_factory=dict)

    def __getitem__(self, short_name: str) -> types.ModuleType:
        try:
            return self.modules[short_name]
        except KeyError:
            absent = "not in this release's wheel" if short_name in OPTIONAL_MODULES else "not a DSpark module"
            why = self.missing.get(short_name, absent)
            raise KeyError(f"vllm=={self.version} has no DSpark module {short_name!r} ({why})") from None

    def __contains__(self, short_name: object) -> bool:
        return short_name in self.modules


def installed_version() -> str:
    """The version of the installed ``vllm`` distribution.

    Raises:
        AdapterLoadError: not installed (the message says how to install it), or a release
            older than ``MIN_VERSION`` (no DSpark).
    """
    try:
        text = version("vllm")
    except PackageNotFoundError as exc:
        raise AdapterLoadError(
            "vllm: the package is not installed; install the wheel without its engine "
            "dependencies: " + INSTALL_HINT.format(version="X")
        ) from exc
    if release_of("vllm", text) < MIN_VERSION:
        raise AdapterLoadError(
            f"vllm=={text}: DSpark needs vllm >= {'.'.join(map(str, MIN_VERSION))} (V2 model runner)"
        )
    return text


@functools.cache
def load_vllm() -> VLLMModules:
    """Import the DSpark modules of the installed vLLM without its engine (see module note).

    Cached: the import happens once per process.

    Raises:
        AdapterLoadError: not installed, too old, or a DSpark module failed to import; the
            message names the version, the module and the missing piece.
    """
    version_text = installed_version()
    root = _package_root(version_text)
    if getattr(sys.modules.get("vllm"), "__file__", None) is None:
        install_finder(WheelFinder("vllm", root, _STUBS, _stub_values, _PLAIN_PACKAGES))
    _install_interpreter_mask_fix()
    loaded = {short: _import(version_text, name) for short, name in DSPARK_MODULES.items()}
    missing: dict[str, str] = {}
    for short, name in OPTIONAL_MODULES.items():
        if not ships(root, name):
            continue
        try:
            loaded[short] = _import(version_text, name)
        except AdapterLoadError as exc:
            missing[short] = str(exc)
    return VLLMModules(version=version_text, root=root, modules=loaded, missing=missing)


def ships(root: str, module_name: str) -> bool:
    """Whether the wheel under ``root`` (``VLLMModules.root``) has the file of ``module_name``
    (a module ``.py`` or a package directory)."""
    path = os.path.join(root, *module_name.split("."))
    return os.path.isfile(path + ".py") or os.path.isdir(path)


def defines_name(root: str, module_name: str, name: str) -> bool:
    """Whether the wheel's file of ``module_name`` defines ``name`` at its top level (a class,
    function or assignment), read without importing it; False when the file is absent."""
    path = os.path.join(root, *module_name.split(".")) + ".py"
    try:
        with open(path, encoding="utf-8") as handle:
            tree = ast.parse(handle.read(), filename=path)
    except OSError:
        return False
    for node in tree.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)) and node.name == name:
            return True
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == name for t in node.targets):
            return True
    return False


def _package_root(version_text: str) -> str:
    """The directory holding the ``vllm`` package, found without importing it."""
    module = sys.modules.get("vllm")
    locations = list(getattr(module, "__path__", ()) or ())
    if not locations:
        spec = importlib.util.find_spec("vllm")
        locations = list(spec.submodule_search_locations or ()) if spec is not None else []
    if not locations:
        raise AdapterLoadError(f"vllm=={version_text}: the installed package has no files")
    return os.path.dirname(locations[0])


#: Where a stub goes for a module the DSpark files import and this environment lacks.
_STUB_HINT = ("If it is an engine module, add a stub to conformance/adapters/vllm/loader.py:_ENGINE_STUBS "
              "with the reason")


def _import(version_text: str, module_name: str) -> types.ModuleType:
    return import_engine_module(f"vllm=={version_text}", module_name, _STUB_HINT)


def source_functions(root: str, version_text: str, relative_path: str, names: tuple[str, ...], *,
                     class_name: str | None = None) -> dict[str, Any]:
    """vLLM's own functions ``names``, compiled from the installed wheel's file alone.

    For helpers that live in modules whose import needs the engine (``vllm/config/*``, whose
    package pulls in pydantic models of the whole configuration; ``vllm/v1/spec_decode/
    utils.py``, which reads the platform at import): the plain-Python functions are taken
    from ``<root>/relative_path`` (``root``: ``VLLMModules.root``) and compiled there (globals: ``torch``), nothing else of
    the module runs. ``class_name``: take them from that class's body (static methods; the
    class is then a namespace of them, so ``Class._helper(...)`` calls between them resolve).

    Raises:
        AdapterLoadError: the file is missing, or lacks one of ``names`` (names the version,
            the file and the missing functions).
    """
    path = os.path.join(root, *relative_path.split("/"))
    try:
        with open(path, encoding="utf-8") as handle:
            tree = ast.parse(handle.read(), filename=path)
    except OSError as exc:
        raise AdapterLoadError(f"vllm=={version_text}: cannot read {relative_path}: {exc}") from exc
    body = tree.body
    if class_name is not None:
        classes = [node for node in body if isinstance(node, ast.ClassDef) and node.name == class_name]
        body = classes[0].body if classes else []
    nodes = [node for node in body if isinstance(node, ast.FunctionDef) and node.name in names]
    missing = sorted(set(names) - {node.name for node in nodes})
    if missing:
        where = f"{relative_path}:{class_name}" if class_name else relative_path
        raise AdapterLoadError(f"vllm=={version_text}: {where} defines no {missing}")
    for node in nodes:
        node.decorator_list = []  # @staticmethod: plain functions of the namespace below
    import torch

    namespace: dict[str, Any] = {"torch": torch, "__name__": f"vllm_conformance_source:{relative_path}"}
    exec(compile(ast.Module(body=nodes, type_ignores=[]), path, "exec"), namespace)  # vLLM's own code
    functions = {node.name: namespace[node.name] for node in nodes}
    if class_name is not None:
        namespace[class_name] = types.SimpleNamespace(**functions)
    return functions
