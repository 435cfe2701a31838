"""The hatchling build hook ``[tool.hatch.build.hooks.precompile]``: an adapter, nothing more.

It maps hatch's table to Options (build/options.py), asks the switch (run/switch.py) and the target
(build/target.py), and hands off to build/capture.py; what comes back goes into the wheel.
"""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
from functools import cached_property
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

from hatch_precompile.build import options as options_module
from hatch_precompile.build import settings as settings_module
from hatch_precompile.build.reporter import Reporter, worded
from hatch_precompile.protocol import (
    BLOBS_DIR,
    DECLARATION_FILE,
    DIRNAME,
    MANIFEST_FILE,
    SETS_DIR,
    Declaration,
    Manifest,
    file_kind,
)
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
        except options_module.OptionError as exc:
            raise ValueError(str(exc)) from None

    @cached_property
    def settings(self) -> settings_module.Settings:
        """The table, the environment and the preferences file, merged (build/settings.py)."""
        try:
            return settings_module.load(self.config, self.PLUGIN_NAME, self.metadata.name)
        except options_module.OptionError as exc:
            raise ValueError(str(exc)) from None

    @cached_property
    def reporter(self) -> Reporter:
        """The build's messages, through hatch's app (build/reporter.py words them)."""
        return Reporter(self.app.display_info, self.app.display_warning)

    @property
    def enabled(self) -> tuple[bool, str]:
        """(on, why). The preferences file may name the project or its import package."""
        return self.settings.enabled, self.settings.why

    @cached_property
    def where(self) -> Any:
        """Where the workload runs: the target environment when it has a suitable torch."""
        from hatch_precompile.build import installer_pins, target

        try:
            return target.choose(self._torch_requirement(), pins=installer_pins.discover())
        except target.TargetEnvError as exc:
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
        """What the build env needs for a precompiled wheel: the tools that tag it (build/elf.py:
        not in users' installs), the project's torch requirement, and the torch the installer was
        told to put into the target (target.py), unless the workload runs in the target env."""
        if self.target_name != "wheel" or not self.enabled[0] or not self.options.workloads:
            return []
        from hatch_precompile.build import elf

        tools = list(elf.PUBLISH_REQUIREMENTS)
        if self.where.target is not None:
            return tools
        requirement = self._torch_requirement()
        if not self.where.pins:
            return tools + ([requirement] if requirement else [])
        from hatch_precompile.build import installer_pins

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
        artifacts = self._capture(package)
        if artifacts is None:
            return
        self._report(artifacts)
        self._check_instabilities(artifacts)
        build_data["force_include"][str(artifacts)] = f"{package.replace('.', '/')}/{DIRNAME}"
        build_data["pure_python"] = False
        tag = self._platform_tag(artifacts)
        if tag:
            build_data["tag"] = tag
        else:
            build_data["infer_tag"] = True

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
        from hatch_precompile.build.capture import Unusable, WorkloadFailed, capture  # imported only when on

        where = self.where
        self.reporter.info(f"building artifacts for {where.why}")
        environ, removed = variables.as_on_users_machines(where.environ(os.environ))
        if removed:
            self.reporter.info(f"the workloads run without {', '.join(removed)}, as on users' "
                               "machines (it changes torch defaults that are part of every cache key)")
        try:
            artifacts = capture(
                root=Path(self.root), work_dir=self._scratch(), package=package,
                workloads=list(self.options.workloads), timeout=self.options.timeout,
                reporter=self.reporter, python=where.python, environ=environ,
                capabilities=self.options.cpu_capabilities, device=self.options.device,
                cpu_target=self.options.cpu_target, heartbeat=self.settings.heartbeat,
            )
        except Unusable as exc:  # not the workload's fault: the wheel is still good without
            self.reporter.notice(f"{exc}; building the wheel without precompiled artifacts")
            return None
        except WorkloadFailed as exc:
            lines = [str(exc)]
            if exc.missing_module:
                lines.append(_missing_module_hint(exc.missing_module, where))
            if exc.no_gpu:
                lines.append(_no_gpu_hint(exc.no_gpu))
            if self.options.on_failure == "warn":
                self.reporter.notice(*lines, 'on-failure = "warn": building the wheel without precompiled artifacts')
                return None
            self.app.abort(worded(*lines))
            raise  # abort() exits; this only guards an app that returns
        if artifacts is None:
            self.reporter.notice(
                "the workload compiled nothing (no torch.compile call ran and no "
                "TorchScript module was saved); building the wheel without artifacts"
            )
        return artifacts

    def _report(self, artifacts: Path) -> None:
        """One line per artifact set, and what the environment must be for each."""
        stored = sum(blob.stat().st_size for blob in (artifacts / BLOBS_DIR).iterdir())
        manifests = [Manifest.parse(f.read_bytes()) for f in sorted((artifacts / SETS_DIR).glob(f"*/{MANIFEST_FILE}"))]
        for manifest in manifests:
            total = sum(entry.size for entry in manifest.files.values())
            breaks = sum(len(w.get("graph_breaks") or []) for w in manifest.workloads)
            steps = sum(path.endswith(".json") for path in manifest.files if file_kind(path) == "step")
            env = manifest.env
            self.reporter.info(
                f"captured {manifest.graph_entries} compiled graph(s), "
                f"{manifest.count('kernel_binary')} kernel binaries, {len(manifest.torchscript)} TorchScript "
                f"module(s)" + (f", {steps} step(s) ahead of time" if steps else "") + f"; {len(manifest.files)} files, {total / 1e6:.2f} MB, in "
                f"{manifest.timings['total_seconds']:.1f} s" + (f"; {breaks} graph break(s)" if breaks else "")
            )
            self.reporter.info(
                f"artifacts are used only with torch {env['torch']}, Python {env['python']}, "
                f"CPU capability {env['cpu_capability']}"
                + (f", GPU {env['gpu']} (compute capability {env.get('gpu_capability')}, CUDA {env['cuda']}, "
                   f"Triton {env['triton']})" if env.get("gpu") else "")
            )
            if manifest.cpu_target:
                compiler = manifest.compiler or {}
                self.reporter.info(
                    f"kernels built {manifest.cpu_target} by {compiler.get('version')}, for "
                    + ("any thread count" if manifest.settings.get("cpp.dynamic_threads") else "this machine's thread "
                       "count only") + f"; they need the CPU features {', '.join(manifest.cpu_features) or '(none)'} "
                    f"and any {compiler.get('family')} compiler"
                )
        if len(manifests) > 1:
            separate = sum(sum(e.size for e in m.files.values()) for m in manifests)
            self.reporter.info(
                f"{len(manifests)} artifact sets in {stored / 1e6:.2f} MB "
                f"({separate / 1e6:.2f} MB if each stored its own copy of the files they share)"
            )

    def _platform_tag(self, artifacts: Path) -> str | None:
        """The wheel's whole tag when every set's kernels allow a manylinux one (build/elf.py); None
        for this platform's own tag, which hatchling infers."""
        from packaging.tags import sys_tags

        from hatch_precompile.build import elf

        here = next(t for t in sys_tags() if "manylinux" not in t.platform and "musllinux" not in t.platform)
        if sys.platform.startswith("linux") and not elf.has_publishing_tools():
            # A build without isolation, for this environment's own install (pip install
            # --no-build-isolation): its own platform's tag serves it; publishing needs manylinux.
            self.reporter.info(
                f"platform tag {here.platform}, this machine's own (auditwheel, which finds the manylinux "
                f"tag, is not installed here); for a manylinux tag to publish the wheel, build with hatch-precompile's "
                f"publishing tools: pip install 'hatch-precompile[{elf.PUBLISH_EXTRA}]'")
            return None
        manifests = [Manifest.parse(f.read_bytes()) for f in sorted((artifacts / SETS_DIR).glob(f"*/{MANIFEST_FILE}"))]
        tag, why = elf.wheel_platform([m.platform for m in manifests])
        if tag is None:
            self.reporter.info(f"platform tag linux: {why}")
            return None
        self.reporter.info(f"platform tag {tag}, as auditwheel's policy allows for the kernels ({why})")
        return f"{here.interpreter}-{here.abi}-{tag}"

    def _check_instabilities(self, artifacts: Path) -> None:
        """The ``graph-breaks`` and ``recompiles`` options: a package's CI catches a new one the day it appears."""
        from hatch_precompile.child import pitfalls
        from hatch_precompile.protocol import workloads

        found: dict[str, list[str]] = {"graph-breaks": [], "recompiles": []}
        for manifest_file in sorted((artifacts / SETS_DIR).glob(f"*/{MANIFEST_FILE}")):
            for workload in workloads.of(Manifest.parse(manifest_file.read_bytes())):
                for option, lines in pitfalls.of_workload(workload.graph_breaks, workload.recompiles).items():
                    found[option] = list(dict.fromkeys(found[option] + [f"{workload.name}: {line}" for line in lines]))
        for option, level in (("graph-breaks", self.options.graph_breaks), ("recompiles", self.options.recompiles)):
            if level == "off" or not found[option]:
                continue
            message = (f"the workload shows {len(found[option])} {option.replace('-', ' ')[:-1]}(s) "
                       f"(`{option} = \"{level}\"`):\n" + "\n".join(f"  {line}" for line in found[option]))
            if level == "error":
                self.app.abort(worded(message))
                raise SystemExit(1)  # abort() exits; this only guards an app that returns
            self.reporter.notice(message)

    def _scratch(self) -> Path:
        if self._work_dir is None:
            self._work_dir = Path(tempfile.mkdtemp(prefix="hatch-precompile-"))
            atexit.register(self._cleanup)
        return self._work_dir

    def _cleanup(self) -> None:
        if self._work_dir is not None:
            shutil.rmtree(self._work_dir, ignore_errors=True)
            self._work_dir = None


def _missing_module_hint(module: str, where: Any) -> str:
    if where.target is not None:
        return (
            f"the workload imports {module!r}, which the environment being installed "
            f"into ({where.target.prefix}) does not have yet: installers add a project's dependencies "
            f"only after building its wheel. Install {module!r} there first, then install this project again"
        )
    return (
        f"the workload imports {module!r}, which the build environment ({sys.prefix}) does "
        "not have: set `require-runtime-dependencies = true` in [tool.hatch.build.hooks.precompile], "
        "or install it there"
    )


def _no_gpu_hint(problem: str) -> str:
    return (
        f"the workload needs CUDA, and this build has no usable GPU: {problem}. Build the "
        "wheel on a machine with the GPU the package will run on, or let the workload fall back to the CPU "
        'and set `device = "cpu"` for a wheel with CPU artifacts only (`on-failure = "warn"` builds a plain '
        "wheel here instead of failing)"
    )
