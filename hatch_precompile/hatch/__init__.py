"""Hatch side: the hatchling build hook, the only code that knows hatchling (as scikit-build-core's ``hatch/``).

``hooks`` registers the hook; ``plugin`` maps hatch's table, app and build data to the
backend-neutral build side (``builder/``), which ``warm`` and ``bake`` run without hatchling.
"""
