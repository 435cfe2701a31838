"""``hatch-precompile verify PACKAGE``: replay the workloads after load(); exit 1 on any cache miss."""

from __future__ import annotations

import argparse
from typing import Any

from hatch_precompile.errors import UsageError
from hatch_precompile.protocol import EXIT_FOUND, EXIT_OK
from hatch_precompile.tools import arguments


def configure(subparsers: Any) -> None:
    from hatch_precompile.tools.verify import SETTING_FORMS

    p = arguments.command(subparsers, "verify", "replay the workloads after load() in a fresh process; exit 1 on any "
                          "cache miss", """
        The package's CI check that its shipped artifacts still serve this environment. In a fresh
        process with an empty Inductor cache dir: import the package, load() it, replay its
        workloads and count what did not come from the artifacts: every miss is named with its
        reason (load()'s skip, the fields of torch's cache key that differ from the shipped graph's,
        the function whose source changed), and each shipped step is run as users load it against
        the workload's function. --threads and --setting replay again under settings users'
        programs make. Passes only on evidence: what cannot be told exits 1 too.""", """
        hatch-precompile verify mypkg
        hatch-precompile verify mypkg --threads 1,8 --setting deterministic
        hatch-precompile verify mypkg --workload mypkg.precompile:serve_workload --json""")
    p.add_argument("package", help="installed package (import or project name)")
    arguments.add_workload_options(p, "the names in the manifest")
    p.add_argument("--threads", metavar="N,N", help="replay again at each thread count (1,8), as users' machines run")
    p.add_argument("--setting", action="append", metavar="SETTING",
                   help="replay again under a setting a program may make (repeatable): " + ", ".join(SETTING_FORMS))
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from hatch_precompile.tools import verify

    try:
        threads = [int(n) for n in (args.threads or "").split(",") if n.strip()]
        if any(n < 1 for n in threads):
            raise ValueError
    except ValueError:
        raise UsageError(f"--threads {args.threads!r} must be thread counts, e.g. 1,8") from None
    try:
        replays = verify.variants(threads, [t for text in args.setting or [] for t in text.split(",") if t.strip()])
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    package, _, workloads, source = arguments.workloads(args)
    say = arguments.speaker(args)
    say(f"verify {package}: workloads from {source}: {', '.join(workloads)}")
    manifests = arguments.set_manifests(package)
    results = [(label, verify.run(package, workloads, args.timeout, say, setting, manifests, label=label))
               for label, setting in replays]
    if args.json:
        arguments.print_json(verify.as_json(package, results))
    else:
        print(verify.render_all(package, results), end="")
    return EXIT_FOUND if any(r["misses"] or r["unknown"] for _, r in results) else EXIT_OK
