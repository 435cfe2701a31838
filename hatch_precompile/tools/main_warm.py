"""``hatch-precompile warm PACKAGE``: run the workloads here and keep their caches in the per-user cache."""

from __future__ import annotations

import argparse
from typing import Any

from hatch_precompile.errors import UsageError
from hatch_precompile.protocol import EXIT_OK
from hatch_precompile.run import usercache
from hatch_precompile.tools import arguments

say = arguments.say


def configure(subparsers: Any) -> None:
    p = subparsers.add_parser("warm", help="run the workloads here and keep their caches in the per-user cache")
    p.add_argument("package", help="installed package (import or project name)")
    arguments.add_workload_options(p, "the names in the manifest")
    p.add_argument("--force", action="store_true", help="warm even if the shipped artifacts match")
    p.add_argument("--clear", action="store_true", help="remove what warm stored for PACKAGE")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from hatch_precompile.tools import targets, warm

    if args.clear:
        if args.workload or args.force:
            raise UsageError("--clear takes no --workload or --force")
        package = targets.import_name(args.package)
        removed = warm.clear(package)
        say(f"warm --clear: removed {removed}" if removed is not None else
            f"warm --clear: nothing stored for {package} ({usercache.package_dir(package)})")
        return EXIT_OK
    package, directory, workloads, source = arguments.workloads(args)
    if not args.force:
        fits = warm.shipped_match(package, directory)
        if fits:
            say(f"warm: {package}'s shipped artifacts already match this environment ({fits}); "
                "nothing to do (--force warms anyway)")
            return EXIT_OK
    enabled, why = arguments.decide(package)
    if not enabled:
        say(f"warm: note: {package} is disabled ({why}); load() will not use what is stored until enabled")
    say(f"warm {package}: running {', '.join(workloads)} (from {source}) ...")
    stored, manifest = warm.warm(package, workloads, args.timeout, say, targets.declared_device(package))
    total = sum(entry.size for entry in manifest.files.values())
    say(f"warm: stored {len(manifest.files)} files ({total / 1e6:.2f} MB) for torch {manifest.env['torch']}, "
        f"CPU capability {manifest.env['cpu_capability']} in {stored}")
    say(f"warm: load({package!r}) uses them in this environment when the shipped artifacts do not match")
    return EXIT_OK
