"""Module attributes a user may set before the package's first use, read through the module."""

SHIFT = 0.0
BIAS = True
