"""The contract between the build, run and tools sides: one module per schema.

- ``names``: directories, files, environment variables, exit codes, safe names and paths;
- ``environment``: the environment key and its comparison;
- ``manifest``: ``manifest.json``, each field read through its check (``fields``);
- ``child``: a child process's ``result.json``;
- ``declaration``: what every wheel declares in its ``.dist-info``;
- ``workloads``: what a build compiled (report-only: the tools import it, ``load()`` never does).

Every side imports these and nothing of the other sides through them. They are on ``load()``'s
path, so they use the standard library only. The names below are re-exported for brevity.
"""

from hatch_precompile.protocol.child import CHILD_FORMAT, CHILD_STATUSES, ChildResult, Failure
from hatch_precompile.protocol.declaration import DECLARATION_FORMAT, Declaration
from hatch_precompile.protocol.environment import ENV_FIELDS, env_id, first_mismatch, set_name
from hatch_precompile.protocol.manifest import FORMAT, SETTINGS, FileEntry, Kernel, Manifest, validate
from hatch_precompile.protocol.names import *  # noqa: F403  (the names are the point of this package)
from hatch_precompile.protocol.names import __all__ as _names

__all__ = [
    "CHILD_FORMAT", "CHILD_STATUSES", "ChildResult", "Failure", "DECLARATION_FORMAT",
    "Declaration", "ENV_FIELDS", "env_id", "first_mismatch", "set_name", "FORMAT", "SETTINGS", "FileEntry", "Kernel",
    "Manifest", "validate", *_names,
]
