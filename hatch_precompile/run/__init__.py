"""Run side: what every user's ``import pkg`` runs, ``load()`` and what it needs.

``load_caches`` is ``load()``: it asks the switch (``switch``, over ``variables``, the one reader
of our variables), has ``sets/`` choose the artifact set this process may use, installs it for
``caches/``, and has ``served/`` serve the package's compiled functions; ``steps/`` answers
``load_step``, ``torchscript`` answers ``load_torchscript``. Every touch of torch's internals is in
``torch_internals/``, grouped by the same routes.

Standard library only, torch imported lazily, nothing imported from ``builder`` or ``tools``.
"""
