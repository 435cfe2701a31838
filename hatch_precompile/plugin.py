"""The hatchling build hook ``[tool.hatch.build.hooks.precompile]``."""

from __future__ import annotations

import atexit
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface
from hatch_precompile import gate, manifest

DEFAULT_TIMEOUT = 1800.0
ON_FAILURE = ("error", "warn")
# Keys hatchling itself reads from every hook table.
RESERVED = frozenset(
    {"dependencies", "require-runtime-dependencies", "require-runtime-features", "enable-by-default"}
)
KNOWN = frozenset({"workload", "enable", "timeout", "on-failure", "package"})
_DOTTED = r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*"
WORKLOAD_RE = re.compile(rf"{_DOTTED}:{_DOTTED}")


class PrecompileBuildHook(BuildHookInterface):
    PLUGIN_NAME = "precompile"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._work_dir: Path | None = None

    # -- options -------------------------------------------------------------------------
    def _option_error(self, message: str) -> None:
        raise ValueError(f"Option {message} for build hook `{self.PLUGIN_NAME}`")

    def _options(self) -> dict[str, Any]:
        config = self.config
        unknown = sorted(set(config) - KNOWN - RESERVED)
        if unknown:
            raise ValueError(
                f"Unknown option(s) {', '.join(f'`{u}`' for u in unknown)} for build hook "
                f"`{self.PLUGIN_NAME}`; known options: {', '.join(sorted(KNOWN))}"
            )
        enable = config.get("enable", True)
        if not isinstance(enable, bool):
            self._option_error(f"`enable` must be a boolean, got {enable!r}")
        workloads = config.get("workload", [])
        if isinstance(workloads, str):
            workloads = [workloads]
        if not isinstance(workloads, list) or not all(isinstance(w, str) for w in workloads):
            self._option_error(f"`workload` must be a string or an array of strings, got {workloads!r}")
        for workload in workloads:
            if not WORKLOAD_RE.fullmatch(workload):
                self._option_error(
                    f"`workload` entry {workload!r} must look like 'package.module:function'"
                )
        timeout = config.get("timeout", DEFAULT_TIMEOUT)
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
            self._option_error(f"`timeout` must be a positive number of seconds, got {timeout!r}")
        on_failure = config.get("on-failure", "error")
        if on_failure not in ON_FAILURE:
            self._option_error(f"`on-failure` must be one of {', '.join(ON_FAILURE)}, got {on_failure!r}")
        package = config.get("package")
        if package is not None and not (isinstance(package, str) and re.fullmatch(_DOTTED, package)):
            self._option_error(f"`package` must be an importable package name, got {package!r}")
        return {
            "enable": enable,
            "workloads": workloads,
            "timeout": float(timeout),
            "on_failure": on_failure,
            "package": package,
        }

    def _package(self, options: dict[str, Any]) -> str | None:
        """The import package that ships ``_precompiled/`` (``package``, or the workload's)."""
        if options["package"]:
            return options["package"]
        if options["workloads"]:
            return options["workloads"][0].split(".", 1)[0].split(":", 1)[0]
        return None

    def _enabled(self, options: dict[str, Any]) -> tuple[bool, str]:
        # The preferences file may name the project or its import package (load() knows only
        # the latter); `build` lets it be found from `python -m build`'s own venv.
        package = self._package(options)
        try:
            return gate.decide(
                self.metadata.name, options["enable"], aliases=[package] if package else [], build=True
            )
        except gate.GateValueError as exc:
            raise ValueError(f"build hook `{self.PLUGIN_NAME}`: {exc}") from None

    # -- hatchling interface -------------------------------------------------------------
    def dependencies(self) -> list[str]:
        """In an isolated build env, ask for the project's own torch requirement."""
        if self.target_name != "wheel":
            return []
        options = self._options()
        if not self._enabled(options)[0] or not options["workloads"]:
            return []
        from packaging.requirements import InvalidRequirement, Requirement
        from packaging.utils import canonicalize_name

        for raw in self.metadata.core.dependencies:
            try:
                requirement = Requirement(raw)
            except InvalidRequirement:
                continue
            if canonicalize_name(requirement.name) == "torch":
                return [raw]
        return []

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        options = self._options()  # a typo fails every target, not just the wheel
        if self.target_name != "wheel":
            return
        if version == "editable":
            self.app.display_info(
                "precompile: editable install, workloads not run (only regular wheels ship caches)"
            )
            return
        enabled, why = self._enabled(options)
        if not enabled:
            self.app.display_info(f"precompile: off ({why}); building a plain wheel")
            return
        if not options["workloads"]:
            self._option_error("`workload` is required (e.g. workload = \"mypkg.precompile:workload\")")
        package = self._package(options)
        if not any((Path(self.root) / base / package.replace(".", "/")).is_dir() for base in ("", "src")):
            self._option_error(
                f"`package` is {package!r}, but no such package directory exists under "
                f"{self.root} (set `package` to the package that calls hatch_precompile.load)"
            )

        from hatch_precompile.capture import WorkloadFailed, capture  # imported only when on

        self._work_dir = Path(tempfile.mkdtemp(prefix="hatch-precompile-"))
        atexit.register(self._cleanup)
        try:
            artifacts = capture(
                root=Path(self.root),
                work_dir=self._work_dir,
                package=package,
                workloads=options["workloads"],
                timeout=options["timeout"],
                say=self.app.display_info,
            )
        except WorkloadFailed as exc:
            self._cleanup()
            if options["on_failure"] == "warn":
                self.app.display_warning(
                    f"precompile: {exc}\nprecompile: on-failure = \"warn\": building the wheel "
                    "without precompiled artifacts"
                )
                return
            self.app.abort(f"precompile: {exc}")
            raise  # abort() exits; this only guards an app that returns
        except BaseException:
            self._cleanup()
            raise
        if artifacts is None:
            self._cleanup()
            self.app.display_warning(
                "precompile: the workload compiled nothing (no torch.compile call ran and no "
                "TorchScript module was saved); building the wheel without artifacts"
            )
            return
        self._report(artifacts)
        build_data["force_include"][str(artifacts)] = f"{package.replace('.', '/')}/{manifest.DIRNAME}"
        build_data["pure_python"] = False
        build_data["infer_tag"] = True

    def finalize(self, version: str, build_data: dict[str, Any], artifact_path: str) -> None:
        self._cleanup()

    def _cleanup(self) -> None:
        if self._work_dir is not None:
            shutil.rmtree(self._work_dir, ignore_errors=True)
            self._work_dir = None

    def _report(self, artifacts: Path) -> None:
        data = manifest.parse((artifacts / manifest.FILENAME).read_bytes())
        files = data["files"]
        total = sum(entry["size"] for entry in files.values())
        graphs = {p.split("/")[2] for p in files if p.startswith("inductor/aotautograd/")}
        kernels = [p for p in files if p.endswith(".so")]
        breaks = sum(len(w["graph_breaks"]) for w in data["workloads"])
        self.app.display_info(
            f"precompile: captured {len(graphs)} compiled graph(s), {len(kernels)} kernel "
            "binaries, "
            f"{len(data['torchscript'])} TorchScript module(s); {len(files)} files, "
            f"{total / 1e6:.2f} MB, in {data['timings']['total_seconds']:.1f} s"
            + (f"; {breaks} graph break(s)" if breaks else "")
        )
        env = data["env"]
        self.app.display_info(
            f"precompile: artifacts are used only with torch {env['torch']}, Python {env['python']}, "
            f"CPU capability {env['cpu_capability']}, compiler {env['cxx']}"
        )
