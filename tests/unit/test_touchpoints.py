"""run/torch_internals/ in this process, on stand-ins for torch's modules: every hook kind, and every
way a touchpoint can fail safe. (The same against a misbehaving torch: test_touchpoints.py.)"""

from __future__ import annotations

import dataclasses
import functools
import os
import sys
import types
from itertools import count

import pytest

from hatch_precompile.builder.sets import isa
from hatch_precompile.child import key_details
from hatch_precompile.run.caches import cache_keys_as_built, tuned_configs
from hatch_precompile.run.torch_internals import patching, registry, settings
from hatch_precompile.run.torch_internals.caches import prefetch

_names = count()


_registered: list[str] = []


def point(module: str, qualname: str, kind: str = "wrap", elsewhere: str | None = None) -> str:
    """A touchpoint of a made-up module, registered for the test: its name."""
    name = f"test-{module}-{qualname}-{kind}"
    registry.REGISTRY[name] = registry.Touchpoint(name, module, qualname, kind, "a test", elsewhere=elsewhere)
    _registered.append(name)
    return name


@pytest.fixture(autouse=True)
def _unregister():
    yield
    while _registered:
        registry.REGISTRY.pop(_registered.pop(), None)


@pytest.fixture
def event_logger(monkeypatch):
    """Dynamo's compile-event logger, made up: the names of the threads that asked for it, in order."""
    import threading

    asked: list[str] = []
    module = types.ModuleType("fake_dynamo_utils")
    module.get_chromium_event_logger = lambda: asked.append(threading.current_thread().name)
    monkeypatch.setitem(sys.modules, module.__name__, module)
    monkeypatch.setitem(registry.REGISTRY, "event-logger",
                        dataclasses.replace(registry.REGISTRY["event-logger"], module=module.__name__))
    return asked


@pytest.fixture
def fake(monkeypatch, event_logger):
    """A module of torch's, made up, registered as imported: (its name, the module). Dynamo's
    event logger is made up too (``event_logger``)."""

    def make(**attributes):
        name = f"fake_torch_module_{next(_names)}"
        module = types.ModuleType(name)
        module.__dict__.update(attributes)
        monkeypatch.setitem(sys.modules, name, module)
        return name, module

    monkeypatch.delenv("HATCH_PRECOMPILE_NO_PATCHES", raising=False)
    monkeypatch.delenv("HATCH_PRECOMPILE_NO_SPEEDUPS", raising=False)
    return make


def test_every_hook_kind_and_any_signature(fake):
    calls = []

    def compile_file(cmd_line, cwd="/tmp", *, verbose=False):
        calls.append((cmd_line, cwd, verbose))
        return len(cmd_line)

    name, module = fake(compile_file=compile_file)
    seen = []
    patching.wrap(point(name, "compile_file"), before=lambda a: {"cmd_line": a["cmd_line"] + " -O2"},
                  after=lambda a, result: seen.append((a["cwd"], result)))
    assert module.compile_file("g++", verbose=True) == len("g++ -O2")
    assert calls == [("g++ -O2", "/tmp", True)] and seen == [("/tmp", 7)]
    patching.wrap(point(name, "compile_file"), instead=lambda a: 0 if a["cmd_line"].startswith("skip") else patching.PASS)
    assert module.compile_file("skip me") == 0 and len(calls) == 1  # answered in torch's place
    assert getattr(module.compile_file, patching.MARK) and module.compile_file.__wrapped__ is compile_file


def test_an_error_hook_answers_for_a_call_that_raised_or_lets_it_raise(fake):
    def convert(frame):
        if frame == "bad":
            raise RuntimeError("torch failed")
        return frame

    name, module = fake(convert=convert)
    seen = []

    def answered(arguments, exc):
        seen.append((arguments["frame"], str(exc)))
        return "eager" if arguments["frame"] == "bad" else patching.PASS

    patching.wrap(point(name, "convert"), on_error=answered)
    assert module.convert("ok") == "ok" and seen == []  # a call that returns never reaches the hook
    assert module.convert("bad") == "eager" and seen == [("bad", "torch failed")]
    patching.wrap(point(name, "convert"), on_error=lambda a, exc: (_ for _ in ()).throw(ValueError("hook bug")))
    assert module.convert("bad") == "eager"  # the first hook answers before the broken one is asked


def test_an_error_hook_that_passes_or_fails_leaves_torchs_exception(fake):
    def convert(frame):
        raise KeyError(frame)

    name, module = fake(convert=convert)
    patching.wrap(point(name, "convert"), on_error=lambda a, exc: 1 / 0)
    with pytest.raises(KeyError):
        module.convert("x")


