"""Test helper: makes the torch internals hatch-precompile touches misbehave.

Any Python started with this dir on PYTHONPATH and ``MISBEHAVE=name,...`` gets, right after the
torch module in question is imported, each named touchpoint replaced by something with another
signature, another shape, or that raises (see tests/integration/test_touchpoints.py). The names are those of
hatch_precompile.run.torch_internals.registry.REGISTRY, one breaker each (``BREAKERS``). Torch's own bound
references are left alone, so torch works; only what hatch-precompile reads or wraps breaks.
"""

import collections
import importlib.abc
import importlib.util
import os
import sys

BROKEN = set(filter(None, os.environ.get("MISBEHAVE", "").split(",")))


def _raise(*args, **kwargs):
    raise RuntimeError("misbehaving on purpose")


class _Unreadable(collections.defaultdict):
    """A defaultdict to torch, but listing what it holds fails."""

    def items(self):
        raise RuntimeError("misbehaving on purpose")


class _NoSignature:
    """Calls through to ``function``, but inspect.signature() cannot read it."""

    def __init__(self, function):
        self.function = function

    @property
    def __signature__(self):
        raise ValueError("misbehaving on purpose")

    def __call__(self, *args, **kwargs):
        return self.function(*args, **kwargs)


def _codecache(module):
    _codecache_hash_details(module)
    if "write" in BROKEN:
        module.write = _NoSignature(module.write)
    if "precompile-header" in BROKEN and hasattr(module, "_precompile_header"):
        original = module._precompile_header

        def _precompile_header(header, hashable_cmd_line, *rest, new_option=None, **kwargs):
            return original(header, hashable_cmd_line, *rest, **kwargs)

        module._precompile_header = _precompile_header
    if "post-compile-graph" in BROKEN:  # a cache hit that reads more of GraphLowering than its test hook
        original_hit = module.FxGraphCache.cache_hit_post_compile

        def cache_hit_post_compile(graph, *args, **kwargs):
            from torch._inductor.graph import GraphLowering

            GraphLowering.can_inline_constant  # noqa: B018  (an attribute the stand-in does not answer itself)
            import torch

            torch._inductor.debug.DebugContext  # noqa: B018  (not one of the debug module's constants)
            return original_hit(graph, *args, **kwargs)

        module.FxGraphCache.cache_hit_post_compile = staticmethod(cache_hit_post_compile)
    if "decomp-table" in BROKEN:  # a cache hit that calls the compile-only function its graph was compiled with
        original_post = module.FxGraphCache.cache_hit_post_compile

        def post_compile_calling_decompositions(graph, *args, **kwargs):
            table = graph.fx_kwargs["get_decomp_fn"]()
            assert isinstance(table, dict) and table, table
            return original_post(graph, *args, **kwargs)

        module.FxGraphCache.cache_hit_post_compile = staticmethod(post_compile_calling_decompositions)
    if "torch-key" in BROKEN:
        module.torch_key.prefetch = _raise
    if "triton-key" in BROKEN and hasattr(module, "triton_key"):
        module.triton_key.prefetch = _raise
        module.triton_key.set = _raise
    if "system" in BROKEN:  # no longer functools' cache: answered by torch every time
        cached = module.CacheBase.get_system

        def get_system():
            return cached()

        module.CacheBase.get_system = staticmethod(get_system)


def _vec_isa(module):
    if "check-build" in BROKEN:
        check_build = module.VecISA.check_build

        def check_build_other_signature(self, code, *rest, probe_child=True, **kwargs):
            return check_build(self, code, *rest, **kwargs)

        module.VecISA.check_build = check_build_other_signature


def _convert_frame(module):
    if "dynamo-compile" in BROKEN:
        original = module._compile

        def _compile(*args, hook_free=True, **kwargs):  # another signature than observe reads
            return original(*args, **kwargs)

        module._compile = _compile
    if "cache-size" in BROKEN:  # another signature than the hook reads: torch's own calls still work
        module.compute_cache_size = _NoSignature(module.compute_cache_size)
    if "frame-error" in BROKEN:  # another signature than the hook reads: torch's own calls still work
        call = module.ConvertFrame.__call__

        def __call__(self, *args, misbehaving=True, **kwargs):
            return call(self, *args, **kwargs)

        module.ConvertFrame.__call__ = __call__


