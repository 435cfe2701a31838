"""The stand-ins for what a served torch.compile and a loaded graph would import only to read: the
minifier's backend wrapper (run/torch_internals/debug_wrapper.py), made as this torch's constructor
makes it; Inductor's debug module's constants (run/torch_internals/graph_stand_in.py), read from its
source as its import sets them; and the extension builder's paths (extension_paths.py), computed as
this torch's module computes them."""

from __future__ import annotations

import importlib
import sys

from hatch_precompile.run.torch_internals import debug_wrapper, graph_stand_in

MINIFIER, WRAPPER = "torch._dynamo.repro.after_dynamo", "WrapBackendDebug"


def backend(gm, example_inputs, **kwargs):
    return ("compiled", gm, tuple(example_inputs), kwargs)


class Named:
    compiler_name = "named"

    def __call__(self, gm, example_inputs, **kwargs):
        return backend(gm, example_inputs, **kwargs)

    def get_compiler_config(self):
        return {"mode": "named"}


def test_the_stand_in_is_made_as_this_torchs_wrapper_and_calls_it():
    import torch

    attribute = debug_wrapper.constructor_kept_in(MINIFIER, WRAPPER)
    assert attribute, f"torch {torch.__version__}'s {WRAPPER} is not one read here: add it to debug_wrapper.KNOWN"
    torchs = getattr(importlib.import_module(MINIFIER), WRAPPER)
    for fn, name in ((backend, None), (Named(), "named"), (torch._TorchCompileInductorWrapper("default", None, False),
                                                          "inductor")):
        stand_in = debug_wrapper.DebugWrapper(fn, name, kept_in=(MINIFIER, WRAPPER, attribute))
        made = {k: v for k, v in vars(stand_in).items() if k != "_hatch_precompile"}
        assert made == vars(torchs(fn, name)), name
    called = debug_wrapper.DebugWrapper(backend, None, kept_in=(MINIFIER, WRAPPER, attribute))
    assert called("gm", [1, 2], extra=3) == ("compiled", "gm", (1, 2), {"extra": 3})
    assert isinstance(called.torchs(), torchs) and called.torchs() is called.torchs()


def test_another_wrapper_class_is_not_stood_in_for(tmp_path, monkeypatch):
    (tmp_path / "other_minifier.py").write_text(
        "import functools\nclass WrapBackendDebug:\n    def __init__(self, fn, name):\n"
        "        functools.wraps(fn)(self)\n        self._torchdynamo_orig_backend = fn\n"
        "        self._compiler_name = name\n        self.extra = True\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert debug_wrapper.constructor_kept_in("other_minifier", WRAPPER) is None
    assert debug_wrapper.constructor_kept_in("no_such_module_here", WRAPPER) is None


def test_a_modules_constants_are_those_its_import_sets_and_nothing_it_may_change(tmp_path, monkeypatch):
    (tmp_path / "made_up_debug.py").write_text(
        "import os\nFLAG: bool = False\nORDER = None\nCOUNT = 0\nCOUNT += 1\nTWICE = 1\nTWICE = 2\n"
        "RESET = 'a'\nNAME = os.sep\nLATER = None\n\ndef reset():\n    global RESET\n    RESET = 'b'\n\n"
        "def record():\n    global LATER\n    LATER = []\n\nreset()\n"
        "if os.sep:\n    BRANCHED = 1\nSHADOWED = 1\nclass Holder:\n    SHADOWED = 2\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    constants = graph_stand_in.module_constants("made_up_debug")
    assert constants == {"FLAG": False, "ORDER": None, "LATER": None}, constants  # a class body binding a name: not one
    assert "made_up_debug" not in sys.modules


def test_the_debug_stand_in_answers_its_constants_and_imports_the_module_for_anything_else(tmp_path, monkeypatch):
    package = tmp_path / "made_up_inductor"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "debug.py").write_text("RECORD = False\nORDER = None\ndef helper():\n    return 'real'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    parent = importlib.import_module("made_up_inductor")
    monkeypatch.setattr(graph_stand_in, "DEBUG", "made_up_inductor.debug")
    try:
        graph_stand_in._debug_constants()
        stand_in = parent.debug
        assert "made_up_inductor.debug" not in sys.modules and stand_in.RECORD is False and stand_in.ORDER is None
        assert stand_in.helper() == "real" and "made_up_inductor.debug" in sys.modules
        assert parent.debug is sys.modules["made_up_inductor.debug"]  # imported: the real module in its place
        stand_in.RECORD = True  # set on the stand-in someone kept: set on the real module
        assert sys.modules["made_up_inductor.debug"].RECORD is True and stand_in.RECORD is True
        sys.modules["made_up_inductor.debug"].ORDER = []  # changed by the real module's own code: seen by both
        assert stand_in.ORDER == []
    finally:
        for name in ("made_up_inductor.debug", "made_up_inductor"):
            sys.modules.pop(name, None)


def test_the_extension_paths_stand_in_answers_as_this_torchs_module():
    from hatch_precompile.run.torch_internals import extension_paths

    torch_path = extension_paths.computed_torch_path("torch.utils.cpp_extension")
    assert torch_path, "this torch's cpp_extension paths are not read here: add them to extension_paths.KNOWN"
    cpp_extension = importlib.import_module("torch.utils.cpp_extension")
    stand_in = extension_paths._Unimported("torch.utils.cpp_extension", torch_path)
    assert stand_in.include_paths() == cpp_extension.include_paths()
    assert stand_in.include_paths("cpu", torch_include_dirs=False) == cpp_extension.include_paths("cpu", torch_include_dirs=False)
    assert stand_in.TORCH_LIB_PATH == cpp_extension.TORCH_LIB_PATH
    for include in (True, False, None):
        assert stand_in.library_paths("cpu", torch_include_dirs=include) == cpp_extension.library_paths(
            "cpu", torch_include_dirs=include)
    assert stand_in.library_paths() == cpp_extension.library_paths()
    assert stand_in.CUDA_HOME == cpp_extension.CUDA_HOME  # anything else: the real module's
    kept = cpp_extension.CUDA_HOME
    try:
        stand_in.CUDA_HOME = "/made/up/cuda"  # set, as torch 2.14 sets it: on the real module
        assert cpp_extension.CUDA_HOME == "/made/up/cuda" and "CUDA_HOME" not in vars(stand_in)
    finally:
        cpp_extension.CUDA_HOME = kept


def test_extension_paths_from_source_not_read_are_not_stood_in_for(tmp_path, monkeypatch):
    from hatch_precompile.run.torch_internals import extension_paths

    (tmp_path / "other_extension.py").write_text(
        "import os\n_HERE = os.path.abspath(__file__)\n_TORCH_PATH = os.path.dirname(_HERE)\n"
        "TORCH_LIB_PATH = os.path.join(_TORCH_PATH, 'lib')\n\ndef include_paths(device_type='cpu'):\n"
        "    return [os.path.join(_TORCH_PATH, 'include')]\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert extension_paths.computed_torch_path("other_extension") is None
