"""The stand-ins for what a served torch.compile and a loaded graph would import only to read: the
minifier's backend wrapper (run/torch_internals/served/stand_ins/debug_wrapper.py), made as this torch's constructor
makes it; Inductor's debug module's constants (run/torch_internals/served/stand_ins/graph_stand_in.py), read from its
source as its import sets them; and the extension builder's paths (extension_paths.py), computed as
this torch's module computes them."""

from __future__ import annotations

import importlib
import importlib.util
import logging
import sys
from pathlib import Path

from hatch_precompile.run.torch_internals.served.stand_ins import debug_wrapper, graph_stand_in

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
    from hatch_precompile.run.torch_internals.served.stand_ins import extension_paths

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


def test_cuda_home_is_answered_as_torchs_import_computes_it_without_importing_it(tmp_path, monkeypatch, caplog):
    """Torch 2.14+ reads ``cpp_extension.CUDA_HOME`` while a graph loads: the stand-in computes it as
    torch's ``_find_cuda_home`` does (not its warning: the module is not imported), checked here against
    that very function on a CUDA build (made up), with either variable set, an ``nvcc`` on PATH, and
    neither; the real module answers once imported."""
    import torch

    from hatch_precompile.run.torch_internals.served.stand_ins import extension_paths

    name = "torch.utils.cpp_extension"
    cpp_extension = importlib.import_module(name)
    extension_paths.cuda_home_read_here.cache_clear()
    monkeypatch.delitem(sys.modules, name)  # not imported: the stand-in as a served graph's load makes it
    stand_in = extension_paths._stand_in()
    assert stand_in is not None and stand_in._cuda_home_read, "this torch's CUDA_HOME is not read here: CUDA_HOME_KNOWN"
    monkeypatch.setitem(sys.modules, name, stand_in)  # in its place, as placed() puts it
    assert stand_in.CUDA_HOME == cpp_extension.CUDA_HOME  # this torch, this machine; nothing imported
    assert sys.modules[name] is stand_in
    monkeypatch.setattr(torch.cuda, "_is_compiled", lambda: True)
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    nvcc = tmp_path / "cuda" / "bin" / "nvcc"
    nvcc.parent.mkdir(parents=True)
    nvcc.write_text("#!/bin/sh\n")
    nvcc.chmod(0o755)
    for variables, path in (({"CUDA_HOME": "/made/up/cuda"}, ""), ({"CUDA_PATH": "/other/cuda"}, ""),
                            ({}, str(nvcc.parent)), ({}, str(tmp_path))):
        for variable in ("CUDA_HOME", "CUDA_PATH"):
            monkeypatch.delenv(variable, raising=False)
        for variable, value in variables.items():
            monkeypatch.setenv(variable, value)
        monkeypatch.setenv("PATH", path)
        extension_paths._cuda_home.cache_clear()  # computed once a process, as torch's import does
        with caplog.at_level(logging.WARNING, logger=name):
            assert extension_paths._cuda_home(name) == cpp_extension._find_cuda_home(), variables
        assert not [r for r in caplog.records if "_find_cuda_home" not in r.funcName]  # nothing said but torch's
    monkeypatch.setitem(sys.modules, name, cpp_extension)  # imported: the real module's
    assert stand_in.CUDA_HOME == cpp_extension.CUDA_HOME


def test_extension_paths_from_source_not_read_are_not_stood_in_for(tmp_path, monkeypatch):
    from hatch_precompile.run.torch_internals.served.stand_ins import extension_paths

    (tmp_path / "other_extension.py").write_text(
        "import os\n_HERE = os.path.abspath(__file__)\n_TORCH_PATH = os.path.dirname(_HERE)\n"
        "TORCH_LIB_PATH = os.path.join(_TORCH_PATH, 'lib')\n\ndef include_paths(device_type='cpu'):\n"
        "    return [os.path.join(_TORCH_PATH, 'include')]\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert extension_paths.computed_torch_path("other_extension") is None
    # Its CUDA_HOME as torch's, but found otherwise: the real module answers.
    torchs = Path(importlib.util.find_spec("torch.utils.cpp_extension").origin).read_text()
    (tmp_path / "other_cuda.py").write_text(torchs.replace("cuda_home = '/usr/local/cuda'", "cuda_home = '/opt/cuda'"))
    assert extension_paths.cuda_home_read_here("torch.utils.cpp_extension")
    assert not extension_paths.cuda_home_read_here("other_cuda")
