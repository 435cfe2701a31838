"""The caches route at build: what the workloads left in Inductor's cache dir, made whole for a
user's process. Graphs with nothing to compute get an entry (``empty_graphs``), generated modules
ship with a header that imports only what their code calls (``lean_headers``). The kernels
themselves are compiled and observed in the build's child (child/build_child.py,
child/observe.py); the run side's half is run/caches/."""
