"""A child Python that runs workloads, seen from both ends; the build, ``verify`` and ``snoop`` share it.

``supervisor`` starts and watches the child (its own process group, one timeout and heartbeat
policy, its output relayed); ``workload_loop`` is the child's side (the workload loop, progress
events, the typed ``protocol.ChildResult`` it writes); ``observe`` measures what each workload
compiled. The jobs
themselves are the build's ``build/build_child.py``, ``verify``'s ``tools/verify_child.py`` and ``snoop``'s
``tools/snoop_child.py``.
"""
