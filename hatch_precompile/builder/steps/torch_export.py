"""Torch's internals only a build calls, for the export route (builder/steps/export.py): AOTInductor's
compile of an exported program, and the joint export of a loss and its gradients."""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from typing import Any

from hatch_precompile.run.torch_internals.registry import lookup


def aoti_compile(program: Any, package_path: str, configs: dict[str, Any]) -> Any:
    """AOTInductor's package of an exported program (build side: the export route)."""
    lookup("aoti-compile", "call")
    from torch._inductor import aoti_compile_and_package, config

    # The compile writes its package's metadata into Inductor's global setting in place, and that
    # setting is in every later graph's cache key: given back, so the build's other graphs keep
    # the key a user's process computes.
    metadata = getattr(getattr(config, "aot_inductor", None), "metadata", None)
    before = dict(metadata) if isinstance(metadata, dict) else None
    try:
        return aoti_compile_and_package(program, package_path=package_path, inductor_configs=configs)
    finally:
        if before is not None and isinstance(metadata, dict):
            metadata.clear()
            metadata.update(before)


@contextlib.contextmanager
def without_torchs_own_deprecations() -> Iterator[None]:
    """Torch 2.13's export deep-copies its own tree specs (run_decompositions, the joint export,
    AOTInductor's compile), and each copy of a leaf warns that ``LeafSpec`` is deprecated: torch's
    code, nothing the package's author can change, printed into every build's output."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"`isinstance\(treespec, LeafSpec\)` is deprecated",
                                category=FutureWarning)
        yield


def has_joint_export() -> bool:
    """Whether this torch can make an exported loss into one graph of the loss and its gradients."""
    lookup("joint-export", "call")
    try:
        from torch.export import experimental
    except ImportError:
        return False
    return callable(getattr(experimental, "_export_forward_backward", None))


def joint_program(torch: Any, program: Any) -> Any:
    """``program`` (an export whose forward returns ``(loss,)``) as one program that returns the loss,
    then the gradient of each parameter that requires one; raises where this torch has no such pass."""
    lookup("joint-export", "call")
    from torch.export import experimental

    joint = getattr(experimental, "_export_forward_backward", None)
    if joint is None:
        raise NotImplementedError(f"torch {torch.__version__} has no torch.export.experimental._export_forward_backward")
    with _math_attention_on_cpu(program):
        return joint(program, joint_loss_index=0)


def _math_attention_on_cpu(program: Any) -> Any:
    """Attention by its math kernel while a CPU program's backward is derived: the joint graph of
    the fused CPU kernel (_scaled_dot_product_flash_attention_for_cpu) gives other gradients than
    eager's (torch 2.13: off by 0.1 to 5 on a small transformer), the math kernel's matches. GPU
    programs keep their fused kernels; the build's check compares every gradient either way."""
    import contextlib

    tensors = [*program.state_dict.values(), *getattr(program, "constants", {}).values()]
    if any(getattr(t, "is_cuda", False) for t in tensors):
        return contextlib.nullcontext()
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError:
        return contextlib.nullcontext()
    return sdpa_kernel([SDPBackend.MATH])