def _from_hatch_precompile() -> bool:
    return sys._getframe(2).f_globals.get("__name__", "").startswith("hatch_precompile")


def _renamed(original):
    """``original`` as if torch had renamed it: its own callers work, hatch-precompile's fail."""
    def call(*args, **kwargs):
        if _from_hatch_precompile():
            _raise()
        return original(*args, **kwargs)

    return call


def _cpp_builder(module):
    if "cpp-compiler" in BROKEN:
        module.get_cpp_compiler = _renamed(module.get_cpp_compiler)
    # Torch's own function, also where hatch-precompile wrapped it first (a lazily imported module):
    # then the breaker takes the wrapper's place, and torch asks --version as it would without us.
    if "compiler-search" in BROKEN and hasattr(module, "cpp_compiler_search"):
        search = getattr(module.cpp_compiler_search, "__wrapped__", module.cpp_compiler_search)

        def cpp_compiler_search(candidates):  # another signature than run/caches/warm_shortcuts.py reads
            return search(candidates)

        module.cpp_compiler_search = cpp_compiler_search
    if "intel-compiler" in BROKEN and hasattr(module, "_is_intel_compiler"):
        is_intel = getattr(module._is_intel_compiler, "__wrapped__", module._is_intel_compiler)

        def _is_intel_compiler(compiler):  # another signature than run/caches/warm_shortcuts.py reads
            return is_intel(compiler)

        module._is_intel_compiler = _is_intel_compiler
    if "compile-command" in BROKEN:
        original = module.run_compile_cmd

        def run_compile_cmd(cmd, cwd):  # the command under another name
            return original(cmd, cwd)

        module.run_compile_cmd = run_compile_cmd


def _codecache_hash_details(module):
    if "fx-key" in BROKEN:
        module.compiled_fx_graph_hash = _NoSignature(module.compiled_fx_graph_hash)
    if "hash-details" in BROKEN or "key-details" in BROKEN:
        details = module.FxGraphHashDetails
        original = details.__init__

        def __init__(self, *args, salt=None, **kwargs):  # another signature than run/caches/cache_keys_as_built.py reads
            original(self, *args, **kwargs)

        details.__init__ = __init__


def _triton_heuristics(module):
    if "autotune-recheck" in BROKEN and hasattr(module, "CachingAutotuner"):
        module.CachingAutotuner.recheck_autotune_cache = _raise


def _dynamo_utils(module):
    if "metrics" in BROKEN:
        module.get_compilation_metrics = _raise
        module.clear_compilation_metrics = _raise
        module.set_compilation_metrics_limit = _raise
    if "counters" in BROKEN:
        module.counters = _Unreadable(collections.Counter)
    if "guard-failures" in BROKEN:
        module.guard_failures = _Unreadable(list)
    if "compile-times" in BROKEN:
        module.compile_times = _raise
    if "event-logger" in BROKEN:
        module.get_chromium_event_logger = _renamed(module.get_chromium_event_logger)
    if "compile-state" in BROKEN:
        module.get_metrics_context = _renamed(module.get_metrics_context)
    if "count-calls" in BROKEN:
        module.count_calls = _NoSignature(module.count_calls)


def _autograd_cache(module):
    if "graph-cache-log" in BROKEN:  # torch logs under another name
        import logging

        module.log = logging.getLogger("torch._functorch._aot_autograd.autograd_cache.elsewhere")
    if "aot-key" in BROKEN:
        module.autograd_cache_key = _NoSignature(module.autograd_cache_key)
    if "cache-entries" in BROKEN:  # another shape torch's own callers take (a Path, not a str)
        import pathlib

        original = module.AOTAutogradCache._get_tmp_dir
        module.AOTAutogradCache._get_tmp_dir = staticmethod(lambda: pathlib.Path(original()))


