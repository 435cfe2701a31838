"""The hatchling build hook ``[tool.hatch.build.hooks.precompile]``: an adapter, nothing more.

It maps hatch's table to Options (builder/options.py), asks the switch (run/switch.py) and the target
(builder/target_environment.py), and hands off to builder/workload_run.py; what comes back goes into the wheel, summed
up (builder/build_summary.py) and tagged (builder/sets/wheel_tag.py). Messages go through hatch's app
(builder/reporter.py); an error of the build side becomes hatch's abort.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import time
from functools import cached_property
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

from hatch_precompile.builder import options as options_module
from hatch_precompile.builder import settings as settings_module
from hatch_precompile.builder.reporter import Reporter, worded
from hatch_precompile.errors import Instability, OptionError, TargetEnvError
from hatch_precompile.protocol import DECLARATION_FILE, DIRNAME, Declaration
from hatch_precompile.run import variables


class PrecompileBuildHook(BuildHookInterface):
    PLUGIN_NAME = "precompile"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._work_dir: Path | None = None

    @cached_property
    def options(self) -> options_module.Options:
        """The table alone: what every target checks (a typo fails the sdist too)."""
        try:
            return options_module.parse(self.config, self.PLUGIN_NAME)
        except OptionError as exc:
            raise ValueError(str(exc)) from None

    @cached_property
    def settings(self) -> settings_module.Settings:
        """The table, the environment and the preferences file, merged (builder/settings.py)."""
        try:
            return settings_module.read(self.config, self.PLUGIN_NAME, self.metadata.name, root=Path(self.root))
        except OptionError as exc:
            raise ValueError(str(exc)) from None

    @cached_property
    def reporter(self) -> Reporter:
        """The build's messages, through hatch's app (builder/reporter.py words them)."""
        return Reporter(self.app.display_info, self.app.display_warning)

    @property
    def enabled(self) -> tuple[bool, str]:
        """(on, why). The preferences file may name the project or its import package."""
        return self.settings.enabled, self.settings.why

    @cached_property
    def where(self) -> Any:
        """Where the workload runs: the target environment when it has a suitable torch."""
        from hatch_precompile.builder import installer_pins, target_environment

        try:
            return target_environment.choose(self._torch_requirement(), pins=installer_pins.discover())
        except TargetEnvError as exc:
            raise ValueError(f"build hook `{self.PLUGIN_NAME}`: {exc}") from None

    def _torch_requirement(self) -> str | None:
        """The project's own requirement on torch, as written (``torch>=2.7``), if it has one."""
        from packaging.requirements import InvalidRequirement, Requirement
        from packaging.utils import canonicalize_name

        for raw in self.metadata.core.dependencies:
            try:
                if canonicalize_name(Requirement(raw).name) == "torch":
                    return raw
            except InvalidRequirement:
                continue
        return None

    # -- hatchling interface -------------------------------------------------------------
    def dependencies(self) -> list[str]:
        """What the build env needs for a precompiled wheel: the tools that tag it (builder/sets/elf.py:
        not in users' installs), the project's torch requirement, and the torch the installer was
        told to put into the target (target_environment.py), unless the workload runs in the target env."""
        if self.target_name != "wheel" or not self.enabled[0] or not self.options.workloads:
            return []
        from hatch_precompile.builder.sets import elf

        tools = list(elf.PUBLISH_REQUIREMENTS)
        if self.where.target is not None:
            return tools
        requirement = self._torch_requirement()
        if not self.where.pins:
            return tools + ([requirement] if requirement else [])
        from hatch_precompile.builder import installer_pins

        return tools + installer_pins.merged([*self.where.pins, *([requirement] if requirement else [])])

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        options = self.options  # a typo fails every target, not just the wheel
        if self.target_name != "wheel":
            return
        package = options.import_package
        if package is not None:
            # Even a plain wheel says what its workloads are, so `hatch-precompile warm` finds them.
            declaration = self._scratch() / DECLARATION_FILE
            declaration.write_text(Declaration(package, options.workloads, options.timeout, options.device).dumps())
            build_data["extra_metadata"][str(declaration)] = DECLARATION_FILE
        if version == "editable":
            self.reporter.info("editable install, workloads not run (only regular wheels ship caches)")
            return
        enabled, why = self.enabled
        if not enabled:
            self.reporter.info(f"off ({why}); building a plain wheel")
            return
        package = self._check_package(package)
        started = time.monotonic()
        artifacts = self._capture(package)
        if artifacts is None:
            return
        from hatch_precompile.builder import build_summary
        from hatch_precompile.builder.sets import artifact_layout, wheel_tag

        manifests = artifact_layout.set_manifests(artifacts)
        build_summary.report(manifests, artifact_layout.stored_bytes(artifacts), self.reporter)
        try:
            build_summary.check_instabilities(manifests, options, self.reporter)
        except Instability as exc:
            self.app.abort(worded(str(exc)))
            raise SystemExit(1) from None  # abort() exits; this only guards an app that returns
        build_data["force_include"][str(artifacts)] = f"{package.replace('.', '/')}/{DIRNAME}"
        build_data["pure_python"] = False
        tag = wheel_tag.platform_tag(manifests, self.reporter)
        if tag:
            build_data["tag"] = tag
        else:
            build_data["infer_tag"] = True
        self.reporter.info(build_summary.total(manifests, time.monotonic() - started))

    def finalize(self, version: str, build_data: dict[str, Any], artifact_path: str) -> None:
        self._cleanup()

    # -- steps -----------------------------------------------------------------------------
    def _check_package(self, package: str | None) -> str:
        hook = f"for build hook `{self.PLUGIN_NAME}`"
        if not self.options.workloads or package is None:
            raise ValueError(f'Option `workload` {hook} is required (e.g. workload = "mypkg.precompile:workload")')
        if not any((Path(self.root) / base / package.replace(".", "/")).is_dir() for base in ("", "src")):
            raise ValueError(
                f"Option `package` {hook} is {package!r}, but no such package directory exists under "
                f"{self.root} (set `package` to the package that calls hatch_precompile.load)"
            )
        return package

    def _capture(self, package: str) -> Path | None:
        """Run the workloads; the artifact dir, or None when the wheel is to be built without."""
        from hatch_precompile.builder import capture_outcome, failure_hints  # imported only when on
        from hatch_precompile.builder.workload_run import capture

        where = self.where
        self.reporter.info(f"building artifacts for {where.why}")
        environ, removed = variables.as_on_users_machines(where.environ(os.environ))
        if removed:
            self.reporter.info(f"the workloads run without {', '.join(removed)}, as on users' "
                               "machines (it changes torch defaults that are part of every cache key)")
        trace = self.settings.torch_trace
        if trace is not None and (Path(self.root) / "PKG-INFO").is_file() and Path(self.root) in trace.parents:
            self.reporter.notice(f"torch's trace goes to {trace}, inside the unpacked sdist this wheel is built from, "
                                 "which the frontend removes after the build: set HATCH_PRECOMPILE_TORCH_TRACE to "
                                 "an absolute path to keep it")
        outcome = capture_outcome.outcome_of(
            lambda: capture(
                root=Path(self.root), work_dir=self._scratch(), package=package,
                workloads=list(self.options.workloads), timeout=self.options.timeout,
                reporter=self.reporter, python=where.python, environ=environ,
                capabilities=self.options.cpu_capabilities, device=self.options.device,
                cpu_target=self.options.cpu_target, heartbeat=self.settings.heartbeat, trace=trace,
                dynamo_cache=self.options.dynamo_cache, users_torch=where.torch_from == "target",
            ),
            self.options.workloads, going_on="building the wheel without precompiled artifacts",
            on_failure=self.options.on_failure, hints=lambda failure: failure_hints.hints(failure, where),
        )
        if outcome.stops:
            self.app.abort(worded(*outcome.lines))
            raise SystemExit(1)  # abort() exits; this only guards an app that returns
        if outcome.artifacts is None:
            self.reporter.notice(*outcome.lines)
        return outcome.artifacts

    def _scratch(self) -> Path:
        if self._work_dir is None:
            self._work_dir = Path(tempfile.mkdtemp(prefix="hatch-precompile-"))
            atexit.register(self._cleanup)
        return self._work_dir

    def _cleanup(self) -> None:
        if self._work_dir is not None:
            shutil.rmtree(self._work_dir, ignore_errors=True)
            self._work_dir = None