def test_a_raising_hook_is_as_if_it_had_not_run(fake):
    def boom(*args):
        raise RuntimeError("a hook with a bug")

    name, module = fake(write=lambda content, extension="py": (content, extension))
    patching.wrap(point(name, "write"), before=boom, instead=boom, after=boom)
    assert module.write("x", extension="cpp") == ("x", "cpp")


def test_a_signature_that_cannot_be_read_passes_through_untouched(fake):
    class NoSignature:
        __signature__ = property(lambda self: (_ for _ in ()).throw(ValueError("no")))

        def __call__(self, *args, **kwargs):
            return args, kwargs

    name, module = fake(write=NoSignature())
    arguments = []
    patching.wrap(point(name, "write"), after=lambda a, _: arguments.append(a))
    assert module.write(1, b=2) == ((1,), {"b": 2}) and arguments == [{}]


def test_methods_static_methods_and_missing_attributes(fake):
    class VecISA:
        def check_build(self, code):
            return f"built {code}"

        @staticmethod
        def flags():
            return "-mavx2"

    name, module = fake(VecISA=VecISA)
    patching.wrap(point(name, "VecISA.check_build"), instead=lambda a: True if a["code"] == "vouched" else patching.PASS)
    patching.wrap(point(name, "VecISA.flags"), after=lambda a, r: None)
    assert VecISA().check_build("vouched") is True and VecISA().check_build("x") == "built x"
    assert VecISA.flags() == "-mavx2"
    patching.wrap(point(name, "VecISA.no_such_method"), after=lambda a, r: None)  # another torch: left alone
    patching.wrap(point(name, "NoSuchClass.method"), after=lambda a, r: None)
    settings.set_config(point(name, "cpp.dynamic_threads", "setting"), "cpp.dynamic_threads", True)  # no `cpp` here: nothing set
    prefetch.prefetch(point(name, "torch_key", "prefetch"))
    assert not hasattr(module, "cpp")


def test_wrapped_once_whoever_asks_and_hooks_added_later_are_seen(fake):
    name, module = fake(write=lambda content: content)
    first, second = [], []
    patching.wrap(point(name, "write"), after=lambda a, r: first.append(r))
    wrapper = module.write
    patching.wrap(point(name, "write"), after=lambda a, r: second.append(r))
    assert module.write is wrapper
    module.write("x")
    assert first == second == ["x"]


def test_the_switch_leaves_torch_code_untouched_and_still_applies_settings(fake, monkeypatch):
    name, module = fake(write=lambda content: content, cpp=types.SimpleNamespace(dynamic_threads=False))
    original = module.write
    for variable in ("HATCH_PRECOMPILE_NO_PATCHES", "HATCH_PRECOMPILE_NO_SPEEDUPS"):
        monkeypatch.setenv(variable, "1")
        patching.wrap(point(name, "write"), after=lambda a, r: None)
        settings.set_config(point(name, "cpp.dynamic_threads", "setting"), "cpp.dynamic_threads", True)
        # The setting is torch's own knob, not a patch: without it every shipped graph misses.
        assert module.write is original and module.cpp.dynamic_threads is True
        module.cpp.dynamic_threads = False
        monkeypatch.delenv(variable)


