"""hatch-precompile: run a package's torch.compile warm-up at wheel build, ship the caches.

Runtime API (imports neither torch nor hatchling until there is something to load)::

    import hatch_precompile
    hatch_precompile.load(__name__)
"""

__version__ = "0.1.0"

from hatch_precompile.runtime import LoadResult, PrecompileWarning, load  # noqa: E402
from hatch_precompile.torchscript import load_torchscript, save_torchscript  # noqa: E402

__all__ = [
    "LoadResult",
    "PrecompileWarning",
    "__version__",
    "load",
    "load_torchscript",
    "save_torchscript",
]