def _symbolic_shapes(module):
    for name, method in (("guard-eval", "evaluate_guards_expression"), ("guard-expr", "produce_guards_expression")):
        if name in BROKEN:  # another signature than child/unused_entries.py reads; torch's calls still work
            original = getattr(module.ShapeEnv, method)

            def other_signature(self, *args, _original=original, **kwargs):
                return _original(self, *args, **kwargs)

            setattr(module.ShapeEnv, method, other_signature)


def _compile_fx(module):
    if "inductor-compile" in BROKEN:
        module._compile_fx_inner = _NoSignature(module._compile_fx_inner)


def _torch_logging(module):
    if "logs" in BROKEN:
        module.set_logs = _raise


def _compiler(module):
    if "megacache" in BROKEN:
        module.save_cache_artifacts = _raise


def _config_module(module):
    # A torch whose settings do not take what is set through their section (`config.cpp.X = ...`):
    # the set's cpp.dynamic_threads, or any setting verify's --setting names. Torch's own settings
    # (config.patch, environment variables) work as always.
    if "inductor-config" in BROKEN or "verify-setting" in BROKEN:
        proxy = module.SubConfigProxy
        original = proxy.__setattr__

        def __setattr__(self, name, value):
            if "verify-setting" in BROKEN or name == "dynamic_threads":
                raise RuntimeError("misbehaving on purpose")
            return original(self, name, value)

        proxy.__setattr__ = __setattr__


def _cache_dir_utils(module):
    if "cache-dir" in BROKEN:  # another shape torch's own callers take (a Path, not a str)
        import pathlib

        original = module.cache_dir
        module.cache_dir = lambda: pathlib.Path(original())


def _inductor(module):
    if "aoti-compile" in BROKEN:
        module.aoti_compile_and_package = _raise
    if "keep-constants" in BROKEN:  # a torch whose Inductor has no such setting
        import importlib

        importlib.import_module("torch._inductor.config")._config.pop("always_keep_tensor_constants", None)


def _export_experimental(module):
    if "joint-export" in BROKEN:
        module._export_forward_backward = _raise


def _pytree(module):
    if "pytree" in BROKEN:
        module.treespec_loads = _raise


class _UnreadableHooks(dict):
    """A module's hooks dict that torch can fill, test and pickle, but whose entries cannot be listed."""

    def items(self):
        raise RuntimeError("misbehaving on purpose")

    def __reduce_ex__(self, protocol):
        return type(self), (), None, None, iter(dict.items(self))


def _nn_module(module):
    if "module-internals" in BROKEN:
        original = module.Module.__init__

        def __init__(self, *args, **kwargs):
            original(self, *args, **kwargs)
            object.__setattr__(self, "_forward_hooks", _UnreadableHooks())

        module.Module.__init__ = __init__


def _torch(module):
    if "aoti-loader" in BROKEN and hasattr(module._C, "_aoti"):
        class Refusing(module._C._aoti.AOTIModelPackageLoader):  # its methods, and no package it takes
            def __init__(self, *args, **kwargs):
                _raise()

        module._C._aoti.AOTIModelPackageLoader = Refusing
    if "aoti-loader-crash" in BROKEN and hasattr(module._C, "_aoti"):
        class Crashing(module._C._aoti.AOTIModelPackageLoader):  # as on an H200 with torch 2.11: a real SIGSEGV
            def __init__(self, *args, **kwargs):
                import ctypes

                ctypes.string_at(0)  # reads address 0: the process dies as torch's loader does there

        module._C._aoti.AOTIModelPackageLoader = Crashing
    if "precompile-logger" in BROKEN:
        import logging

        logging.getLogger("torch._precompile").addFilter = _raise
    if "compile-calls" in BROKEN:  # torch.compile as an object whose signature cannot be read
        module.compile = _NoSignature(module.compile)
    if "compiler-config" in BROKEN and hasattr(module, "_TorchCompileInductorWrapper"):  # gone from the backend
        del module._TorchCompileInductorWrapper.get_compiler_config
    if "global-state" in BROKEN:  # a global-state guard whose state is no longer JSON
        guards = module._C._dynamo.guards

        class GlobalStateGuard(guards.GlobalStateGuard):
            def __getstate__(self):
                return "not json"

        guards.GlobalStateGuard = GlobalStateGuard
    if "folded-calls" in BROKEN:  # as if renamed: torch's own folds still call them
        for owner, name in ((module.distributed, "is_initialized"), (module.distributed, "get_world_size"),
                            (module.distributed, "is_available"), (module.cuda, "is_available")):
            if hasattr(owner, name):
                setattr(owner, name, _renamed(getattr(owner, name)))
    if "precompile-entry" in BROKEN:  # a torch without precompile entries on code objects
        frame = module._C._dynamo.eval_frame
        for name in ("_load_precompile_entry", "_reset_precompile_entries"):
            if hasattr(frame, name):
                delattr(frame, name)


