"""What a build says of the artifact sets it made, and the checks the project asked for on them.

One line per set (what was captured, and the environment it serves), and the ``graph-breaks`` and
``recompiles`` options, which a package's CI uses to catch a new graph break or recompile the day
it appears. Backend-neutral: the hatch adapter turns ``Instability`` into hatch's abort.
"""

from __future__ import annotations

from hatch_precompile.builder.options import Options
from hatch_precompile.builder.reporter import Reporter
from hatch_precompile.errors import Instability
from hatch_precompile.protocol import Manifest, file_kind


def report(manifests: list[Manifest], stored: int, reporter: Reporter) -> None:
    """One line per artifact set, and what the environment must be for each; ``stored``, the bytes
    their blobs take together."""
    for manifest in manifests:
        total = sum(entry.size for entry in manifest.files.values())
        breaks = sum(len(w.get("graph_breaks") or []) for w in manifest.workloads)
        steps = sum(path.endswith(".json") for path in manifest.files if file_kind(path) == "step")
        env = manifest.env
        reporter.info(
            f"captured {manifest.graph_entries} compiled graph(s), "
            f"{manifest.count('kernel_binary')} kernel binaries, {len(manifest.torchscript)} TorchScript "
            f"module(s)" + (f", {steps} step(s) ahead of time" if steps else "") + f"; {len(manifest.files)} files, "
            f"{total / 1e6:.2f} MB, in {manifest.timings['total_seconds']:.1f} s"
            + (f"; {breaks} graph break(s)" if breaks else "")
        )
        reporter.info(
            f"artifacts are used only with torch {env['torch']}, Python {env['python']}, "
            f"CPU capability {env['cpu_capability']}"
            + (f", GPU {env['gpu']} (compute capability {env.get('gpu_capability')}, CUDA {env['cuda']}, "
               f"Triton {env['triton']})" if env.get("gpu") else "")
        )
        if manifest.cpu_target:
            compiler = manifest.compiler or {}
            reporter.info(
                f"kernels built {manifest.cpu_target} by {compiler.get('version')}, for "
                + ("any thread count" if manifest.settings.get("cpp.dynamic_threads") else "this machine's thread "
                   "count only") + f"; they need the CPU features {', '.join(manifest.cpu_features) or '(none)'} "
                f"and any {compiler.get('family')} compiler"
            )
    if len(manifests) > 1:
        separate = sum(sum(e.size for e in m.files.values()) for m in manifests)
        reporter.info(
            f"{len(manifests)} artifact sets in {stored / 1e6:.2f} MB "
            f"({separate / 1e6:.2f} MB if each stored its own copy of the files they share)"
        )


def total(manifests: list[Manifest], seconds: float) -> str:
    """The build's last line: how long it took, from the hook's start to the wheel's tag, and where
    the time went (each set's import of torch and workloads, from its manifest; the rest is saving
    the caches, checking the kernels' needs and laying out the sets)."""
    imported = sum(float(m.timings.get("torch_import_seconds") or 0) for m in manifests)
    workloads = sum(float(w.get("seconds") or 0) for m in manifests for w in m.workloads)
    rest = max(seconds - imported - workloads, 0.0)
    return (f"done in {seconds:.1f} s: {len(manifests)} artifact set(s); importing torch {imported:.1f} s, the "
            f"workloads {workloads:.1f} s, saving and laying out {rest:.1f} s")


def check_instabilities(manifests: list[Manifest], options: Options, reporter: Reporter) -> None:
    """The ``graph-breaks`` and ``recompiles`` options: a notice at "warn", Instability at "error"."""
    from hatch_precompile.child import performance_pitfalls
    from hatch_precompile.protocol import workloads

    found: dict[str, list[str]] = {"graph-breaks": [], "recompiles": []}
    for manifest in manifests:
        for workload in workloads.of(manifest):
            for option, lines in performance_pitfalls.of_workload(workload.graph_breaks, workload.recompiles).items():
                found[option] = list(dict.fromkeys(found[option] + [f"{workload.name}: {line}" for line in lines]))
    for option, level in (("graph-breaks", options.graph_breaks), ("recompiles", options.recompiles)):
        if level == "off" or not found[option]:
            continue
        message = (f"the workload shows {len(found[option])} {option.replace('-', ' ')[:-1]}(s) "
                   f"(`{option} = \"{level}\"`):\n" + "\n".join(f"  {line}" for line in found[option]))
        if level == "error":
            raise Instability(message)
        reporter.notice(message)
