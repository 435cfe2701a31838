"""The registry of every touch of torch's internals: each touchpoint's torch module and name, its kind,
who uses it and why, and what happens when it is not what we expect; and the reference table made
from it (docs/reference/touchpoints.md).

A touchpoint is something of torch's that is not public API: a function or method that is wrapped,
a cached computation started early, a setting that is set, a logger that is filtered, a private
function that is called, or a value the build's observers read. Each has a name in ``REGISTRY``,
and the features go through this package's functions by that name (``lookup``); nothing else
replaces anything of torch's. tests/misbehave/sitecustomize.py breaks each one by name (a test
keeps the registry, the breakers and the table equal).
"""

from __future__ import annotations

import dataclasses

from hatch_precompile.protocol import served_compiles
from hatch_precompile.run import variables

variables.debug_log()  # HATCH_PRECOMPILE_DEBUG: what failed here, on stderr

CODECACHE = "torch._inductor.codecache"
VEC_ISA = "torch._inductor.cpu_vec_isa"
TRITON_HEURISTICS = "torch._inductor.runtime.triton_heuristics"
CONFIG = "torch._inductor.config"
CPP_BUILDER = "torch._inductor.cpp_builder"
CONVERT_FRAME = "torch._dynamo.convert_frame"
TRITON_COMPAT = "torch._inductor.runtime.triton_compat"
TRITON_DRIVER = "triton.backends.nvidia.driver"  # Triton's, not torch's: its CUDA driver's helpers
AUTOGRAD_CACHE = "torch._functorch._aot_autograd.autograd_cache"
DYNAMO_UTILS = "torch._dynamo.utils"
SYMBOLIC_SHAPES = "torch.fx.experimental.symbolic_shapes"


@dataclasses.dataclass(frozen=True)
class Touchpoint:
    name: str
    module: str  # the torch module
    qualname: str  # what of it: a function, a method, a setting, a logger
    kind: str  # wrap, prefetch, answer, setting, logging, call, read
    users: str  # who uses it, and why
    broken: str = "left as torch has it"  # what happens when it is not what we expect
    elsewhere: str | None = None  # where an older torch has it (a prefetch's fallback module)