def _dynamo_package(module):
    if "compile-package" in BROKEN:
        module.CompilePackage.install = _raise
    if "guard-load" in BROKEN:  # torch's install calls its own function, not the one of that name now
        load_guard_manager, install = module.load_guard_manager, module.CompilePackage.install

        def install_by_another_name(self, backends):
            replaced, module.load_guard_manager = module.load_guard_manager, load_guard_manager
            try:
                return install(self, backends)
            finally:
                module.load_guard_manager = replaced

        module.CompilePackage.install = install_by_another_name
    if "guarded-code" in BROKEN:
        module.CompilePackage.add_guarded_code = _NoSignature(module.CompilePackage.add_guarded_code)
    if "code-source" in BROKEN:
        module._get_code_source = _NoSignature(module._get_code_source)


def _positional_only(owner, name):
    """Replace the method ``name`` of ``owner`` by one that takes its arguments as ``*args``: a hook
    that reads them by name finds none, and torch's own call still works."""
    method = getattr(owner, name)

    def by_another_signature(self, *args, **kwargs):
        return method(self, *args, **kwargs)

    setattr(owner, name, by_another_signature)


def _precompile_context(module):
    if "dynamo-entries" in BROKEN:  # a plain function now, of another signature than the hook reads
        record = module.PrecompileContext.record_dynamo_cache_entry
        module.PrecompileContext.record_dynamo_cache_entry = staticmethod(
            lambda *args, **kwargs: record(*args, **kwargs))


def _guards_module(module):
    if "guard-create-log" in BROKEN:  # torch logs under another name
        import logging

        module.log = logging.getLogger("torch._guards.elsewhere")
    if "guard-sites" in BROKEN:  # a guard made at two places kept once, where it was made first
        add = module.GuardsSet.add

        def add_once(self, guard, *args, **kwargs):
            if any(g.name == guard.name and g.create_fn == guard.create_fn for g in self.inner):
                return None
            return add(self, guard, *args, **kwargs)

        module.GuardsSet.add = add_once


def _aot_autograd_result(module):
    if "graph-load" in BROKEN:  # a compiled graph that does not load in this process
        module.BundledAOTAutogradCacheArtifact.after_deserialization = _raise


def _output_graph(module):
    if "module-global" in BROKEN:
        _positional_only(module.OutputGraph, "install_global_by_id")
    if "bypass-log" in BROKEN:  # torch logs under another name
        import logging

        module.log = logging.getLogger("torch._dynamo.output_graph.elsewhere")


def _dynamo_guards(module):
    if "guard-text" in BROKEN:  # torch prints its guards; hatch-precompile's reading fails
        module.GuardManagerWrapper.__str__ = _renamed(module.GuardManagerWrapper.__str__)
    if "guard-pickler" in BROKEN:
        _positional_only(module.GuardsStatePickler, "reducer_override")
    if "local-type-guard" in BROKEN and hasattr(module, "raise_local_type_error"):
        module.raise_local_type_error = _NoSignature(module.raise_local_type_error)
    if "guard-filter" in BROKEN or "package-bypass" in BROKEN:
        init = module.CheckFunctionManager.__init__

        def __init__(self, *args, **kwargs):  # another signature than the hook reads
            init(self, *args, **kwargs)

        module.CheckFunctionManager.__init__ = __init__
    if "guard-state-tensor" in BROKEN:  # a plain function now: torch's own unpickling still works
        unpickle = module.GuardsStatePickler.__dict__["_unpickle_tensor"].__func__
        pickler = module.GuardsStatePickler

        def _unpickle_tensor(meta, device, pytype, keys, grad):
            return unpickle(pickler, meta, device, pytype, keys, grad)

        pickler._unpickle_tensor = _unpickle_tensor
    if "dropped-guards" in BROKEN:  # torch logs under another name
        import logging

        module.log = logging.getLogger("torch._dynamo.guards.elsewhere")


