"""Run side: what every user's ``import pkg`` runs, ``load()`` and what it needs.

Standard library only, torch imported lazily, nothing imported from ``builder`` or ``tools``.
"""
