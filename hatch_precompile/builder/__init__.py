"""Build side: what runs inside a wheel build, backend-neutral (hatch/ adapts it to hatchling).

Here, what every route shares: the options and settings a build is told, which Python runs the
workloads (``target_environment``), the run of the workloads in the build's child
(``workload_run``, child/build_child.py) and what it came to (``capture_outcome``), and the build's
messages. Each route's build half has a folder of its own: ``caches/`` (Inductor's graphs and
kernels), ``served/`` (the Dynamo entries of the package's compiled functions), ``steps/`` (whole
steps, exported or precompiled); ``sets/`` lays every run out as an artifact set, as all routes
ship. ``warm`` and ``bake`` run it as a build does.
"""
