"""Which of a package's artifact sets this process may use, shared by every route: the sets read and
distrusted (``artifacts``: every hash), the one decision (``verdict``) over the facts gathered as
data (``environment_key``, ``gpu``, ``machine``), the user's own warmed sets (``usercache``, in
``private_dirs``, with ``memos``), and the fix a refusal gives (``rebuild_command``)."""
