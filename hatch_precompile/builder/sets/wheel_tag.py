"""The platform tag of a precompiled wheel: the manylinux tag its kernels allow, or this machine's own.

auditwheel's policies (builder/sets/elf.py) say which manylinux tag every set's kernels allow; a build
without the publishing tools (no isolation, for this environment's own install) takes this
platform's tag, which the build backend infers.
"""

from __future__ import annotations

import sys

from hatch_precompile.builder.reporter import Reporter
from hatch_precompile.protocol import Manifest


def platform_tag(manifests: list[Manifest], reporter: Reporter) -> str | None:
    """The wheel's whole tag when every set's kernels allow a manylinux one; None for this
    platform's own tag."""
    from packaging.tags import sys_tags

    from hatch_precompile.builder.sets import elf

    here = next(t for t in sys_tags() if "manylinux" not in t.platform and "musllinux" not in t.platform)
    if sys.platform.startswith("linux") and not elf.has_publishing_tools():
        # A build without isolation, for this environment's own install (pip install
        # --no-build-isolation): its own platform's tag serves it; publishing needs manylinux.
        reporter.info(
            f"platform tag {here.platform}, this machine's own (auditwheel, which finds the manylinux "
            f"tag, is not installed here); for a manylinux tag to publish the wheel, build with hatch-precompile's "
            f"publishing tools: pip install 'hatch-precompile[{elf.PUBLISH_EXTRA}]'")
        return None
    tag, why = elf.wheel_platform([m.platform for m in manifests])
    if tag is None:
        reporter.info(f"platform tag linux: {why}")
        return None
    reporter.info(f"platform tag {tag}, as auditwheel's policy allows for the kernels ({why})")
    return f"{here.interpreter}-{here.abi}-{tag}"