def _inductor_config(module):
    if "compiler-settings" in BROKEN:  # as if renamed: torch's own cache keys still read it
        cls = type(module)
        cls.save_config_portable = _renamed(cls.save_config_portable)
    if "inductor-config" in BROKEN and "cpp.dynamic_threads" in getattr(module, "_config", {}):
        entry = module._config["cpp.dynamic_threads"]  # a default it does not take (torch 2.13+)

        class _NoDefault(type(entry)):
            def __setattr__(self, name, value):
                if name == "env_value_default":
                    raise RuntimeError("misbehaving on purpose")
                super().__setattr__(name, value)

        entry.__class__ = _NoDefault


def _functorch_config(module):
    if "eager-backward" in BROKEN:  # a torch whose AOTAutograd has no such setting
        module._config.pop("force_non_lazy_backward_lowering", None)


class _StanceName:
    """A stance's name that compares as torch's string does, but is none (a stance of another shape)."""

    def __init__(self, name):
        self.name = name

    def __eq__(self, other):
        return self.name == (other.name if isinstance(other, _StanceName) else other)

    def __hash__(self):
        return hash(self.name)

    def __repr__(self):
        return repr(self.name)


def _odd_stances(stance_class):
    """``stance_class`` (torch's DynamoStance), its names made _StanceName: torch's comparisons hold."""
    class OddStance(stance_class):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            if not isinstance(self.stance, _StanceName):
                self.stance = _StanceName(self.stance)

    return OddStance


def _eval_frame(module):
    if "compile-stance" in BROKEN:
        module._stance = _odd_stances(module.DynamoStance)()
    if "cache-entry-list" in BROKEN:  # torch's own callers import the C function itself
        module._debug_get_cache_entry_list = _raise
    if "compile-context" in BROKEN:  # a compiled function whose wrapper closes over no compile context
        import functools

        call = module._TorchDynamoContext.__call__

        def __call__(self, fn):
            compiled = call(self, fn)
            if isinstance(compiled, torch_module().nn.Module) or not callable(compiled):
                return compiled
            return functools.wraps(compiled)(lambda *args, **kwargs: compiled(*args, **kwargs))

        module._TorchDynamoContext.__call__ = __call__


def torch_module():
    return sys.modules["torch"]


def _dynamo_dicts(module):
    if "dict-absent-key" in BROKEN:
        _positional_only(module.ConstDictVariable, "getitem_const_raise_exception_if_absent")


def _dynamo_torch_variables(module):
    if "folded-call" in BROKEN:
        _positional_only(module.TorchInGraphFunctionVariable, "call_function")


def _dynamo_config(module):
    if "caching-precompile" in BROKEN:  # TORCH_CACHING_PRECOMPILE=1 not taken
        module.caching_precompile = False
    if "recompile-limit" in BROKEN:  # a limit of another type, which torch's own comparisons still take
        module.recompile_limit = 8.0


def _dynamo_decorators(module):
    if "compile-stance" in BROKEN:  # each stance set_stance makes, of another shape
        module.DynamoStance = _odd_stances(module.DynamoStance)
    if "optimizer-static-address" in BROKEN:  # another signature than the hook reads: torch's calls still work
        module.mark_static_address = _unreadable_signature(module.mark_static_address)


def _unreadable_signature(original):
    """``original`` as a function (a method where it is one) whose signature inspect cannot read."""
    def call(*args, **kwargs):
        return original(*args, **kwargs)

    call.__signature__ = "misbehaving on purpose"  # not a Signature: inspect.signature raises TypeError
    return call


