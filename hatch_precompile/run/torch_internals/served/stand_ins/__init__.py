"""Torch modules a served start would import only to load a cached graph, answered by stand-ins:
the graph module (``graph_stand_in``), the extension builder's paths (``extension_paths``), the
minifier's backend wrapper (``debug_wrapper``), each on one base (``module_stand_in``): the little
a stand-in answers, the rest from the real module."""
