"""hatch-precompile: run a package's torch.compile warm-up at wheel build, ship the caches.

Runtime API (imports neither torch nor hatchling until there is something to load)::

    import hatch_precompile
    hatch_precompile.load(__name__)

The names below are resolved on first use, so that the build hook, which imports this package
too, does not pay for the runtime's imports when precompilation is off.

The package has three sides and one contract between them: ``run/`` (what ``import pkg`` runs),
``builder/`` (what a wheel build runs; ``hatch/`` adapts it to hatchling), ``tools/`` (the command
line), and ``protocol``.
"""

__version__ = "0.1.0"

_LAZY = {
    "LoadResult": "run.load_caches",
    "PrecompileWarning": "errors",
    "load": "run.load_caches",
    "load_torchscript": "run.torchscript",
    "save_torchscript": "builder.torchscript",
    "load_step": "run.steps.shipped_steps",
    "save_step": "builder.steps.step_capture",
    "StepMismatch": "errors",
    "StepCaptureError": "errors",
    "served": "run.served.served_compile",
}

__all__ = ["__version__", *_LAZY]


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'hatch_precompile' has no attribute {name!r}")
    from importlib import import_module

    value = getattr(import_module(f"hatch_precompile.{module}"), name)
    globals()[name] = value
    return value
