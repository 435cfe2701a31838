"""The hatchling build hook ``[tool.hatch.build.hooks.precompile]``."""

from __future__ import annotations

import atexit
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface
from hatch_precompile import declaration, gate, manifest

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
        self._choice: Any = None

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

    def _torch_requirement(self) -> str | None:
        """The project's own requirement on torch, as written (``torch>=2.7``), if it has one."""
        from packaging.requirements import InvalidRequirement, Requirement
        from packaging.utils import canonicalize_name

        for raw in self.metadata.core.dependencies:
            try:
                requirement = Requirement(raw)
            except InvalidRequirement:
                continue
            if canonicalize_name(requirement.name) == "torch":
                return raw
        return None

    def _where(self) -> Any:
        """Where the workload runs: the target environment when it has a suitable torch (target.py)."""
        if self._choice is None:
            from hatch_precompile import target

            try:
                self._choice = target.choose(self._torch_requirement())
            except target.TargetError as exc:
                raise ValueError(f"build hook `{self.PLUGIN_NAME}`: {exc}") from None
        return self._choice

    # -- hatchling interface -------------------------------------------------------------
    def dependencies(self) -> list[str]:
        """Ask for the project's torch requirement, unless the workload runs in the target env."""
        if self.target_name != "wheel":
            return []
        options = self._options()
        if not self._enabled(options)[0] or not options["workloads"]:
            return []
        requirement = self._torch_requirement()
        if requirement is None or self._where().target is not None:
            return []
        return [requirement]

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        options = self._options()  # a typo fails every target, not just the wheel
        if self.target_name != "wheel":
            return
        package = self._package(options)
        if package is not None:
            # Even a plain wheel says what its workloads are, so `hatch-precompile warm` finds them.
            self._declare(package, options, build_data)
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
        if not any((Path(self.root) / base / package.replace(".", "/")).is_dir() for base in ("", "src")):
            self._option_error(
                f"`package` is {package!r}, but no such package directory exists under "
                f"{self.root} (set `package` to the package that calls hatch_precompile.load)"
            )
        artifacts = self._capture(package, options)
        if artifacts is None:
            return
        self._report(artifacts)
        build_data["force_include"][str(artifacts)] = f"{package.replace('.', '/')}/{manifest.DIRNAME}"
        build_data["pure_python"] = False
        build_data["infer_tag"] = True

    def _declare(self, package: str, options: dict[str, Any], build_data: dict[str, Any]) -> None:
        file = self._scratch() / declaration.FILENAME
        file.write_text(declaration.dumps(package, options["workloads"], options["timeout"]))
        build_data["extra_metadata"][str(file)] = declaration.FILENAME

    def _scratch(self) -> Path:
        if self._work_dir is None:
            self._work_dir = Path(tempfile.mkdtemp(prefix="hatch-precompile-"))
            atexit.register(self._cleanup)
        return self._work_dir

    def _capture(self, package: str, options: dict[str, Any]) -> Path | None:
        """Run the workloads; the artifact dir, or None when the wheel is to be built without."""
        from hatch_precompile.capture import WorkloadFailed, capture  # imported only when on

        where = self._where()
        self.app.display_info(f"precompile: building artifacts for {where.why}")
        try:
            artifacts = capture(
                root=Path(self.root),
                work_dir=self._scratch(),
                package=package,
                workloads=options["workloads"],
                timeout=options["timeout"],
                say=self.app.display_info,
                python=where.python,
                environ=where.environ(os.environ),
            )
        except WorkloadFailed as exc:
            message = f"precompile: {exc}"
            if exc.missing_module:
                message += "\n" + self._missing_module_hint(exc.missing_module, where)
            if options["on_failure"] == "warn":
                self.app.display_warning(
                    f"{message}\nprecompile: on-failure = \"warn\": building the wheel without "
                    "precompiled artifacts"
                )
                return None
            self.app.abort(message)
            raise  # abort() exits; this only guards an app that returns
        if artifacts is None:
            self.app.display_warning(
                "precompile: the workload compiled nothing (no torch.compile call ran and no "
                "TorchScript module was saved); building the wheel without artifacts"
            )
        return artifacts

    @staticmethod
    def _missing_module_hint(module: str, where: Any) -> str:
        if where.target is not None:
            return (
                f"precompile: the workload imports {module!r}, which the environment being installed "
                f"into ({where.target.prefix}) does not have yet: installers add a project's "
                f"dependencies only after building its wheel. Install {module!r} there first, then "
                "install this project again"
            )
        return (
            f"precompile: the workload imports {module!r}, which the build environment "
            f"({sys.prefix}) does not have: set `require-runtime-dependencies = true` in "
            "[tool.hatch.build.hooks.precompile], or install it there"
        )

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