def _dynamo_optimizer(module):
    if "optimizer-init-args" in BROKEN:
        module.OptimizerVariable.get_python_args = _unreadable_signature(module.OptimizerVariable.get_python_args)


def _optim(module):
    if "optimizer-init" in BROKEN:  # as if renamed: torch's trace still calls them, hatch-precompile's call fails
        for optimizer in vars(module).values():
            if isinstance(optimizer, type) and "_init_group" in vars(optimizer):
                optimizer._init_group = _renamed_past_dynamo(optimizer._init_group)


def _renamed_past_dynamo(original):
    """As _renamed, for a method each instance reaches through Dynamo's disabling wrapper."""
    def call(*args, **kwargs):
        frame = sys._getframe(1)
        while frame is not None and frame.f_globals.get("__name__") == "torch._dynamo.eval_frame":
            frame = frame.f_back
        if frame is not None and frame.f_globals.get("__name__", "").startswith("hatch_precompile"):
            _raise()
        return original(*args, **kwargs)

    return call


def _dynamo_init(module):
    if "code-caches-reset" in BROKEN:  # another signature than the hook reads: torch's reset() still calls it
        module.reset_code_caches = _NoSignature(module.reset_code_caches)


def _bytecode_transformation(module):
    if "unique-id" in BROKEN:  # torch names its globals from a counter of another name
        import itertools

        counter = itertools.count()
        del module._unique_id_counter

        def unique_id(name, with_uuid=False):
            return f"{name}_{next(counter)}"

        module.unique_id = unique_id


def _triton_driver(module):
    for name in ("triton-c-module", "triton-c-module-file"):  # another signature than the hooks read
        attribute = "compile_module_from_src" if name == "triton-c-module" else "compile_module_from_file"
        if name in BROKEN and hasattr(module, attribute):
            setattr(module, attribute, _NoSignature(getattr(module, attribute)))


def _backends_cpu(module):
    if "cpu-capability" in BROKEN:
        module.get_cpu_capability = _raise


PATCHES = {
    "torch": _torch,
    "torch._functorch._aot_autograd.aot_autograd_result": _aot_autograd_result,
    "torch._inductor": _inductor,
    "torch.utils._pytree": _pytree,
    "torch.export.experimental": _export_experimental,
    "torch.nn.modules.module": _nn_module,
    "torch.utils._config_module": _config_module,
    "torch._inductor.runtime.cache_dir_utils": _cache_dir_utils,
    "torch._inductor.codecache": _codecache,
    "torch._dynamo.convert_frame": _convert_frame,
    "torch._inductor.cpp_builder": _cpp_builder,
    "torch._inductor.runtime.triton_heuristics": _triton_heuristics,
    "torch._inductor.cpu_vec_isa": _vec_isa,
    "torch._dynamo.utils": _dynamo_utils,
    "torch._logging": _torch_logging,
    "torch.compiler": _compiler,
    "torch.backends.cpu": _backends_cpu,
    "triton.backends.nvidia.driver": _triton_driver,
    "torch._functorch._aot_autograd.autograd_cache": _autograd_cache,
    "torch._inductor.compile_fx": _compile_fx,
    "torch.fx.experimental.symbolic_shapes": _symbolic_shapes,
    "torch._dynamo.package": _dynamo_package,
    "torch._dynamo.guards": _dynamo_guards,
    "torch._dynamo.output_graph": _output_graph,
    "torch._dynamo.precompile_context": _precompile_context,
    "torch._dynamo.config": _dynamo_config,
    "torch._dynamo.decorators": _dynamo_decorators,
    "torch._dynamo.variables.optimizer": _dynamo_optimizer,
    "torch.optim": _optim,
    "torch._dynamo": _dynamo_init,
    "torch._guards": _guards_module,
    "torch._dynamo.eval_frame": _eval_frame,
    "torch._dynamo.variables.dicts": _dynamo_dicts,
    "torch._dynamo.variables.torch": _dynamo_torch_variables,
    "torch._functorch.config": _functorch_config,
    "torch._inductor.config": _inductor_config,
    "torch._dynamo.bytecode_transformation": _bytecode_transformation,
}