def test_a_module_not_yet_imported_is_patched_right_after_its_import(tmp_path, monkeypatch):
    (tmp_path / "late_torch_module.py").write_text("def write(content):\n    return content\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "late_torch_module", raising=False)
    seen = []
    patching.wrap(point("late_torch_module", "write"), after=lambda a, r: seen.append(r))
    import late_torch_module

    assert late_torch_module.write("x") == "x" and seen == ["x"]


# -- each feature's hook, against torch internals of another shape ----------------------------------


def test_the_compile_command_hook_passes_a_command_it_cannot_read_through(fake):
    seen = []
    name, module = fake(run_compile_cmd=lambda cmd_line, cwd: seen.append(cmd_line))
    flags = isa.CompileFlags(portable=True)
    hook = flags._before_compile
    patching.wrap(point(name, "run_compile_cmd"), before=hook)
    module.run_compile_cmd("g++ -march=native -mavx2 -o o.so", "/tmp")
    assert seen == ["g++  -mavx2 -o o.so"] and flags.target == "portable"
    module.run_compile_cmd(["g++", "-march=native"], "/tmp")  # another shape: run as torch made it
    assert seen[-1] == ["g++", "-march=native"] and flags.target == "native"


def test_the_key_hook_leaves_a_key_it_cannot_read_as_torch_made_it(fake, monkeypatch):
    class FxGraphHashDetails:
        def __init__(self, config):
            self.inductor_config = config

    name, _ = fake(FxGraphHashDetails=FxGraphHashDetails)
    monkeypatch.setattr(cache_keys_as_built, "_built_compiler", {"config": [None, "g++"], "family": "gcc"})
    monkeypatch.setattr(cache_keys_as_built, "stands_in", lambda: True)
    patching.wrap(point(name, "FxGraphHashDetails.__init__"),
                  after=lambda arguments, _: cache_keys_as_built.agree_compiler(arguments["self"].inductor_config))
    assert FxGraphHashDetails("not a dict").inductor_config == "not a dict"
    assert FxGraphHashDetails({"cpp.cxx": (None, "g++-12")}).inductor_config == {"cpp.cxx": (None, "g++")}


def test_the_key_recorder_records_what_it_can_read_and_skips_the_rest(fake, monkeypatch):
    class FxGraphHashDetails:
        def __init__(self, **fields):
            self.__dict__.update(fields)

    class AOTAutogradCacheDetails(FxGraphHashDetails):
        def __init__(self, **fields):
            super().__init__(**fields)

    class Unprintable:
        def __repr__(self):
            raise RuntimeError("misbehaving on purpose")

    def compiled_fx_graph_hash(details):
        return ("fkey", [])

    def autograd_cache_key(details):
        return "not a tuple"  # another shape: the key is left unknown

    codecache, module = fake(FxGraphHashDetails=FxGraphHashDetails, compiled_fx_graph_hash=compiled_fx_graph_hash)
    autograd, _ = fake(autograd_cache_key=autograd_cache_key)
    for name, module_name in (("key-details", codecache), ("fx-key", codecache), ("aot-key", autograd)):
        monkeypatch.setitem(registry.REGISTRY, name,
                            dataclasses.replace(registry.REGISTRY[name], module=module_name))
    recorder = key_details.KeyRecorder()
    module.compiled_fx_graph_hash(FxGraphHashDetails(default_dtype="torch.float32", inductor_config={"a": 1},
                                                     example_inputs=[3]))
    FxGraphHashDetails(broken=Unprintable())
    sys.modules[autograd].autograd_cache_key(AOTAutogradCacheDetails(grad_enabled=True))
    entries = recorder.take()
    assert [(e["cache"], e["key"]) for e in entries] == [("fx", "fkey"), ("aot", None)]
    assert entries[0]["fields"] == {"default_dtype": "'torch.float32'", "inductor_config[a]": "1",
                                    "example_inputs[0]": "3"}
    assert recorder.take() == []


def test_tuned_configs_are_looked_up_in_this_cache_dir_or_left_alone(fake):
    moved = tuned_configs.in_cache_dir("/tmp/hatch-precompile-x/run-native/inductor-cache/ab/cabc123.py", "/home/u/cache")
    assert moved == "/home/u/cache/ab/cabc123.py"
    assert tuned_configs.in_cache_dir(None, "/home/u/cache") is None

    class CachingAutotuner:
        filename = None  # no filename yet: the hook fails, the call goes on

        def recheck_autotune_cache(self, *args):
            return "checked"

    name, _ = fake(CachingAutotuner=CachingAutotuner)
    patching.wrap(point(name, "CachingAutotuner.recheck_autotune_cache"), before=tuned_configs._in_cache_dir)
    assert CachingAutotuner().recheck_autotune_cache() == "checked"


def test_the_keys_are_hashed_from_the_first_compile_not_at_import(fake, monkeypatch):
    """A package that calls torch.compile at import imports Inductor in a process that may never
    compile (a CLI's --help): torch's sources are hashed only once Dynamo compiles a frame."""
    from hatch_precompile.run.caches import warm_shortcuts

    started = []

    def torch_key():
        return b"key"

    torch_key.prefetch = lambda: started.append("torch-key")
    codecache, _ = fake(torch_key=torch_key)
    convert_frame, module = fake(_compile=lambda code, *rest: f"graph of {code}")
    for name, where in (("torch-key", codecache), ("triton-key", codecache), ("dynamo-compile", convert_frame)):
        monkeypatch.setitem(registry.REGISTRY, name,
                            dataclasses.replace(registry.REGISTRY[name], module=where, elsewhere=None))
    monkeypatch.setattr(patching, "_hooks", {})
    monkeypatch.setattr(prefetch, "_first_compile", [])
    warm_shortcuts.install_shortcuts()
    assert started == []  # Inductor imported, nothing compiled: nothing hashed
    assert module._compile("f") == "graph of f" and started == ["torch-key"]
    assert module._compile("g") == "graph of g" and started == ["torch-key"]  # once


def test_the_compilers_version_is_asked_at_the_first_compile_and_a_failing_start_spares_the_rest(fake, monkeypatch):
    """A stand-in compiler's check runs `--version` (a process forked off this one): only a process
    that compiles pays it. A start that raises leaves the next ones and the compile alone."""
    from hatch_precompile.protocol import Manifest
    from hatch_precompile.run.sets import environment_key

    convert_frame, module = fake(_compile=lambda code, *rest: f"graph of {code}")
    monkeypatch.setitem(registry.REGISTRY, "dynamo-compile",
                        dataclasses.replace(registry.REGISTRY["dynamo-compile"], module=convert_frame))
    monkeypatch.setattr(patching, "_hooks", {})
    monkeypatch.setattr(prefetch, "_first_compile", [])
    monkeypatch.setattr(cache_keys_as_built, "_built_compiler", {})
    asked, notes = [], []
    monkeypatch.setattr(environment_key, "cxx_command", lambda: "g++")
    monkeypatch.setattr(environment_key, "compiler", lambda: asked.append("--version") or {
        "command": "g++", "version": "unavailable (exit 1)", "family": "gcc"})
    prefetch.at_first_compile(lambda: 1 / 0)
    manifest = Manifest("p", {}, {}, compiler={"family": "gcc", "command": "g++", "config": "g++"})
    assert cache_keys_as_built.match_build_keys(manifest, notes.append) == [] and asked == []
    assert module._compile("f") == "graph of f"
    assert asked == ["--version"] and notes == [
        "no working C++ compiler here (g++: unavailable (exit 1)): torch needs one, of the gcc family, "
        "even to load the shipped kernels"]
    assert module._compile("g") == "graph of g" and asked == ["--version"]  # once


def test_prefetch_uses_torchs_own_or_a_thread(fake):
    import threading

    prefetched = []

    def torch_key():
        prefetched.append("computed")
        return b"key"

    torch_key.prefetch = lambda: prefetched.append("torch's prefetch")
    name, _ = fake(torch_key=torch_key)
    prefetch.prefetch(point(name, "torch_key", "prefetch"))
    assert prefetched == ["torch's prefetch"]  # 2.13+: torch starts it

    # An older torch: no .prefetch. A thread computes it once, and a caller waits for that result
    # rather than hashing torch's sources a second time; torch's own attributes stay.
    release, calls = threading.Event(), []

    def slow_key():
        calls.append(threading.current_thread().name)
        release.wait(10)
        return b"key"

    slow_key.set = "torch's setter"
    name, module = fake(torch_key=slow_key)
    prefetch.prefetch(point(name, "torch_key", "prefetch"))
    assert module.torch_key is not slow_key and module.torch_key.set == "torch's setter"
    threading.Timer(0.2, release.set).start()
    assert module.torch_key() == b"key" and calls == ["hatch-precompile torch_key"]
    # Where the background computation failed, the caller computes it and sees torch's error.
    def broken():
        calls.append("broken")
        raise RuntimeError("no triton")

    name, module = fake(triton_key=broken)
    prefetch.prefetch(point(name, "triton_key", "prefetch"))
    with pytest.raises(RuntimeError, match="no triton"):
        module.triton_key()
    # Absent where asked (torch before 2.13 has no codecache.triton_key): the other home is used.
    other, home = fake(triton_key=lambda: "triton's key")
    name, _ = fake(other=None)
    prefetch.prefetch(point(name, "triton_key", "prefetch", elsewhere=other))
    assert home.triton_key() == "triton's key" and getattr(home.triton_key, patching.MARK)
    name, _ = fake(other=None)
    prefetch.prefetch(point(name, "triton_key", "prefetch"))  # absent, and nowhere else: nothing


def test_nothing_is_hashed_in_the_background_before_dynamos_event_logger_is_made(fake, event_logger, monkeypatch):
    """Torch makes Dynamo's compile-event logger at its first use, without a lock, and torch_key
    times itself with it: hashed in a thread while Dynamo's first compile began, each made one and
    the compile's open event was lost with the one replaced (torch 2.7.1). It is made in the
    calling thread first; where it cannot be, nothing starts in the background."""
    import threading

    here, found = threading.current_thread().name, []

    def torch_key():
        found.append(list(event_logger))  # what the background thread found made
        return b"key"

    name, module = fake(torch_key=torch_key)
    prefetch.prefetch(point(name, "torch_key", "prefetch"))
    assert module.torch_key() == b"key" and found == [[here]]
    own = types.SimpleNamespace(prefetch=lambda: found.append(list(event_logger)))  # torch's own (2.13+)
    name, _ = fake(torch_key=own)
    prefetch.prefetch(point(name, "torch_key", "prefetch"))
    assert found[-1] == [here, here]

    def unmade():
        raise RuntimeError("misbehaving on purpose")

    monkeypatch.setattr(sys.modules["fake_dynamo_utils"], "get_chromium_event_logger", unmade)
    name, module = fake(torch_key=torch_key)
    prefetch.prefetch(point(name, "torch_key", "prefetch"))
    name, _ = fake(torch_key=own)
    prefetch.prefetch(point(name, "torch_key", "prefetch"))
    assert module.torch_key is torch_key and len(found) == 2  # torch hashes it when it needs it


def test_a_key_hashed_in_the_background_shares_the_event_logger_dynamos_compile_uses(fake, monkeypatch):
    """On the suite's torch: in a process whose Dynamo has made no logger yet, a prefetch makes it
    before its thread starts; the thread's timed event and the compile's open one share it."""
    import threading

    from torch._dynamo import utils

    monkeypatch.setitem(registry.REGISTRY, "event-logger",  # torch's own, not the fixture's
                        dataclasses.replace(registry.REGISTRY["event-logger"], module=registry.DYNAMO_UTILS))
    monkeypatch.setattr(utils, "CHROMIUM_EVENT_LOG", None)
    release, used = threading.Event(), []

    def torch_key():
        release.wait(10)
        with utils.dynamo_timed("inductor_codecache_torch_key"):  # as torch's own times itself
            used.append(utils.get_chromium_event_logger())
        return b"key"

    name, module = fake(torch_key=torch_key)
    prefetch.prefetch(point(name, "torch_key", "prefetch"))
    made = utils.CHROMIUM_EVENT_LOG
    assert made is not None  # before the thread hashed anything
    with utils.dynamo_timed("dynamo"):  # Dynamo's compile, its event open
        release.set()
        assert module.torch_key() == b"key"
        assert utils.get_chromium_event_logger().get_outermost_event() == "dynamo"
    assert used == [made]


# Torch's CacheBase.get_system, in the shapes it has had: Triton's key a global (2.13+) or imported
# in the function (2.7-2.12), and left out of the answer where CUDA shows no GPU (before 2.15).
SYSTEM = '''
import functools, hashlib, json

class CacheBase:
    @staticmethod
    @functools.cache
    def get_system():
        {fetch}
        system = {{"device": {{"name": None}}, "version": {{"triton": triton_version}}}}
        if not GPU:
            system = {{}}
        system["hash"] = hashlib.sha256(json.dumps(system, sort_keys=True).encode()).hexdigest()
        return system
'''


def system_module(fake, monkeypatch, fetch="triton_version = triton_key()", gpu=False):
    """A codecache with ``CacheBase.get_system``; the real Triton key's calls are counted."""
    calls = []

    def triton_key():
        calls.append("hashed")
        return "triton's real key"

    compat_name, _ = fake(triton_key=triton_key, HAS_TRITON=True)
    name, module = fake(triton_key=triton_key, GPU=gpu)
    exec(SYSTEM.format(fetch=fetch.replace("COMPAT", compat_name)), module.__dict__)
    return name, module, calls


IMPORTED = "from COMPAT import HAS_TRITON, triton_key\n        triton_version = triton_key() if HAS_TRITON else None"


@pytest.mark.parametrize("fetch", ["triton_version = triton_key()", IMPORTED])
def test_a_system_answer_that_leaves_tritons_key_out_never_computes_it(fake, monkeypatch, fetch):
    name, module, calls = system_module(fake, monkeypatch, fetch)
    expected = module.CacheBase.get_system.__wrapped__()  # torch's answer, computed as torch does
    calls.clear()
    otherwise = []
    prefetch.answer_without(point(name, "CacheBase.get_system", "answer"), "triton_key", otherwise=lambda: otherwise.append(1))
    assert module.CacheBase.get_system() == expected and module.CacheBase().get_system() == expected
    assert module.CacheBase.get_system() is module.CacheBase.get_system()  # one answer, as a cache gives
    assert calls == [] and otherwise == []


@pytest.mark.parametrize("fetch", ["triton_version = triton_key()", IMPORTED])
def test_a_system_answer_that_uses_tritons_key_is_left_to_torch(fake, monkeypatch, fetch):
    name, module, calls = system_module(fake, monkeypatch, fetch, gpu=True)
    original, otherwise = module.CacheBase.get_system, []
    prefetch.answer_without(point(name, "CacheBase.get_system", "answer"), "triton_key", otherwise=lambda: otherwise.append(1))
    assert module.CacheBase.get_system is original and otherwise == [1]
    assert module.CacheBase.get_system()["version"]["triton"] == "triton's real key" and calls == ["hashed"]


def test_a_system_answer_not_as_expected_is_left_to_torch(fake, monkeypatch):
    def uncached(module):
        module.CacheBase.get_system = staticmethod(module.CacheBase.get_system.__wrapped__)

    def with_arguments(module):
        module.CacheBase.get_system = staticmethod(functools.cache(lambda device=None: {"hash": "x"}))

    def answered(module):
        prefetch.answer_without(point(module.__name__, "CacheBase.get_system", "answer"), "triton_key", otherwise=lambda: None)

    def gone(module):
        del module.CacheBase

    cases = [("a stand-in raises", "triton_version = triton_key().upper()", None), ("not cached", None, uncached),
             ("takes arguments", None, with_arguments), ("answered already", None, answered), ("absent", None, gone)]
    for case, fetch, change in cases:
        name, module, calls = system_module(fake, monkeypatch, fetch or "triton_version = triton_key()")
        if change:
            change(module)
        before, otherwise = getattr(module, "CacheBase", None), []
        before = before and before.get_system
        prefetch.answer_without(point(name, "CacheBase.get_system", "answer"), "triton_key", otherwise=lambda: otherwise.append(1))
        assert getattr(getattr(module, "CacheBase", None), "get_system", None) is before, case
        assert otherwise == [1] and calls == [], case  # torch computes it, when it is asked


def test_the_switch_leaves_the_system_answer_to_torch(fake, monkeypatch):
    name, module, calls = system_module(fake, monkeypatch)
    monkeypatch.setenv("HATCH_PRECOMPILE_NO_PATCHES", "1")
    original, otherwise = module.CacheBase.get_system, []
    prefetch.answer_without(point(name, "CacheBase.get_system", "answer"), "triton_key", otherwise=lambda: otherwise.append(1))
    assert module.CacheBase.get_system is original and otherwise == []  # prefetching is a patch too


class ListMemo:
    def __init__(self, value=None, broken=False):
        self.value, self.broken, self.put_values = value, broken, []

    def get(self):
        if self.broken:
            raise OSError("unreadable")
        return self.value

    def put(self, value):
        self.put_values.append(value)


def prefetchable(calls):
    """Torch 2.13+'s prefetchable cache, in small: ``.set`` fills it, a call computes it once."""
    state = {}

    def key():
        if "value" not in state:
            calls.append("hashed")
            state["value"] = "computed key"
        return state["value"]

    def set_value(value):
        if "value" in state:
            raise RuntimeError("prefetchable_cache value already set")
        state["value"] = value

    key.set, key.prefetch = set_value, lambda: calls.append("torch's prefetch")
    return key


def test_prefetch_with_a_memo_sets_torchs_cache_or_remembers_what_torch_computed(fake):
    calls = []
    name, module = fake(triton_key=prefetchable(calls))
    prefetch.prefetch(point(name, "triton_key", "prefetch"), memo=ListMemo("remembered key"))
    assert module.triton_key() == "remembered key" and calls == []  # set through torch's own .set

    for memo in (ListMemo(), ListMemo(broken=True)):  # nothing remembered, or the memo unreadable
        calls = []
        name, module = fake(triton_key=prefetchable(calls))
        prefetch.prefetch(point(name, "triton_key", "prefetch"), memo=memo)
        assert module.triton_key() == "computed key" and module.triton_key() == "computed key"
        assert calls == ["hashed"] and memo.put_values == ["computed key"]  # remembered before the caller goes on

    # A torch whose cache takes no value (before 2.13): the memo is not used, torch prefetches.
    calls = []

    def older():
        calls.append("hashed")
        return "computed key"

    older.prefetch = lambda: calls.append("torch's prefetch")
    name, module = fake(triton_key=older)
    memo = ListMemo("remembered key")
    prefetch.prefetch(point(name, "triton_key", "prefetch"), memo=memo)
    assert calls == ["torch's prefetch"] and module.triton_key() == "computed key" and memo.put_values == []


def test_tritons_key_is_remembered_until_any_file_of_triton_changes(tmp_path, monkeypatch):
    from hatch_precompile.run.caches import warm_shortcuts

    package = tmp_path / "site" / "triton"
    (package / "_C").mkdir(parents=True)
    (package / "__init__.py").write_text("__version__ = '3.9.0'\n")
    (package / "_C" / "libtriton.so").write_bytes(b"\0" * 1000)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.delitem(sys.modules, "triton", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))

    first = warm_shortcuts.TritonKeyMemo()
    assert first.get() is None
    first.put("3.9.0-abc")
    (package / "__pycache__").mkdir()  # what importing it writes: never hashed by Triton's key
    (package / "__pycache__" / "__init__.cpython-311.pyc").write_bytes(b"pyc")
    assert warm_shortcuts.TritonKeyMemo().get() == "3.9.0-abc"
    assert warm_shortcuts.TritonKeyMemo().get() == "3.9.0-abc"

    library = package / "_C" / "libtriton.so"
    stat = library.stat()
    library.write_bytes(b"\1" * 1000)  # same size, and the old mtime put back: the ctime still moves
    os.utime(library, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    changed = warm_shortcuts.TritonKeyMemo()
    assert changed.get() is None
    # Changed while torch hashed it: what was computed is not remembered under either state.
    (package / "language.py").write_text("# new\n")
    changed.put("3.9.0-stale")
    assert warm_shortcuts.TritonKeyMemo().get() is None
    (memo,) = (tmp_path / "cache" / "hatch-precompile" / ".triton-keys").iterdir()
    assert memo.read_text() == f"{memo.name}\n3.9.0-abc\n"
    # A memo that is empty, names another key or holds an empty value is not used: torch hashes
    # Triton as usual, and an empty key is never written.
    (package / "language.py").unlink()  # another state of Triton: nothing remembered for it yet
    fresh = warm_shortcuts.TritonKeyMemo()
    assert fresh.get() is None
    planted = memo.parent / str(fresh._fingerprint())
    for text in ("", f"{planted.name}\n\n", f"{memo.name}\n3.9.0-abc\n", "3.9.0-abc"):
        planted.write_text(text)
        assert warm_shortcuts.TritonKeyMemo().get() is None, text
    fresh.put("")
    assert planted.read_text() == "3.9.0-abc"
    fresh.put("3.9.0-def")
    assert warm_shortcuts.TritonKeyMemo().get() == "3.9.0-def"


def test_the_registry_the_breakers_and_the_docs_name_the_same_touchpoints():
    """Every touchpoint is registered, has a breaker that makes it misbehave (tests/misbehave), and a
    row in docs/reference/touchpoints.md, generated from the registry."""
    import importlib.util
    from pathlib import Path

    here = Path(__file__).resolve().parents[1]
    spec = importlib.util.spec_from_file_location("misbehave_breakers", here / "misbehave" / "sitecustomize.py")
    breakers = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(breakers)  # MISBEHAVE is unset here: it breaks nothing
    assert set(registry.REGISTRY) == set(breakers.BREAKERS)
    docs = (here.parent / "docs" / "reference" / "touchpoints.md").read_text()
    assert registry.documentation() in docs, "regenerate: python -c \"from hatch_precompile.run.torch_internals " \
        "import registry; print(registry.documentation())\""


def test_an_unregistered_touchpoint_is_a_bug_not_a_silent_no_op():
    with pytest.raises(KeyError):
        patching.wrap("no-such-touchpoint", after=lambda a, r: None)
    with pytest.raises(ValueError, match="touchpoint 'torch-key' is a prefetch, not a wrap"):
        patching.wrap("torch-key", after=lambda a, r: None)


def closing_torchs_compile_event(how: str) -> None:
    """What a hook on a compile path must never do to Dynamo's bookkeeping, done for real."""
    from torch._dynamo import utils

    if how == "replaces the logger":  # as torch 2.7.1's unlocked getter did, raced by a prefetch thread
        utils.CHROMIUM_EVENT_LOG = utils.ChromiumEventLogger()
    elif how == "closes the events":
        utils.get_chromium_event_logger().reset()
    else:  # leaves the compile's metrics context
        utils.get_metrics_context().__exit__(None, None, None)


@pytest.mark.parametrize("how", ["replaces the logger", "closes the events", "leaves the metrics context"])
def test_a_hook_that_changes_torchs_compile_bookkeeping_is_undone_and_never_called_again(fake, caplog, how):
    """On the suite's torch, in Dynamo's compile of a frame: its backend's before hook closes the
    compile's top-level event (or the like). Put back, the compile goes on (else its guards raise
    'No toplevel event active'); the hook is dropped, even where it is hooked again, and logged."""
    import torch
    from torch._dynamo import utils

    calls, seen = [], []

    def misbehaving(arguments):
        calls.append(how)
        closing_torchs_compile_event(how)

    def backend(gm, example_inputs):  # what torch's own code finds after the hooks
        seen.append((utils.get_chromium_event_logger().get_outermost_event(), utils.get_metrics_context().in_progress()))
        return gm.forward

    name, module = fake(backend=backend)
    x = torch.linspace(0, 1, 5)
    try:
        with caplog.at_level("DEBUG", logger="hatch_precompile"):
            patching.wrap(point(name, "backend"), before=misbehaving)
            first = torch.compile(lambda x: x.sin() + 1, backend=module.backend)(x)
            patching.wrap(point(name, "backend"), before=misbehaving)
            second = torch.compile(lambda x: x.cos() * 2, backend=module.backend)(x)
    finally:
        torch._dynamo.reset()
    assert torch.equal(first, x.sin() + 1) and torch.equal(second, x.cos() * 2)
    assert seen == [("dynamo", True)] * 2 and calls == [how]
    assert any("a before hook changed torch's compile bookkeeping" in r.getMessage() for r in caplog.records)


def test_a_first_compile_start_that_changes_torchs_bookkeeping_is_undone(fake, monkeypatch, caplog):
    from torch._dynamo import utils

    convert_frame, module = fake(_compile=lambda code: utils.get_chromium_event_logger().get_outermost_event())
    monkeypatch.setitem(registry.REGISTRY, "dynamo-compile",
                        dataclasses.replace(registry.REGISTRY["dynamo-compile"], module=convert_frame))
    monkeypatch.setattr(patching, "_hooks", {})
    monkeypatch.setattr(prefetch, "_first_compile", [])
    started = []
    prefetch.at_first_compile(lambda: closing_torchs_compile_event("replaces the logger"))
    prefetch.at_first_compile(lambda: started.append("the next start"))
    with caplog.at_level("DEBUG", logger="hatch_precompile"), utils.dynamo_timed("dynamo"):
        assert module._compile("f") == "dynamo"  # the open event, in the logger that holds it
    assert started == ["the next start"]
    assert any("a first-compile start changed torch's compile bookkeeping (Dynamo's event logger replaced)"
               in r.getMessage() for r in caplog.records)


def test_hooks_run_unchecked_where_torchs_bookkeeping_cannot_be_read(fake, monkeypatch):
    from torch._dynamo import utils

    def unreadable():
        raise RuntimeError("misbehaving on purpose")

    monkeypatch.setattr(utils, "get_metrics_context", unreadable)
    name, module = fake(write=lambda content: content)
    seen = []
    patching.wrap(point(name, "write"), after=lambda a, r: seen.append(r))
    assert module.write("x") == "x" and module.write("y") == "y" and seen == ["x", "y"]


def test_a_failing_hook_is_logged_with_its_touchpoint(fake, caplog):
    name, module = fake(write=lambda content: content)

    def broken(arguments, result):
        raise RuntimeError("a hook with a bug")

    with caplog.at_level("DEBUG", logger="hatch_precompile"):
        patching.wrap(point(name, "write"), after=broken)
        assert module.write("x") == "x"
    assert any("an after hook failed" in r.getMessage() and r.exc_info for r in caplog.records)


def test_tritons_c_helpers_are_kept_at_build_and_served_from_the_set_without_a_compiler(fake, monkeypatch, tmp_path):
    """run/caches/triton_modules.py on a stand-in for Triton's CUDA driver whose builder "builds" a real
    extension module (the standard library's _bisect): the build keeps it; a user's process gets
    the shipped one for the same name and source, and Triton builds only what differs."""
    import _bisect

    from hatch_precompile.protocol import sha256
    from hatch_precompile.run.caches import triton_modules

    built = []

    def compile_module_from_src(src, name, library_dirs=None, include_dirs=None, libraries=None):
        built.append(name)
        return _bisect if name == "_bisect" else types.ModuleType(name)

    def compile_module_from_file(src_path, name, library_dirs=None, include_dirs=None, libraries=None):
        built.append(name)
        return _bisect

    driver, _ = fake(compile_module_from_src=compile_module_from_src, compile_module_from_file=compile_module_from_file)
    for name in ("triton-c-module", "triton-c-module-file"):
        monkeypatch.setitem(registry.REGISTRY, name, dataclasses.replace(registry.REGISTRY[name], module=driver))
    out = tmp_path / "c_modules"
    triton_modules.record(out)
    sys.modules[driver].compile_module_from_src("int x;", "_bisect")
    (kept,) = out.iterdir()
    assert f"c_modules/{kept.name}" == triton_modules.logical_path("_bisect", "int x;")

    # A user's process, from a set that ships it (read back checked, as ArtifactSet.read does).
    user_driver, _ = fake(compile_module_from_src=compile_module_from_src, compile_module_from_file=compile_module_from_file)
    for name in ("triton-c-module", "triton-c-module-file"):
        monkeypatch.setitem(registry.REGISTRY, name, dataclasses.replace(registry.REGISTRY[name], module=user_driver))
    data = kept.read_bytes()
    files = {triton_modules.logical_path("_bisect", "int x;"): sha256(data)}
    found = types.SimpleNamespace(manifest=types.SimpleNamespace(files=files), read=lambda path: data)
    triton_modules.serve(found)
    built.clear()
    module = sys.modules[user_driver].compile_module_from_src("int x;", "_bisect")
    assert built == [] and module.bisect_left([1, 3, 5], 4) == 2 and module.__file__ != _bisect.__file__
    source = tmp_path / "driver.c"  # Triton 3.8 names the source by its file
    source.write_text("int x;")
    assert sys.modules[user_driver].compile_module_from_file(str(source), "_bisect").bisect_left([1], 2) == 1
    assert built == []
    sys.modules[user_driver].compile_module_from_src("int y;", "_bisect")  # another source: Triton builds it
    assert built == ["_bisect"]
