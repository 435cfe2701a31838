"""A child Python that runs workloads, seen from both ends; the build, ``verify`` and ``snoop`` share it.

``supervisor`` starts and watches the child (its own process group, one timeout and heartbeat
policy, its output relayed); ``workload_loop`` is the child's side (the workload loop, progress
events, the typed ``protocol.ChildResult`` it writes); ``observe`` measures what each workload
compiled. The jobs themselves are the children's mains, each started by module name and imported by no
module: the build's ``build_child``, ``verify``'s ``verify_child`` and ``snoop``'s ``snoop_child``.
They sit above the other layers (the build's child runs builder/'s capture and export, verify's child
builder/'s step check), the shared machinery below builder/.
"""