# The breakers, by the touchpoint they break (tests/unit/test_touchpoints.py checks they are the registry's).
# "aoti-loader-crash" breaks aoti-loader otherwise: it kills the process that opens a package.
BREAKERS = frozenset({
    "write", "precompile-header", "torch-key", "triton-key", "event-logger", "compile-state", "system", "check-build", "autotune-recheck",
    "hash-details", "inductor-config", "compile-command", "dynamo-compile", "key-details", "fx-key", "aot-key",
    "inductor-compile", "count-calls", "guard-eval", "guard-expr", "cache-entries",
    "verify-setting", "precompile-logger", "logs", "metrics", "counters", "guard-failures", "compile-times",
    "megacache", "cpu-capability", "cpp-compiler", "compiler-search", "intel-compiler", "cache-dir", "aoti-compile", "aoti-loader",
    "keep-constants", "pytree", "module-internals", "joint-export", "triton-c-module", "triton-c-module-file",
    "compile-calls", "precompile-entry", "compile-package", "guard-load", "unique-id", "caching-precompile",
    "guard-filter", "guarded-code", "dropped-guards", "guard-state-tensor", "compiler-config",
    "global-state", "compiler-settings", "code-source", "guard-pickler", "local-type-guard", "module-global", "dynamo-entries",
    "graph-load", "eager-backward", "graph-cache-log", "package-bypass", "bypass-log", "guard-text",
    "compile-context", "folded-calls", "dict-absent-key", "folded-call", "guard-create-log", "post-compile-graph",
    "decomp-table", "backend-debug", "extension-paths", "guard-sites", "compile-stance", "recompile-limit",
    "cache-entry-list", "cache-size", "code-caches-reset", "frame-error", "optimizer-static-address",
    "optimizer-init-args", "optimizer-init",
})


class _AfterImport(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):
        patch = PATCHES.get(fullname)
        if patch is None:
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            sys.meta_path.insert(0, self)
        exec_module = spec.loader.exec_module

        def exec_then_break(module):
            exec_module(module)
            patch(module)

        spec.loader.exec_module = exec_then_break
        return spec


class _FromACopy(importlib.abc.MetaPathFinder):
    """A torch module read from a copy with one line added after ``line`` (source hatch-precompile has
    not read), and each of ``kept`` ({old: new}, ``{origin}`` the original file) replaced so that it
    computes what the original computes."""

    def __init__(self, name, line, added, kept=None):
        self.name, self.line, self.added, self.kept = name, line, added, kept or {}

    def find_spec(self, fullname, path, target=None):
        if fullname != self.name:
            return None
        import tempfile

        where = sys.meta_path.index(self)  # put back where it was: a finder put before it stays first
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            sys.meta_path.insert(where, self)
        with open(spec.origin, encoding="utf-8") as source:
            text = source.read()
        assert self.line in text  # each of kept replaced where this torch has it
        text = text.replace(self.line, self.line + self.added, 1)
        for old, new in self.kept.items():
            text = text.replace(old, new.format(origin=repr(spec.origin)), 1)
        copy = os.path.join(tempfile.mkdtemp(prefix="misbehave-"), os.path.basename(spec.origin))
        with open(copy, "w", encoding="utf-8") as out:
            out.write(text)
        return importlib.util.spec_from_file_location(fullname, copy)


if BROKEN:
    sys.meta_path.insert(0, _AfterImport())
if "backend-debug" in BROKEN:  # a backend wrapper whose constructor sets one more attribute
    sys.meta_path.insert(0, _FromACopy("torch._dynamo.repro.after_dynamo", "        self._compiler_name = compiler_name\n",
                                       "        self._misbehaving = True\n"))
if "extension-paths" in BROKEN:  # include paths computed by source not read (the same paths)
    sys.meta_path.insert(0, _FromACopy("torch.utils.cpp_extension", "    lib_include = os.path.join(_TORCH_PATH, 'include')\n",
                                       "    lib_include = os.path.join(os.path.dirname(lib_include), 'include')\n",
                                       {"_HERE = os.path.abspath(__file__)": "_HERE = {origin}"}))
