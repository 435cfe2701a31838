"""Build side: what runs inside a wheel build, backend-neutral (hatch/ adapts it to hatchling).

The workloads run in a child process (child/build_child.py, with the child/observe.py measures),
started and watched by ``workload_run``; ``artifact_layout`` lays out what each run left, and
``target`` decides which Python that child is. ``warm`` and ``bake`` run it as a build does.
"""
