"""The served route at run: the package's own ``torch.compile`` calls served from the shipped Dynamo
cache entries, untraced (``served_compile``), where the objects its dropped guards held are the
same (``held_objects``) and what its trace read that no guard holds is too (``unguarded_reads``).
Torch's side of it is torch_internals/served/; its build half is builder/served/."""
