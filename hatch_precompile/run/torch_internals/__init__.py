"""Every place hatch-precompile touches torch's internals: lazily, once, failing safe.

Shared by every route, one module per job: ``registry`` (every touchpoint by name, and the
reference table made from it), ``import_hook`` (run a patch right after a torch module's first
import), ``patching`` (wrap a function or method with before/instead/after hooks, guarded against
changing torch's compile bookkeeping), ``settings`` (torch's settings set, its loggers filtered,
what Inductor resolved) and ``module_state`` (an ``nn.Module``'s private containers and hooks).
Each route's own touches are in the folder named as its run side's: ``caches/``, ``served/``,
``steps/``. What only a build calls (AOTInductor's compile, the joint export) is on the build
side: ``builder/steps/torch_export.py``.

Only this package and what runs in a build's child import torch's private modules (a lint rule
says so: ``[tool.ruff.lint.flake8-tidy-imports]``).

Wrapping happens right after the torch module is first imported (so that ``import pkg`` does not
pay for importing Inductor). A wrapper takes any signature and passes every call through; a hook
sees the call's arguments by name (defaults filled in; none when the signature cannot be read)
and may, before the call, replace some (``before``), answer it in place of torch (``instead``,
returning anything but ``PASS``), or look at the result (``after``). A hook that raises is as if it
had not run, and is logged (``hatch_precompile`` logger, debug level; ``HATCH_PRECOMPILE_DEBUG=1``
prints it): it can slow torch down, never break a compile. So is a hook that leaves torch's compile
bookkeeping (Dynamo's open events, its metrics context) other than it found it: what can be is
put back, and that hook is not called again in the process. What is not where we expect it is left
alone. ``HATCH_PRECOMPILE_NO_PATCHES=1`` (or its older name ``HATCH_PRECOMPILE_NO_SPEEDUPS``) turns
every wrapper and prefetch off: torch's code then runs untouched, only slower. The set's settings
(``inductor-config``) still apply: they are torch's own knobs, and without them every shipped
graph would miss.
"""
