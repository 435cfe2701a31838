"""Tools side: the ``hatch-precompile`` command line, a thin layer over the build and run sides."""
