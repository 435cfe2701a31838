"""Module attributes a user may set before the package's first use, read through the module."""

SHIFT = 0.0
BIAS = True
SCALES: dict = {}  # by model class, filled as each model is made (as transformers' own registries are)
