"""``hatch-precompile warm PACKAGE``: run the workloads here and keep their caches in the per-user cache."""

from __future__ import annotations

import argparse
from typing import Any

from hatch_precompile.errors import UsageError
from hatch_precompile.protocol import EXIT_OK
from hatch_precompile.run.sets import usercache
from hatch_precompile.tools import arguments


def configure(subparsers: Any) -> None:
    p = arguments.command(subparsers, "warm", "run the workloads here and keep their caches in the per-user cache", """
        Julia's Pkg.precompile(): for an installed package whose shipped artifacts do not match this
        environment, or that shipped none (a PRECOMPILE=0 wheel, an index's pure wheel), run its
        workloads here, in the same child process as a wheel build, and keep what compiled in the
        per-user cache (XDG_CACHE_HOME/hatch-precompile/...). load() uses it where the shipped
        artifacts do not fit, with the same checks. Nothing is done when the shipped artifacts
        already match (--force warms anyway); --clear removes what warm stored for the package.""", """
        hatch-precompile warm mypkg
        hatch-precompile warm mypkg --workload mypkg.precompile:workload --timeout 600
        hatch-precompile warm mypkg --clear
        hatch-precompile warm --json mypkg""")
    p.add_argument("package", help="installed package (import or project name)")
    arguments.add_workload_options(p, "the names in the manifest")
    p.add_argument("--force", action="store_true", help="warm even if the shipped artifacts match")
    p.add_argument("--clear", action="store_true", help="remove what warm stored for PACKAGE")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from hatch_precompile.tools import command_targets, warm

    say, said = arguments.speaker(args), arguments.result(args)
    if args.clear:
        if args.workload or args.force:
            raise UsageError("--clear takes no --workload or --force")
        package = command_targets.import_name(args.package)
        removed = warm.clear(package)
        said(f"warm --clear: removed {removed}" if removed is not None else
             f"warm --clear: nothing stored for {package} ({usercache.package_dir(package)})")
        if args.json:
            arguments.print_json({"package": package, "action": "cleared" if removed is not None else "nothing stored",
                                  "removed": str(removed) if removed is not None else None})
        return EXIT_OK
    package, directory, workloads, source = arguments.workloads(args)
    if not args.force:
        fits = warm.shipped_match(directory)
        if fits:
            said(f"warm: {package}'s shipped artifacts already match this environment ({fits}); "
                 "nothing to do (--force warms anyway)")
            if args.json:
                arguments.print_json({"package": package, "action": "already matching", "matching": fits})
            return EXIT_OK
    enabled, why = arguments.enabled(package)
    if not enabled:
        said(f"warm: note: {package} is disabled ({why}); load() will not use what is stored until enabled")
    say(f"warm {package}: running {', '.join(workloads)} (from {source}) ...")
    stored, manifest = warm.warm(package, workloads, args.timeout, say, command_targets.declared_device(package))
    total = sum(entry.size for entry in manifest.files.values())
    said(f"warm: stored {len(manifest.files)} files ({total / 1e6:.2f} MB) for torch {manifest.env['torch']}, "
         f"CPU capability {manifest.env['cpu_capability']} in {stored}")
    said(f"warm: load({package!r}) uses them in this environment when the shipped artifacts do not match")
    if args.json:
        arguments.print_json({
            "package": package, "action": "stored", "stored": str(stored), "workloads": workloads, "source": source,
            "files": len(manifest.files), "bytes": total, "env": manifest.env,
            "enabled": enabled, "why": why,
        })
    return EXIT_OK