REGISTRY: dict[str, Touchpoint] = {t.name: t for t in (
    Touchpoint("write", CODECACHE, "write", "wrap", "build: each kernel's command line (child/observe.py); load: "
               "which kernels are built (run/caches/warm_shortcuts.py)",
               broken="hooks read the arguments by name (none when the signature cannot be read): no relocation (the build says how many kernels are not relocatable), no shortcut"),
    Touchpoint("post-compile-graph", CODECACHE, "FxGraphCache.cache_hit_post_compile", "wrap",
               "load, served: a cached graph loads without importing the lowerings; its import of "
               "`torch._inductor.graph`, made to read a test hook, finds a stand-in (run/torch_internals/served/stand_ins/graph_stand_in.py)",
               broken="the real module is imported: the lowerings load with the graph"),
    Touchpoint("decomp-table", "torch._inductor.decomposition", "select_decomp_table", "answer",
               "load, served: an entry's compiled graphs name it among the arguments Inductor compiled them with; "
               "read from the entry's pickle, where its module (every decomposition table) is not imported, as a "
               "stand-in that imports it when called (run/torch_internals/served/entry_pickle.py)",
               broken="called, or asked for anything: the module is imported and the real function answers"),
    Touchpoint("backend-debug", "torch._dynamo.repro.after_dynamo", "WrapBackendDebug", "answer",
               "load, served: the package's served torch.compile calls wrap the backend without importing the "
               "minifier (its debug tools, AOTAutograd, networkx): a stand-in made as torch's constructor makes it, "
               "the class's source read and known (run/torch_internals/served/stand_ins/debug_wrapper.py); torch's own wrapper made "
               "when Dynamo first compiles a graph",
               broken="another class than those read: torch's module is imported, and its wrapper made"),
    Touchpoint("extension-paths", "torch.utils.cpp_extension", "include_paths, library_paths, TORCH_LIB_PATH, CUDA_HOME",
               "answer",
               "load, served: while a cached graph loads, its kernels' compile commands (part of each kernel's key) "
               "take torch's include and library dirs (and, 2.14+, whether CUDA_HOME is None) from a stand-in, "
               "computed as torch's module computes them, its source for them read and known, without importing it "
               "and setuptools "
               "(run/torch_internals/served/stand_ins/extension_paths.py)",
               broken="another source than those read: torch's module is imported"),
    Touchpoint("precompile-header", CODECACHE, "_precompile_header", "wrap",
               "load: skip the header for a kernel already built (run/caches/warm_shortcuts.py)",
               broken="passed through: the header is built"),
    Touchpoint("torch-key", CODECACHE, "torch_key", "prefetch", "load: hash torch's sources in the background "
               "from the first compile on (run/caches/warm_shortcuts.py)", broken="not started: torch hashes when it needs the key"),
    Touchpoint("triton-key", CODECACHE, "triton_key", "prefetch", "load: hash Triton's in the background, or set "
               "the key this machine computed before (2.13+; before, `runtime.triton_compat.triton_key`)",
               elsewhere=TRITON_COMPAT,
               broken="not started, or the memo unread: computed as torch does"),
    Touchpoint("event-logger", DYNAMO_UTILS, "get_chromium_event_logger", "call", "load: Dynamo's compile-event "
               "logger, made in the calling thread before a key is hashed in the background (torch makes it at "
               "first use, without a lock, and the hash times itself with it)",
               broken="nothing hashed in the background: torch hashes the keys when it needs them"),
    Touchpoint("compile-state", DYNAMO_UTILS, "CHROMIUM_EVENT_LOG, get_metrics_context, MetricsContext._level", "read",
               "load, build, verify, snoop: after each hook on a compile path (and each first-compile start), "
               "Dynamo's event logger, its open events and its metrics context are as the hook found them; where "
               "not, they are put back where they can be, and the hook is not called again in the process",
               broken="not checked: the hooks run as before"),
    Touchpoint("system", CODECACHE, "CacheBase.get_system", "answer", "load, without a GPU: answered without "
               "Triton's key where torch leaves it out of the graphs' keys (run/caches/warm_shortcuts.py)",
               broken="not functools' cache of a function of no arguments, an error, or answers that differ: left to torch, Triton's key prefetched"),
    Touchpoint("check-build", VEC_ISA, "VecISA.check_build", "wrap", "load and build: answer the ISA probes a "
               "shipped set proved or this user passed, and remember those that pass (run/caches/isa_probes.py)", broken="probed as usual"),
    Touchpoint("autotune-recheck", TRITON_HEURISTICS, "CachingAutotuner.recheck_autotune_cache", "wrap",
               "load, on a GPU: find the shipped tuned configs (run/caches/tuned_configs.py)", broken="the kernel is tuned again"),
    Touchpoint("triton-c-module", TRITON_DRIVER, "compile_module_from_src", "wrap",
               "build, on a GPU: keep the C helper modules Triton built (cuda_utils); load: serve the shipped ones "
               "instead of building them with the C compiler in each fresh cache (run/caches/triton_modules.py; Triton 3.6)",
               broken="Triton builds them as usual"),
    Touchpoint("triton-c-module-file", TRITON_DRIVER, "compile_module_from_file", "wrap",
               "the same, where Triton names the source by its file (Triton 3.8)", broken="Triton builds them as usual"),
    Touchpoint("hash-details", CODECACHE, "FxGraphHashDetails.__init__", "wrap", "load: a stand-in compiler's key "
               "(run/caches/cache_keys_as_built.py)", broken="the key as torch made it: the graphs compile again"),
    Touchpoint("inductor-config", CONFIG, "cpp.dynamic_threads", "setting", "load: the set's settings "
               "(run/caches/cache_keys_as_built.py), as the process's default (torch 2.13+ keeps a setting set "
               "per thread context), so that every thread's compiles find the shipped graphs; applied under "
               "HATCH_PRECOMPILE_NO_PATCHES too", broken="a setting it does not take is left alone (logged): the graphs compile again"),
    Touchpoint("compile-command", CPP_BUILDER, "run_compile_cmd", "wrap", "build: portable kernels and their flags "
               "(builder/sets/isa.py, builder/steps/export.py)",
               broken="the command runs as torch made it; the set is recorded `native`"),
    Touchpoint("dynamo-compile", CONVERT_FRAME, "_compile", "wrap", "load: the first compile starts the "
               "torch-key and triton-key prefetches (run/caches/warm_shortcuts.py) and asks the compiler's --version "
               "(run/caches/cache_keys_as_built.py); build, verify, snoop: each graph's call "
               "(child/observe.py); build, snoop: a line per graph as it is compiled (child/progress.py)",
               broken="no call signatures recorded (snoop's gaps say less); the keys are hashed when "
               "torch needs them, not before; a compiler that does not work is not said ahead; a build's "
               "lines per graph come at the workload's end"),
    Touchpoint("key-details", CODECACHE, "FxGraphHashDetails.__init__", "wrap", "build, verify, snoop: what each key "
               "is made of, AOTAutograd's subclass included (child/key_details.py)",
               broken="no key details recorded (`why` says less)"),
    Touchpoint("fx-key", CODECACHE, "compiled_fx_graph_hash", "wrap", "build, verify, snoop: the FX graph key "
               "(child/key_details.py)", broken="the key left unknown"),
    Touchpoint("aot-key", AUTOGRAD_CACHE, "autograd_cache_key", "wrap", "build, verify, snoop: the AOTAutograd key "
               "(child/key_details.py)", broken="the key left unknown"),
    Touchpoint("inductor-compile", "torch._inductor.compile_fx", "_compile_fx_inner", "wrap", "build: notes each "
               "graph without a call that Inductor is asked to compile (builder/caches/empty_graphs.py)",
               broken="such graphs are left to torch: returned uncompiled, with no cache entry to ship"),
    Touchpoint("count-calls", DYNAMO_UTILS, "count_calls", "wrap", "build: answers 1 call for a graph noted by "
               "`inductor-compile`, so that Inductor compiles and keys it and AOTAutograd saves its entry "
               "(builder/caches/empty_graphs.py)",
               broken="such graphs are left to torch: returned uncompiled, with no cache entry to ship"),
    Touchpoint("guard-eval", SYMBOLIC_SHAPES, "ShapeEnv.evaluate_guards_expression", "wrap", "verify, snoop: "
               "each cache entry's guard expression that failed, with this process's values (child/unused_entries.py)",
               broken="no guard failure recorded: `why` says the entry was there but cannot say which guard failed"),
    Touchpoint("guard-expr", SYMBOLIC_SHAPES, "ShapeEnv.produce_guards_expression", "wrap", "build: each cache "
               "entry's guard expression with the build's values, shipped for `why` (child/unused_entries.py)",
               broken="no build values beside a failed guard"),
    Touchpoint("cache-entries", AUTOGRAD_CACHE, "AOTAutogradCache._get_tmp_dir, FxGraphCache._get_tmp_dir", "call",
               "verify, snoop: a missed key's entry files read back as torch reads them, to name the one that "
               "cannot be loaded and the error (child/unused_entries.py)",
               broken="no file named: `why` says the entry was there but not which file failed"),
    Touchpoint("verify-setting", "torch._inductor.config, torch._functorch.config", "<setting>", "setting",
               "verify's `--setting inductor.NAME=VALUE` / `functorch.NAME=VALUE` (child/verify_child.py)",
               broken="verify's `--setting` fails with the setting named"),
    Touchpoint("precompile-logger", "torch._precompile", "logger", "logging", "load_step: torch's warning that the "
               "code it runs is untrusted, for a step whose sha256 the manifest vouches for (run/steps/shipped_steps.py)",
               broken="its records pass as torch makes them"),
    Touchpoint("logs", "torch._logging", "set_logs", "logging", "build, snoop: graph breaks and float64 nodes from "
               "torch's logs, kept from printing (child/observe.py)", broken="no graph breaks or float64 recorded"),
    Touchpoint("metrics", DYNAMO_UTILS, "get_compilation_metrics", "read", "build, verify, snoop: each graph "
               "compiled, its seconds and source location (child/observe.py)",
               broken="no graphs listed; every field is read with a default"),
    Touchpoint("counters", DYNAMO_UTILS, "counters", "read", "build, verify, snoop: cache hits and misses "
               "(child/observe.py)", broken="empty: `verify` says it cannot tell and exits 1"),
    Touchpoint("guard-failures", DYNAMO_UTILS, "guard_failures", "read", "build, verify, snoop: recompiles and "
               "why (child/observe.py)", broken="no recompiles recorded"),
    Touchpoint("compile-times", DYNAMO_UTILS, "compile_times", "read", "build: compile time by phase "
               "(child/build_child.py)", broken="no phases in `report`"),
    Touchpoint("megacache", "torch.compiler", "save_cache_artifacts", "call", "build's second pass: torch writes "
               "the Dynamo cache entries as it saves its Mega-Cache (builder/served/dynamo_pass.py; the bytes are not kept)",
               broken="no entries: the compiled functions are traced, warm from the shipped caches"),
    Touchpoint("cpu-capability", "torch.backends.cpu", "get_cpu_capability", "read", "build and load: the "
               "environment key (run/sets/environment_key.py)",
               broken="build: a plain wheel, said in one line; load: skipped with the error"),
    Touchpoint("compiler-search", CPP_BUILDER, "cpp_compiler_search", "wrap", "load: the first compiler of "
               "Inductor's list that answers `--version`, answered from the version this user's processes "
               "remembered for that compiler file (run/caches/warm_shortcuts.py): a warm process starts no compiler",
               broken="passed through: torch runs the compiler's `--version`"),
    Touchpoint("intel-compiler", CPP_BUILDER, "_is_intel_compiler", "wrap", "load: whether the compiler is "
               "Intel's, from its remembered `--version` line (run/caches/warm_shortcuts.py)",
               broken="passed through: torch runs the compiler's `--version`"),
    Touchpoint("cpp-compiler", CPP_BUILDER, "get_cpp_compiler", "call", "load and build: the compiler Inductor "
               "resolved (run/caches/cache_keys_as_built.py, run/caches/warm_shortcuts.py, child/build_child.py)",
               broken="no compiler recorded, no stand-in; probes as usual; an exported step's CPU features unknown: refused"),
    Touchpoint("cache-dir", "torch._inductor.runtime.cache_dir_utils", "cache_dir", "call", "load, on a GPU: the "
               "cache dir the tuned configs go to (run/caches/tuned_configs.py)",
               broken="tuned configs looked up where torch looks"),
    Touchpoint("aoti-compile", "torch._inductor", "aoti_compile_and_package", "call", "build: an exported step's "
               "package (builder/steps/export.py)",
               broken="the step fails the build by name (or is not shipped, with on_failure='warn')"),
    Touchpoint("aoti-loader", "torch._C._aoti", "AOTIModelPackageLoader", "call", "load_step: run an exported "
               "step, with the caller's weights bound in place (run/steps/exported_step.py)",
               broken="the step runs its fallback, with the loader's reason in `step.reason`"),
    Touchpoint("keep-constants", CONFIG, "always_keep_tensor_constants, joint_graph_constant_folding", "setting",
               "build: every tensor of an "
               "exported step's modules stays a constant the caller binds, none folded into the code "
               "(builder/steps/export.py)",
               broken="the step is not exported, and the build says why (load_step runs its fallback)"),
    Touchpoint("joint-export", "torch.export.experimental", "_export_forward_backward", "call", "build: a "
               "training step's exported program made into one graph of the loss and every gradient "
               "(builder/steps/export.py)",
               broken="the training step is not exported, and the build says why (load_step runs its fallback)"),
    Touchpoint("pytree", "torch.utils._pytree", "tree_flatten, tree_unflatten, treespec_dumps, treespec_loads",
               "call", "build and load_step: an exported step's inputs and outputs, flattened as the package "
               "takes them (builder/steps/export_contract.py, builder/steps/export_proof.py, run/steps/exported_step.py)",
               broken="load_step: the step runs its fallback, with the reason in `step.reason`"),
    Touchpoint("compile-calls", "torch", "compile", "wrap", "load: the package's own calls served from the Dynamo "
               "cache entries its build shipped (run/served/served_compile.py); build's second pass: each call's options and "
               "caller (builder/served/dynamo_pass.py)", broken="every call is torch's: traced, warm from the shipped caches"),
    Touchpoint("compiler-config", "torch", "_TorchCompileInductorWrapper.get_compiler_config", "wrap",
               "load: for a call the package's entry serves, asked when the compiled object's "
               "`get_compiler_config()` is, not at the call (it imports Inductor's whole compiler; "
               "run/torch_internals/served/compiler_config.py)",
               broken="asked at the call, as torch does: the first call costs Inductor's compiler import"),
    Touchpoint("precompile-entry", "torch._C._dynamo.eval_frame", "_load_precompile_entry, _reset_precompile_entries, "
               "_debug_get_precompile_entries",
               "call", "load and build: whether this torch takes Dynamo cache entries on a function's code, and, after "
               "torch's reset, whether an installed one is still there (run/torch_internals/served/dynamo_cache.py)",
               broken="no second pass at build; at load, the compiled functions are traced"),
    Touchpoint("compile-package", "torch._dynamo.package", "CompilePackage, PrecompileCacheEntry", "call",
               "load: a shipped Dynamo cache entry installed on a compiled function's code, as torch installs its own "
               "(run/torch_internals/served/dynamo_cache.py)", broken="that function is traced; `served()` says why"),
    Touchpoint("guard-load", "torch._dynamo.package", "load_guards_state, load_guard_manager", "wrap",
               "load: while an entry is installed, each guarded code is matched to the index, and its guards "
               "get one holding each dropped source to its object (run/torch_internals/served/dynamo_cache.py)",
               broken="the entry is taken out again (its guarded codes were not all seen): the function is traced"),
    Touchpoint("guard-create-log", "torch._guards", "log", "logging", "load: while a shipped entry is installed, "
               "torch's error records of a guard it could not rebuild, kept from printing: `served()` says why the "
               "install failed, and one tried again at the first call may succeed (run/torch_internals/served/dynamo_cache.py)",
               broken="torch prints its error and the guard's stack at the install"),
    Touchpoint("guard-state-tensor", "torch._dynamo.guards", "GuardsStatePickler._unpickle_tensor", "wrap",
               "load: while an entry is installed, a tensor whose `.grad` torch pickled as missing (a parameter with "
               "a gradient when it compiled; torch's own unpickler raises) is read back with none "
               "(run/torch_internals/served/guard_states.py)", broken="the entry is not installed: the function is traced"),
    Touchpoint("compiler-settings", "torch._inductor.config, torch._functorch.config, torch._dynamo.config",
               "save_config_portable, get_config_copy, get_hash", "read",
               "build's second pass: the settings each guarded code compiled under; load: this process's, against "
               "them, when the function is compiled and when each guarded code first runs "
               "(run/torch_internals/served/compiler_settings.py): no guard checks them",
               broken="unreadable at build: that guarded code is not served; at load: the compiled functions are traced"),
    Touchpoint("guard-sites", "torch._guards", "GuardsSet.add, Guard.user_stack", "read",
               "build's second pass: where the trace made each dropped identity guard, said in the reason a "
               "function is traced; a guard made by `copy.deepcopy`'s memo is held by how its objects alias, "
               "where torch keeps a guard made at two places as two (builder/served/guard_sites.py)",
               broken="no guard is taken for the memo's: a function that deep-copies an object in its compiled "
               "region is traced"),
    Touchpoint("guard-text", "torch._dynamo.guards", "GuardManagerWrapper.__str__", "read",
               "build's second pass: each guarded code's guards as torch rebuilds them, in words, at its trace; load: "
               "those torch rebuilt at install, compared line by line, so that a value torch read again here (a "
               "module's attribute) is the one the trace read (run/torch_internals/served/guard_text.py)",
               broken="unreadable at build: that guarded code is not served; at load: it is traced"),
    Touchpoint("compile-context", "torch._dynamo.eval_frame", "_TorchDynamoContext.enter_exit_hooks, _package",
               "setting", "load: each compiled object the package's own `torch.compile` returned names its function "
               "while a call of it runs, so that a shipped entry runs only under the package's compile, never under "
               "another `torch.compile` of the same function; build's second pass: the first code of each compile's "
               "package, told by module class (run/torch_internals/served/compile_scope.py)",
               broken="the function is traced, and `served()` says why; at build, one entry for every class"),
    Touchpoint("compile-stance", "torch._dynamo.eval_frame", "_stance", "read",
               "load: the stance `torch.compiler.set_stance` set, asked each time an installed guarded code's other "
               "guards hold: where torch would run a call eagerly, raise, or compile it with another backend, the "
               "shipped code is left out and the call is torch's (run/torch_internals/served/compile_controls.py)",
               broken="the call is left to torch (traced), and `served()` says why"),
    Touchpoint("recompile-limit", "torch._dynamo.config", "recompile_limit, accumulated_recompile_limit, "
               "error_on_recompile", "read",
               "load: a shipped guarded code's first run is a compile torch counts against the frame's limit, as "
               "in a cold process (run/torch_internals/served/compile_controls.py)",
               broken="the call is left to torch (traced), and `served()` says why"),
    Touchpoint("cache-entry-list", "torch._dynamo.eval_frame", "_debug_get_cache_entry_list", "call",
               "load: torch's own compiled codes of a frame (their guards, their ID-matched objects), counted with "
               "the shipped ones for the recompile limit; one that serves a call keeps it "
               "(run/torch_internals/served/compile_controls.py)",
               broken="the call is left to torch (traced), and `served()` says why"),
    Touchpoint("cache-size", CONVERT_FRAME, "compute_cache_size", "wrap",
               "load: torch's count of a frame's compiled codes, the shipped codes that have run added, so that "
               "torch reaches its recompile limit where a cold process does "
               "(run/torch_internals/served/compile_controls.py)",
               broken="no entry is installed (a shipped code would not count): the functions are traced"),
    Touchpoint("code-caches-reset", "torch._dynamo", "reset_code_caches", "wrap",
               "load: `torch.compiler.reset()`, `torch._dynamo.reset()` and `reset_code_caches()` seen, so that "
               "every shipped guarded code is back to not yet run, its first-run checks made again, as torch "
               "traces anew (run/torch_internals/served/compile_controls.py)",
               broken="no entry is installed (a reset would not be seen): the functions are traced"),
    Touchpoint("folded-calls", "torch", ", ".join(served_compiles.FOLDED_FACTS), "call",
               "build's second pass: what each call torch folded into a trace answered; load: what it answers here, "
               "when the guarded code first runs (run/torch_internals/served/folded_calls.py)",
               broken="an answer that cannot be had is one no build recorded: that guarded code is traced"),
    Touchpoint("dict-absent-key", "torch._dynamo.variables.dicts",
               "ConstDictVariable.getitem_const_raise_exception_if_absent", "wrap",
               "build's second pass: each dict key a trace looked up and did not find (an unset `os.environ` "
               "variable), which torch does not guard (builder/served/dynamo_reads.py)",
               broken="which keys a trace found absent is unknown: no guarded code is served"),
    Touchpoint("folded-call", "torch._dynamo.variables.torch", "TorchInGraphFunctionVariable.call_function", "wrap",
               "build's second pass: the calls torch folded into a trace, checked against what torch folded "
               "(builder/served/dynamo_reads.py)",
               broken="which calls torch folded is unknown: each guarded code records every one, as if folded"),
    Touchpoint("global-state", "torch._C._dynamo.guards", "GlobalStateGuard.__getstate__, __setstate__", "setting",
               "load: an installed entry's global-state guard takes this process's thread count, at install and "
               "again at the compiled function's first call, where the set's kernels read it when they run "
               "(run/torch_internals/served/thread_count.py)",
               broken="served where the thread count is the build machine's, traced elsewhere"),
    Touchpoint("unique-id", "torch._dynamo.bytecode_transformation", "_unique_id_counter", "setting",
               "load: Dynamo's name counter moved past the globals an installed entry brought, so that a later "
               "trace names none of them again (run/torch_internals/served/dynamo_cache.py)",
               broken="the entry is taken out again: the function is traced"),
    Touchpoint("caching-precompile", "torch._dynamo.config", "caching_precompile", "setting", "build's second pass "
               "only, through its environment (`TORCH_CACHING_PRECOMPILE=1`): the Dynamo cache entries "
               "(builder/served/dynamo_pass.py); never set in a user's process",
               broken="no second pass: the compiled functions are traced, warm from the shipped caches"),
    Touchpoint("guard-filter", "torch._dynamo.guards", "CheckFunctionManager.__init__", "wrap", "build's second "
               "pass: every guard of a compile, with the object it holds (builder/served/dynamo_pass.py)",
               broken="no guard recorded: every guarded code is marked traced"),
    Touchpoint("package-bypass", "torch._dynamo.guards", "CheckFunctionManager.__init__", "wrap", "build's second "
               "pass: a compile whose guards torch cannot save (an object it cannot pickle, such as a local "
               "function's `lru_cache`) finishes with its entry bypassed, where torch marks it so and then fails "
               "the compile, and the pass (builder/served/dynamo_pass.py)",
               broken="torch's answer: its AssertionError fails the second pass, and no compiled function is "
               "served untraced"),
    Touchpoint("frame-error", CONVERT_FRAME, "ConvertFrame.__call__", "wrap", "build's second pass: a frame whose compile "
               "raises there runs eagerly, as under torch's `suppress_errors`, and its function is not served, named "
               "with torch's words; the others still are (builder/served/compile_recorder.py)",
               broken="torch's: the exception fails the second pass, and no compiled function is served untraced"),
    Touchpoint("guarded-code", "torch._dynamo.package", "CompilePackage.add_guarded_code", "wrap", "build's second "
               "pass: which guards each serialized guarded code lost, and (its `_current_entry`) which frame torch "
               "bypassed (builder/served/dynamo_pass.py)", broken="none recorded: every one traced; no bypass named"),
    Touchpoint("code-source", "torch._dynamo.package", "_get_code_source", "wrap", "build's second pass: the "
               "code of a frame that is a property's getter (transformers' `loss_function`) named by the property's "
               "accessor, where torch's lookup stops at the property (builder/served/dynamo_packaging.py)",
               broken="torch's answer: its `PackageError` fails the second pass, and no compiled function is served "
               "untraced"),
    Touchpoint("guard-pickler", "torch._dynamo.guards", "GuardsStatePickler.reducer_override", "wrap", "build's "
               "second pass: a decorated function (its name finds the decorator's wrapper: transformers' `forward`) "
               "kept in a guarded code's state as torch keeps a nested one, by its code, module, defaults and "
               "closure, where torch keeps nothing and cannot rebuild the guards on it when it installs; "
               "it and a nested function are rebuilt with their own `__name__`, where torch's rebuild names them "
               "by their qualname and a guard on the name never holds (builder/served/dynamo_packaging.py)",
               broken="torch's answer: that guarded code's entry fails to install, or a guard on the function's "
               "name fails; either way such a call is traced"),
    Touchpoint("local-type-guard", "torch._dynamo.guards", "raise_local_type_error", "wrap", "build's second pass: a "
               "type guard on a class made in a function (`kernels`' `Func`, in transformers' Llama) let through where the "
               "guard pickler keeps it (builder/served/dynamo_packaging.py)", broken="torch's TypeError: no function served"),
    Touchpoint("module-global", "torch._dynamo.output_graph", "OutputGraph.install_global_by_id", "wrap",
               "build's second pass: a module that Dynamo's bytecode loads by a global named from its address "
               "(`___module_collections_<id>_c12`) recorded as one of the entry's imports, which torch installs "
               "with it (builder/served/dynamo_packaging.py)",
               broken="not recorded: the entry is refused when installed (its code loads a global it does not "
               "bring), and such a call is traced"),
    Touchpoint("dynamo-entries", "torch._dynamo.precompile_context", "PrecompileContext.record_dynamo_cache_entry",
               "wrap", "build's second pass: every `torch.compile` of one function (two model sizes, a module in "
               "train() and in eval()) kept in its one entry, where torch keeps the last compile's alone: the merged "
               "entry is written into `PrecompileContext._dynamo_cache_entries` (builder/served/dynamo_pass.py)",
               broken="torch's: the last compile of each function is served, the others traced"),
    Touchpoint("graph-load", "torch._dynamo.precompile_context", "BackendCacheArtifact.after_deserialization, "
               "RootGuardManager.add_epilogue_lambda_guard", "call",
               "load: an installed entry's compiled graphs, each loaded by the last guard of the first guarded code "
               "that calls it, when that guarded code is first about to run (run/torch_internals/served/dynamo_cache.py)",
               broken="that guarded code's guard fails (its calls are traced) and `served()` says why; a torch "
               "without epilogue guards has the graphs loaded at install, as its own install does"),
    Touchpoint("eager-backward", "torch._functorch.config", "force_non_lazy_backward_lowering", "setting",
               "build's second pass only: each training graph's backward compiled with its forward, so that torch "
               "saves the graph in its entry also where the workload never ran its backward; put back before the "
               "entries' compiler settings are read (builder/served/graph_saving.py)",
               broken="such a graph is saved only where the workload ran its backward; where not, its function is "
               "traced, and the build says why"),
    Touchpoint("graph-cache-log", AUTOGRAD_CACHE, "log", "logging", "build's second pass: why AOTAutograd did not "
               "save a graph (a bypass, or a graph that does not pickle), named in the build's line on a function "
               "not served (builder/served/graph_saving.py)", broken="the line says torch saved no compiled graph, "
               "without torch's reason"),
    Touchpoint("bypass-log", "torch._dynamo.output_graph", "log", "logging", "build's second pass: why torch could "
               "not package a compile, named in the build's line on a function not served, kept from printing "
               "(builder/served/dynamo_pass.py)", broken="the line says torch could not save the function's guards, "
               "without torch's reason; torch prints its own warning"),
    Touchpoint("optimizer-static-address", "torch._dynamo.decorators", "mark_static_address", "wrap", "build's second "
               "pass: an optimizer's tensors marked static unguarded, so that they are a compiled step's inputs and torch "
               "saves its guards (builder/served/optimizer_steps.py)", broken="torch's: the step is traced, and the build says why"),
    Touchpoint("optimizer-init-args", "torch._dynamo.variables.optimizer", "OptimizerVariable.get_python_args", "wrap",
               "build's second pass: the arguments of the `_init_group` calls a step's trace made, for the first served "
               "call to make that state (builder/served/optimizer_steps.py)", broken="not recorded: the step is traced"),
    Touchpoint("optimizer-init", "torch.optim.optimizer", "Optimizer._init_group, state, param_groups", "call", "load: the "
               "state a compiled step's trace makes, made before its first served call's guards (run/served/optimizer_state.py)",
               broken="that guarded code's guard fails: the step is traced"),
    Touchpoint("dropped-guards", "torch._dynamo.guards", "log", "logging", "build's second pass: the guards torch says "
               "it dropped, checked against those recorded, kept from printing (builder/served/dynamo_pass.py)",
               broken="only the recorded ones are checked; torch prints a line per dropped guard"),
    Touchpoint("module-internals", "torch.nn.Module", "_modules, _parameters, _buffers, _forward_pre_hooks, "
               "_forward_hooks, _backward_pre_hooks, _backward_hooks", "read", "load_step: an exported step's module, "
               "by identity (what was replaced) and its hooks (run/steps/exported_step.py, run/steps/call_contract.py)",
               broken="load_step: the call runs the fallback, with the reason in `step.reason`"),
)}


def documentation() -> str:
    """docs/reference/touchpoints.md's table, from the registry."""
    rows = ["| touchpoint | torch's | kind | who uses it, and why | when it is not what we expect |",
            "|---|---|---|---|---|"]
    for t in REGISTRY.values():
        rows.append(f"| `{t.name}` | `{t.module}` `{t.qualname}` | {t.kind} | {t.users} | {t.broken} |")
    return "\n".join(rows) + "\n"


def lookup(name: str, kind: str | tuple[str, ...]) -> Touchpoint:
    """The touchpoint ``name``; raises where it is not registered, or is not of ``kind``."""
    point = REGISTRY[name]  # KeyError: every touchpoint is registered
    if point.kind not in ((kind,) if isinstance(kind, str) else kind):
        raise ValueError(f"touchpoint {name!r} is a {point.kind}, not a {kind}")
    return point
