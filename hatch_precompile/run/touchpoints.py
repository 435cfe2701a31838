"""Every place hatch-precompile touches torch's internals, registered here: lazily, once, failing safe.

A touchpoint is something of torch's that is not public API: a function or method that is wrapped,
a cached computation started early, a setting that is set, a logger that is filtered, a private
function that is called, or a value the build's observers read. Each has a name in ``REGISTRY``
(its torch module and name, what it is, who uses it and why), and the features go through this
module's functions by that name; nothing else replaces anything of torch's. docs/reference/touchpoints.md is
generated from the registry, and tests/misbehave/sitecustomize.py breaks each one by name (a test
keeps the three equal). Only this module and what runs in a build's child import torch's private
modules (a lint rule says so: ``[tool.ruff.lint.flake8-tidy-imports]``).

Wrapping happens right after the torch module is first imported (so that ``import pkg`` does not
pay for importing Inductor). A wrapper takes any signature and passes every call through; a hook
sees the call's arguments by name (defaults filled in; none when the signature cannot be read)
and may, before the call, replace some (``before``), answer it in place of torch (``instead``,
returning anything but ``PASS``), or look at the result (``after``). A hook that raises is as if it
had not run, and is logged (``hatch_precompile`` logger, debug level; ``HATCH_PRECOMPILE_DEBUG=1``
prints it): it can slow torch down, never break a compile. So is a hook that leaves torch's compile
bookkeeping (Dynamo's open events, its metrics context) other than it found it: what can be is
put back, and that hook is not called again in the process. What is not where we expect it is left
alone. ``HATCH_PRECOMPILE_NO_PATCHES=1`` (or its older name ``HATCH_PRECOMPILE_NO_SPEEDUPS``) turns
every wrapper and prefetch off: torch's code then runs untouched, only slower. The set's settings
(``inductor-config``) still apply: they are torch's own knobs, and without them every shipped
graph would miss.
"""

from __future__ import annotations

import builtins
import contextlib
import dataclasses
import functools
import importlib
import importlib.abc
import importlib.util
import inspect
import logging
import sys
import threading
from collections.abc import Iterator
from types import FunctionType, ModuleType
from typing import Any, Callable, Protocol

from hatch_precompile.run import variables

log = logging.getLogger("hatch_precompile.touchpoints")
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
               "which kernels are built (run/speedups.py)",
               broken="hooks read the arguments by name (none when the signature cannot be read): no relocation (the build says how many kernels are not relocatable), no shortcut"),
    Touchpoint("precompile-header", CODECACHE, "_precompile_header", "wrap",
               "load: skip the header for a kernel already built (run/speedups.py)",
               broken="passed through: the header is built"),
    Touchpoint("torch-key", CODECACHE, "torch_key", "prefetch", "load: hash torch's sources in the background "
               "from the first compile on (run/speedups.py)",
               broken="not started: torch hashes when it needs the key"),
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
               "Triton's key where torch leaves it out of the graphs' keys (run/speedups.py)",
               broken="not functools' cache of a function of no arguments, an error, or answers that differ: left to torch, Triton's key prefetched"),
    Touchpoint("check-build", VEC_ISA, "VecISA.check_build", "wrap", "load: answer the ISA probes a shipped set "
               "proved (run/speedups.py)",
               broken="probed as usual"),
    Touchpoint("probe-load", VEC_ISA, "VecISA._probe_load", "wrap", "load: remember the probes that passed "
               "(run/speedups.py)",
               broken="only a result of `True` is remembered; otherwise probed as usual"),
    Touchpoint("autotune-recheck", TRITON_HEURISTICS, "CachingAutotuner.recheck_autotune_cache", "wrap",
               "load, on a GPU: find the shipped tuned configs (run/tuned_configs.py)",
               broken="the kernel is tuned again"),
    Touchpoint("triton-c-module", TRITON_DRIVER, "compile_module_from_src", "wrap",
               "build, on a GPU: keep the C helper modules Triton built (cuda_utils); load: serve the shipped ones "
               "instead of building them with the C compiler in each fresh cache (run/triton_modules.py; Triton 3.6)",
               broken="Triton builds them as usual"),
    Touchpoint("triton-c-module-file", TRITON_DRIVER, "compile_module_from_file", "wrap",
               "the same, where Triton names the source by its file (Triton 3.8)",
               broken="Triton builds them as usual"),
    Touchpoint("hash-details", CODECACHE, "FxGraphHashDetails.__init__", "wrap", "load: a stand-in compiler's key "
               "(run/key_agreement.py)",
               broken="the key as torch made it: the graphs compile again"),
    Touchpoint("inductor-config", CONFIG, "cpp.dynamic_threads", "setting", "load: the set's settings "
               "(run/key_agreement.py); applied under HATCH_PRECOMPILE_NO_PATCHES too",
               broken="a setting it does not take is left alone (logged): the graphs compile again"),
    Touchpoint("compile-command", CPP_BUILDER, "run_compile_cmd", "wrap", "build: portable kernels and their flags "
               "(build/isa.py, build/export.py)",
               broken="the command runs as torch made it; the set is recorded `native`"),
    Touchpoint("dynamo-compile", CONVERT_FRAME, "_compile", "wrap", "load: the first compile starts the "
               "torch-key and triton-key prefetches (run/speedups.py) and asks the compiler's --version "
               "(run/key_agreement.py); build, verify, snoop: each graph's call "
               "(child/observe.py)",
               broken="no call signatures recorded (snoop's gaps say less); the keys are hashed when "
               "torch needs them, not before; a compiler that does not work is not said ahead"),
    Touchpoint("key-details", CODECACHE, "FxGraphHashDetails.__init__", "wrap", "build, verify, snoop: what each key "
               "is made of, AOTAutograd's subclass included (child/key_details.py)",
               broken="no key details recorded (`why` says less)"),
    Touchpoint("fx-key", CODECACHE, "compiled_fx_graph_hash", "wrap", "build, verify, snoop: the FX graph key "
               "(child/key_details.py)",
               broken="the key left unknown"),
    Touchpoint("aot-key", AUTOGRAD_CACHE, "autograd_cache_key", "wrap", "build, verify, snoop: the AOTAutograd key "
               "(child/key_details.py)",
               broken="the key left unknown"),
    Touchpoint("inductor-compile", "torch._inductor.compile_fx", "_compile_fx_inner", "wrap", "build: notes each "
               "graph without a call that Inductor is asked to compile (build/empty_graphs.py)",
               broken="such graphs are left to torch: returned uncompiled, with no cache entry to ship"),
    Touchpoint("count-calls", DYNAMO_UTILS, "count_calls", "wrap", "build: answers 1 call for a graph noted by "
               "`inductor-compile`, so that Inductor compiles and keys it and AOTAutograd saves its entry "
               "(build/empty_graphs.py)",
               broken="such graphs are left to torch: returned uncompiled, with no cache entry to ship"),
    Touchpoint("guard-eval", SYMBOLIC_SHAPES, "ShapeEnv.evaluate_guards_expression", "wrap", "verify, snoop: "
               "each cache entry's guard expression that failed, with this process's values (child/lookups.py)",
               broken="no guard failure recorded: `why` says the entry was there but cannot say which guard failed"),
    Touchpoint("guard-expr", SYMBOLIC_SHAPES, "ShapeEnv.produce_guards_expression", "wrap", "build: each cache "
               "entry's guard expression with the build's values, shipped for `why` (child/lookups.py)",
               broken="no build values beside a failed guard"),
    Touchpoint("cache-entries", AUTOGRAD_CACHE, "AOTAutogradCache._get_tmp_dir, FxGraphCache._get_tmp_dir", "call",
               "verify, snoop: a missed key's entry files read back as torch reads them, to name the one that "
               "cannot be loaded and the error (child/lookups.py)",
               broken="no file named: `why` says the entry was there but not which file failed"),
    Touchpoint("verify-setting", "torch._inductor.config, torch._functorch.config", "<setting>", "setting",
               "verify's `--setting inductor.NAME=VALUE` / `functorch.NAME=VALUE` (tools/verify_child.py)",
               broken="verify's `--setting` fails with the setting named"),
    Touchpoint("precompile-logger", "torch._precompile", "logger", "logging", "load_step: torch's warning that the "
               "code it runs is untrusted, for a step whose sha256 the manifest vouches for (run/steps.py)",
               broken="its records pass as torch makes them"),
    Touchpoint("logs", "torch._logging", "set_logs", "logging", "build, snoop: graph breaks and float64 nodes from "
               "torch's logs, kept from printing (child/observe.py)",
               broken="no graph breaks or float64 recorded"),
    Touchpoint("metrics", DYNAMO_UTILS, "get_compilation_metrics", "read", "build, verify, snoop: each graph "
               "compiled, its seconds and source location (child/observe.py)",
               broken="no graphs listed; every field is read with a default"),
    Touchpoint("counters", DYNAMO_UTILS, "counters", "read", "build, verify, snoop: cache hits and misses "
               "(child/observe.py)",
               broken="empty: `verify` says it cannot tell and exits 1"),
    Touchpoint("guard-failures", DYNAMO_UTILS, "guard_failures", "read", "build, verify, snoop: recompiles and "
               "why (child/observe.py)",
               broken="no recompiles recorded"),
    Touchpoint("compile-times", DYNAMO_UTILS, "compile_times", "read", "build: compile time by phase "
               "(build/worker.py)",
               broken="no phases in `report`"),
    Touchpoint("megacache", "torch.compiler", "save_cache_artifacts", "read", "build: the Mega-Cache bytes "
               "(build/worker.py)",
               broken="no `megacache.bin` (the cache dir is what makes the warm start)"),
    Touchpoint("cpu-capability", "torch.backends.cpu", "get_cpu_capability", "read", "build and load: the "
               "environment key (run/envkey.py)",
               broken="build: a plain wheel, said in one line; load: skipped with the error"),
    Touchpoint("cpp-compiler", CPP_BUILDER, "get_cpp_compiler", "call", "load and build: the compiler Inductor "
               "resolved (run/key_agreement.py, run/speedups.py, build/worker.py)",
               broken="no compiler recorded, no stand-in; probes as usual; an exported step's CPU features unknown: refused"),
    Touchpoint("cache-dir", "torch._inductor.runtime.cache_dir_utils", "cache_dir", "call", "load, on a GPU: the "
               "cache dir the tuned configs go to (run/tuned_configs.py)",
               broken="tuned configs looked up where torch looks"),
    Touchpoint("aoti-compile", "torch._inductor", "aoti_compile_and_package", "call", "build: an exported step's "
               "package (build/export.py)",
               broken="the step fails the build by name (or is not shipped, with on_failure='warn')"),
    Touchpoint("aoti-loader", "torch._C._aoti", "AOTIModelPackageLoader", "call", "load_step: run an exported "
               "step, with the caller's weights bound in place (run/exported.py)",
               broken="the step runs its fallback, with the loader's reason in `step.reason`"),
    Touchpoint("keep-constants", CONFIG, "always_keep_tensor_constants, joint_graph_constant_folding", "setting",
               "build: every tensor of an "
               "exported step's modules stays a constant the caller binds, none folded into the code "
               "(build/export.py)",
               broken="the step is not exported, and the build says why (load_step runs its fallback)"),
    Touchpoint("joint-export", "torch.export.experimental", "_export_forward_backward", "call", "build: a "
               "training step's exported program made into one graph of the loss and every gradient "
               "(build/export.py)",
               broken="the training step is not exported, and the build says why (load_step runs its fallback)"),
    Touchpoint("pytree", "torch.utils._pytree", "tree_flatten, tree_unflatten, treespec_dumps, treespec_loads",
               "call", "build and load_step: an exported step's inputs and outputs, flattened as the package "
               "takes them (build/export.py, run/exported.py)",
               broken="load_step: the step runs its fallback, with the reason in `step.reason`"),
    Touchpoint("module-internals", "torch.nn.Module", "_modules, _parameters, _buffers, _forward_pre_hooks, "
               "_forward_hooks, _backward_pre_hooks, _backward_hooks", "read",
               "load_step: an exported step's module, by identity (what was replaced) and its hooks "
               "(run/exported.py, run/contract.py)",
               broken="load_step: the call runs the fallback, with the reason in `step.reason`"),
)}


def documentation() -> str:
    """docs/reference/touchpoints.md's table, from the registry."""
    rows = ["| touchpoint | torch's | kind | who uses it, and why | when it is not what we expect |",
            "|---|---|---|---|---|"]
    for t in REGISTRY.values():
        rows.append(f"| `{t.name}` | `{t.module}` `{t.qualname}` | {t.kind} | {t.users} | {t.broken} |")
    return "\n".join(rows) + "\n"


def _lookup(name: str, kind: str | tuple[str, ...]) -> Touchpoint:
    point = REGISTRY[name]  # KeyError: every touchpoint is registered
    if point.kind not in ((kind,) if isinstance(kind, str) else kind):
        raise ValueError(f"touchpoint {name!r} is a {point.kind}, not a {kind}")
    return point


MARK = "_hatch_precompile_patched"
PASS = object()  # what an ``instead`` hook returns to let torch answer

Hook = Callable[[dict[str, Any]], Any]
After = Callable[[dict[str, Any], Any], None]


class _Hooks:
    def __init__(self) -> None:
        self.before: list[Hook] = []
        self.instead: list[Hook] = []
        self.after: list[After] = []


_hooks: dict[tuple[str, str], _Hooks] = {}


def enabled() -> bool:
    return not variables.no_patches()


def wrap(name: str, *, before: Hook | None = None, instead: Hook | None = None,
         after: After | None = None) -> None:
    """Hook into the touchpoint ``name`` (a function or method of torch's) once its module is imported."""
    point = _lookup(name, "wrap")
    if not enabled():
        return
    hooks = _hooks.setdefault((point.module, point.qualname), _Hooks())
    for kind, hook in (("before", before), ("instead", instead), ("after", after)):
        if hook is not None and hook not in getattr(hooks, kind) and hook not in _dropped:
            getattr(hooks, kind).append(hook)
    after_import(point.module, lambda loaded: _install(loaded, point.qualname, hooks, name), name)


def set_config(name: str, setting: str, value: Any, module: str | None = None) -> None:
    """Through the touchpoint ``name``, set ``setting`` (``"cpp.dynamic_threads"``) of its config module
    (or of ``module``) once that is imported, if it has it.

    A setting, not a patch: it applies under the switch too, or the shipped graphs would miss."""
    point = _lookup(name, "setting")
    after_import(module or point.module, lambda loaded: _set(loaded, setting, value), name)


def set_config_now(name: str, module: str, setting: str, value: Any) -> None:
    """Set ``setting`` of the config ``module`` now (verify's ``--setting``); raises where torch has
    no such setting, naming it."""
    _lookup(name, "setting")
    owner, _ = _resolve(importlib.import_module(module), setting)  # AttributeError: no such setting
    setattr(owner, setting.rsplit(".", 1)[-1], value)


@contextlib.contextmanager
def quiet_logger(name: str, keep: Callable[[logging.LogRecord], bool]) -> Iterator[None]:
    """While the block runs, the touchpoint ``name``'s logger passes only the records ``keep`` keeps."""
    point = _lookup(name, "logging")

    class Keep(logging.Filter):
        def filter(self, record: logging.LogRecord) -> bool:
            return keep(record)

    logger, quiet = logging.getLogger(point.module), Keep()
    try:
        logger.addFilter(quiet)
    except Exception:  # the logger is not what we expect: its records pass, as without us
        log.debug("touchpoint %s: not filtered", name, exc_info=True)
    try:
        yield
    finally:
        try:
            logger.removeFilter(quiet)
        except Exception:
            log.debug("touchpoint %s: filter not removed", name, exc_info=True)


class Memo(Protocol):
    """A value this machine computed before, kept under a key of everything its computation reads."""

    def get(self) -> Any: ...  # the value, or None
    def put(self, value: Any) -> None: ...


def prefetch(name: str, memo: Memo | None = None) -> None:
    """Start ``module.qualname()`` (a cached computation: ``torch_key``) in the background once
    ``module`` is imported: torch's own ``.prefetch()`` where it has one (2.13+), else a thread
    whose result a caller waits for rather than computing it a second time. Where ``module``
    lacks it, ``elsewhere``'s function of that name (an older torch's home of ``triton_key``).

    With ``memo``, where torch's cache takes a value (``.set``, 2.13+): the remembered value is
    set, and nothing is computed; else torch's computation runs in the background and its result
    is remembered. Nothing starts in the background before Dynamo's compile-event logger exists
    (``_event_logger_made``)."""
    point = _lookup(name, "prefetch")
    module, qualname, elsewhere = point.module, point.qualname, point.elsewhere
    if not enabled():
        return

    def start(loaded: ModuleType) -> None:
        try:
            owner, function = _resolve(loaded, qualname)
        except AttributeError:
            if elsewhere is None:
                return
            owner, function = _resolve(importlib.import_module(elsewhere), qualname)
        name = qualname.rsplit(".", 1)[-1]
        if memo is not None and callable(getattr(function, "set", None)) and not getattr(function, MARK, False):
            value = _guarded_call(memo.get)
            if value is not None:
                function.set(value)  # torch's own way to fill its cache (RuntimeError: filled already)
            elif _event_logger_made():
                setattr(owner, name, _computed_in_background(function, qualname, then=memo.put))
        elif callable(getattr(function, "prefetch", None)):
            if _event_logger_made():
                function.prefetch()
        elif callable(function) and not getattr(function, MARK, False) and _event_logger_made():
            setattr(owner, name, _computed_in_background(function, qualname))

    after_import(module, start, name)


def _event_logger_made() -> bool:
    """Whether Dynamo's compile-event logger exists, made now in this thread if torch had not made it.

    Torch makes it at its first use, without a lock, and ``torch_key`` times itself with it
    (``dynamo_timed``). Hashed in the background while Dynamo's first compile began, each thread
    made one, and the later one replaced the logger that held the compile's open event: torch
    2.7.1 then raised "No toplevel event active" at the compile's guards. Made first, both threads
    share it, each with its own stack of events. False where it cannot be made: then nothing starts
    in the background."""
    point = _lookup("event-logger", "call")
    try:
        getattr(importlib.import_module(point.module), point.qualname)()
    except Exception:
        log.debug("touchpoint event-logger: not made; nothing is hashed in the background", exc_info=True)
        return False
    return True


def _guarded_call(function: Callable[[], Any]) -> Any:
    try:
        return function()
    except Exception:
        log.debug("%s failed", getattr(function, "__qualname__", function), exc_info=True)
        return None


def answer_without(name: str, callee: str, otherwise: Callable[[], None]) -> None:
    """Once ``module`` is imported, let ``module.qualname`` (a cached function of no arguments:
    ``CacheBase.get_system``) answer without ever calling ``callee`` (``triton_key``) where its
    answer cannot depend on it; else run ``otherwise()`` (prefetch ``callee``).

    Torch's own code is run twice, with two different stand-ins for ``callee`` (in its globals,
    and in what its ``from ... import`` statements bring in): when both answers are equal, the
    callee's value is discarded (torch before 2.15 on a machine where CUDA shows no GPU), and that
    answer is the function's from then on. Anything unexpected, a difference or an error: nothing
    is replaced, and torch computes it as always."""
    point = _lookup(name, "answer")
    if not enabled():
        return

    def install(loaded: ModuleType) -> None:
        try:
            replaced = _answer_without(loaded, point.qualname, callee)
        except Exception:
            log.debug("touchpoint %s: left as torch has it", name, exc_info=True)
            replaced = False
        if not replaced:
            otherwise()

    after_import(point.module, install, name)


_STAND_INS = (None, "hatch-precompile: a stand-in value")  # another type too: a use of it differs


def _answer_without(module: ModuleType, qualname: str, callee: str) -> bool:
    owner, cached = _resolve(module, qualname)
    raw = getattr(cached, "__wrapped__", None)
    name = qualname.rsplit(".", 1)[-1]
    if (getattr(cached, MARK, False) or not callable(getattr(cached, "cache_clear", None))
            or not isinstance(raw, FunctionType) or inspect.signature(raw).parameters):
        return False  # not functools' cache of a function of no arguments
    first, second = (_run_with(raw, callee, value) for value in _STAND_INS)
    if first != second:
        return False

    def answer() -> Any:
        return first

    functools.update_wrapper(answer, cached)
    answer.cache_clear = lambda: None  # type: ignore[attr-defined]  # nothing of torch's to clear
    setattr(answer, MARK, True)
    static = isinstance(inspect.getattr_static(owner, name, None), staticmethod)
    setattr(owner, name, staticmethod(answer) if static else answer)
    return True


def _run_with(function: FunctionType, callee: str, value: Any) -> Any:
    """``function()`` run as written, but where ``callee`` (global or imported) answers ``value``."""
    def stand_in(*args: Any, **kwargs: Any) -> Any:
        return value

    def importing(name: str, globals: Any = None, locals: Any = None, fromlist: Any = (), level: int = 0) -> Any:
        imported = builtins.__import__(name, globals, locals, fromlist, level)
        if fromlist and callee in fromlist:  # `from triton_compat import HAS_TRITON, triton_key`
            copy = ModuleType(imported.__name__)
            copy.__dict__.update(vars(imported))
            setattr(copy, callee, stand_in)
            return copy
        return imported

    scope = dict(function.__globals__)
    if callee in scope:
        scope[callee] = stand_in
    scope["__builtins__"] = {**vars(builtins), "__import__": importing}
    copy = FunctionType(function.__code__, scope, function.__name__, function.__defaults__, function.__closure__)
    return copy()


def _computed_in_background(function: Callable[[], Any], qualname: str,
                            then: Callable[[Any], None] | None = None) -> Callable[..., Any]:
    """``function`` started in a thread now; a call without arguments waits for that result (an
    error there: the call computes it as torch would), which ``then`` is given too. Torch's
    attributes (``.set``) are kept."""
    done = threading.Event()
    result: dict[str, Any] = {}

    def compute() -> None:
        try:
            result["value"] = function()
        except BaseException:  # the caller computes it again, and sees the error there
            log.debug("%s failed in the background", qualname, exc_info=True)
        try:
            if then is not None and "value" in result:
                then(result["value"])  # before the caller goes on: a short process exits soon after
        except Exception:
            log.debug("%s: its result was not remembered", qualname, exc_info=True)
        finally:
            done.set()

    worker = threading.Thread(target=compute, name=f"hatch-precompile {qualname}", daemon=True)

    @functools.wraps(function)
    def joined(*args: Any, **kwargs: Any) -> Any:
        if not args and not kwargs and threading.current_thread() is not worker:
            done.wait()
            if "value" in result:
                return result["value"]
        return function(*args, **kwargs)

    setattr(joined, MARK, True)
    worker.start()
    return joined


_first_compile: list[Callable[[], Any]] = []  # what waits for Dynamo's first compile in this process


def at_first_compile(start: Callable[[], Any]) -> None:
    """Run ``start()`` when Dynamo starts compiling a frame: work only a compile needs, which a
    process that imports a compiling package and never calls it (a CLI's --help) does not pay.
    Under ``HATCH_PRECOMPILE_NO_PATCHES`` nothing is wrapped, so ``start`` never runs."""
    _first_compile.append(start)
    wrap("dynamo-compile", before=_compiling)


def _compiling(arguments: dict[str, Any]) -> None:
    while _first_compile:  # one start failing leaves the others and the compile alone
        _run(None, _first_compile.pop(0), "dynamo-compile", "a first-compile start", None)


def after_import(name: str, patch: Callable[[ModuleType], None], touchpoint: str | None = None) -> None:
    """Run ``patch(module)`` once the module ``name`` is imported (now, if it already is); a patch
    that raises is not applied, and is logged under ``touchpoint``."""
    module = sys.modules.get(name)
    if module is not None:
        _guarded(patch, touchpoint)(module)
    elif not any(isinstance(f, _AfterImport) and f.name == name and f.patch is patch for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterImport(name, patch, touchpoint))


def _install(module: ModuleType, qualname: str, hooks: _Hooks, name: str) -> None:
    owner, original = _resolve(module, qualname)
    if not callable(original) or getattr(original, MARK, False):
        return
    try:
        signature: inspect.Signature | None = inspect.signature(original)
    except (TypeError, ValueError):
        signature = None
    static = isinstance(inspect.getattr_static(owner, qualname.rsplit(".", 1)[-1], None), staticmethod)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        bound = _bind(signature, args, kwargs)
        arguments = dict(bound.arguments) if bound is not None else {}
        for hook in list(hooks.before):
            changes = _run(hooks.before, hook, name, "a before hook", None, arguments)
            if changes and bound is not None:
                bound.arguments.update(changes)
                arguments.update(changes)
        if bound is not None:
            args, kwargs = bound.args, bound.kwargs
        for hook in list(hooks.instead):
            answer = _run(hooks.instead, hook, name, "an instead hook", PASS, arguments)
            if answer is not PASS:
                return answer
        result = original(*args, **kwargs)
        for observer in list(hooks.after):  # an observer or a shortcut must never break a compile
            _run(hooks.after, observer, name, "an after hook", None, arguments, result)
        return result

    setattr(wrapper, MARK, True)
    wrapper.__wrapped__ = original  # type: ignore[attr-defined]
    setattr(owner, qualname.rsplit(".", 1)[-1], staticmethod(wrapper) if static else wrapper)


_dropped: list[Callable[..., Any]] = []  # hooks that changed torch's compile bookkeeping: never called again


def _run(hooks: list[Any] | None, hook: Callable[..., Any], name: str, what: str, failed: Any, *args: Any) -> Any:
    """``hook(*args)``; ``failed`` where it raised, or where it left torch's compile bookkeeping
    other than it found it: then what can be is put back, and the hook is taken out of ``hooks``
    for the rest of the process. Both are logged under the touchpoint ``name``."""
    found = _compile_state()
    try:
        result = hook(*args)
    except Exception:
        log.debug("touchpoint %s: %s failed", name, what, exc_info=True)
        result = failed
    changed = _put_back(found)
    if not changed:
        return result
    if hooks is not None and hook in hooks:
        hooks.remove(hook)
    _dropped.append(hook)
    log.debug("touchpoint %s: %s changed torch's compile bookkeeping (%s); put back where it could be, and not "
              "called again in this process", name, what, "; ".join(changed))
    return failed


@dataclasses.dataclass(frozen=True)
class _CompileState:
    """Torch's compile bookkeeping as one thread sees it: Dynamo's event logger (the process's one),
    this thread's stacks of open events and their data, and its metrics context and depth."""

    utils: ModuleType
    logger: Any
    stacks: tuple[list[Any], ...]
    events: dict[str, Any]
    metrics: Any
    depth: Any


def _compile_state() -> _CompileState | None:
    """Torch's compile bookkeeping now; None where Dynamo is not imported (nothing to keep) or its
    bookkeeping is not as expected (nothing is checked)."""
    point = _lookup("compile-state", "read")
    utils = sys.modules.get(point.module)
    if utils is None:
        return None
    try:
        logger = utils.CHROMIUM_EVENT_LOG  # None until Dynamo first times an event
        stacks = _event_stacks(logger)
        events = dict(logger.get_event_data()) if logger is not None else {}
        metrics = utils.get_metrics_context()
        return _CompileState(utils, logger, tuple(list(s) for s in stacks), events, metrics,
                             getattr(metrics, "_level", None))
    except Exception:
        log.debug("touchpoint compile-state: not read; the hooks run unchecked", exc_info=True)
        return None


def _event_stacks(logger: Any) -> tuple[list[Any], ...]:
    return (logger.get_stack(), logger.get_pt2_compile_substack()) if logger is not None else ()


def _put_back(found: _CompileState | None) -> list[str]:
    """What differs from ``found`` now, each put back where it can be; [] where nothing does (or it
    cannot be read). A logger torch made meanwhile, where it had none, is its own first use."""
    if found is None:
        return []
    changed = []
    try:
        utils, logger = found.utils, found.logger
        if logger is not None and utils.CHROMIUM_EVENT_LOG is not logger:
            setattr(utils, "CHROMIUM_EVENT_LOG", logger)  # the one that holds the open events
            changed.append("Dynamo's event logger replaced")
        stacks = _event_stacks(logger)
        if [list(s) for s in stacks] != list(found.stacks):
            for stack, before in zip(stacks, found.stacks):
                stack[:] = before
            data = logger.get_event_data()
            for event, values in found.events.items():
                data.setdefault(event, values)  # what a closed event had gathered
            changed.append("open events closed or left open")
        metrics = utils.get_metrics_context()
        if metrics is not found.metrics:
            changed.append("the metrics context replaced (not put back)")
        elif getattr(metrics, "_level", None) != found.depth:
            if isinstance(found.depth, int):
                metrics._level = found.depth  # a context left early records its metrics twice, not never
            changed.append("the metrics context entered or left")
    except Exception:
        log.debug("touchpoint compile-state: not compared", exc_info=True)
    return changed


def _resolve(module: ModuleType, qualname: str) -> tuple[Any, Any]:
    """(the object that holds it, the attribute) of a dotted name inside ``module``."""
    owner: Any = module
    *path, name = qualname.split(".")
    for part in path:
        owner = getattr(owner, part)
    return owner, getattr(owner, name)


def _set(module: ModuleType, name: str, value: Any) -> None:
    owner, _ = _resolve(module, name)  # AttributeError (a torch without it): left alone
    setattr(owner, name.rsplit(".", 1)[-1], value)


def _bind(signature: inspect.Signature | None, args: tuple, kwargs: dict) -> inspect.BoundArguments | None:
    if signature is None:
        return None
    try:
        bound = signature.bind(*args, **kwargs)
    except TypeError:
        return None
    bound.apply_defaults()
    return bound


def _guarded(patch: Callable[[ModuleType], None], touchpoint: str | None = None) -> Callable[[ModuleType], None]:
    def run(module: ModuleType) -> None:
        try:
            patch(module)
        except Exception:  # torch's internals are not what we expect: leave them as they are
            log.debug("touchpoint %s: not applied to %s", touchpoint or "-", module.__name__, exc_info=True)

    return run


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs ``patch(module)`` right after ``name`` is first imported."""

    def __init__(self, name: str, patch: Callable[[ModuleType], None], touchpoint: str | None = None) -> None:
        self.name = name
        self.patch = patch
        self.touchpoint = touchpoint

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        loader = getattr(spec, "loader", None)
        exec_module = getattr(loader, "exec_module", None)
        if loader is None or exec_module is None:
            return spec
        patch = _guarded(self.patch, self.touchpoint)
        others = [f for f in sys.meta_path if isinstance(f, _AfterImport) and f.name == fullname]
        for other in others:  # several patches of one module: all run after its one import
            sys.meta_path.remove(other)

        def exec_then_patch(module: ModuleType) -> None:
            exec_module(module)
            patch(module)
            for other in others:
                _guarded(other.patch, other.touchpoint)(module)

        loader.exec_module = exec_then_patch
        return spec


# -- torch's AOTInductor C++ loader (run/exported.py): called, never replaced ---------------------


def cpp_compiler() -> Any:
    """The compiler command Inductor resolved (``cpp.cxx``: ``CXX`` or ``g++``); raises where none works."""
    _lookup("cpp-compiler", "call")
    from torch._inductor.cpp_builder import get_cpp_compiler

    return get_cpp_compiler()


def inductor_cache_dir() -> str:
    """The cache dir Inductor uses now."""
    _lookup("cache-dir", "call")
    from torch._inductor.runtime.cache_dir_utils import cache_dir

    return cache_dir()


def cache_entry_dirs() -> tuple[str, str]:
    """(AOTAutograd's, the FX graph cache's) directories of entries, as torch lays them out now."""
    _lookup("cache-entries", "call")
    from torch._functorch._aot_autograd.autograd_cache import AOTAutogradCache
    from torch._inductor.codecache import FxGraphCache

    dirs = AOTAutogradCache._get_tmp_dir(), FxGraphCache._get_tmp_dir()
    if not all(isinstance(d, str) for d in dirs):
        raise TypeError(f"torch's cache directories are not paths as strings: {dirs!r}")
    return dirs


def aoti_loader(torch: Any) -> Any:
    """``torch._C._aoti.AOTIModelPackageLoader``, or None where this torch has none."""
    _lookup("aoti-loader", "call")
    return getattr(getattr(getattr(torch, "_C", None), "_aoti", None), "AOTIModelPackageLoader", None)


# The loader's arguments by torch version: (path, model name, run single-threaded, runners, device
# index) from 2.8; fewer before. The first form this torch takes is used.
_AOTI_FORMS = (("model", False, 1, -1), ("model", False), ("model",))


def aoti_open(torch: Any, path: str) -> Any:
    """The loader on the package at ``path``; raises (TypeError, RuntimeError) where it refuses."""
    loader = aoti_loader(torch)
    if loader is None:
        raise RuntimeError(f"torch {torch.__version__} has no AOTInductor loader")
    for form in _AOTI_FORMS:
        try:
            return loader(path, *form)
        except TypeError:  # another signature: try the next
            continue
    raise TypeError(f"torch {torch.__version__}'s AOTInductor loader takes none of the known argument forms")


def aoti_binds_in_place(loader: Any) -> bool:
    """Whether the loader's ``load_constants`` takes ``user_managed`` (torch 2.8+; 2.7's takes three
    arguments and copies the tensors, so an update in place would not be seen)."""
    return "user_managed" in (getattr(loader.load_constants, "__doc__", None) or "")


def aoti_bind(loader: Any, constants: dict[str, Any]) -> None:
    """Make ``constants`` the model's own tensors, in place (``user_managed``): the caller's
    later in-place updates are what the model reads. A loader without that form raises."""
    loader.load_constants(constants, False, True, True)  # use_inactive, check_full_update, user_managed


def aoti_compile(torch: Any, program: Any, package_path: str, configs: dict[str, Any]) -> Any:
    """AOTInductor's package of an exported program (build side: the export route)."""
    _lookup("aoti-compile", "call")
    from torch._inductor import aoti_compile_and_package, config

    # The compile writes its package's metadata into Inductor's global setting in place, and that
    # setting is in every later graph's cache key: given back, so the build's other graphs keep
    # the key a user's process computes.
    metadata = getattr(getattr(config, "aot_inductor", None), "metadata", None)
    before = dict(metadata) if isinstance(metadata, dict) else None
    try:
        return aoti_compile_and_package(program, package_path=package_path, inductor_configs=configs)
    finally:
        if before is not None and isinstance(metadata, dict):
            metadata.clear()
            metadata.update(before)


def keeps_tensor_constants(torch: Any) -> bool:
    """Whether this torch's Inductor can keep every tensor constant out of the code it generates
    (``always_keep_tensor_constants``: without it, 0-dim tensors and 1-D ones of up to 8 elements
    are folded in, and a caller's other values would not be seen; ``joint_graph_constant_folding``
    off)."""
    _lookup("keep-constants", "setting")
    try:
        from torch._inductor import config
    except ImportError:
        return False
    return all(hasattr(config, setting) for setting in KEEP_CONSTANTS)


# The compile's settings, with that check. Inductor's joint-graph constant folding would still fold
# what is computed from single-element tensors alone (``logit_scale.exp()``, a BatchNorm's
# ``num_batches_tracked + 1``) into the code: it is turned off for these packages.
KEEP_CONSTANTS = {"always_keep_tensor_constants": True, "joint_graph_constant_folding": False}


def pytree(torch: Any) -> Any:
    """``torch.utils._pytree``: how an exported program flattens its inputs and outputs."""
    _lookup("pytree", "call")
    import torch.utils._pytree as found

    return found


_HOOKS = ("_forward_pre_hooks", "_forward_hooks", "_backward_pre_hooks", "_backward_hooks")


def module_hooks(module: Any) -> dict[str, dict[int, Any]]:
    """A module's own hooks, by kind (handle id: hook); raises where they are not as expected."""
    return {kind.strip("_"): dict(registered.items()) for kind, registered in zip(_HOOKS, module_hook_dicts(module))}


def module_hook_dicts(module: Any) -> list[dict[int, Any]]:
    """The dicts a module keeps its hooks in, by kind as ``_HOOKS`` lists them."""
    _lookup("module-internals", "read")
    found = []
    for kind in _HOOKS:
        registered = vars(module).get(kind)
        if not isinstance(registered, dict):
            raise TypeError(f"torch.nn.Module.{kind} is a {type(registered).__name__}, not a dict")
        found.append(registered)
    return found


def module_slots(module: Any) -> list[tuple[Any, str, Any]]:
    """(container, name, value) of every submodule, parameter and buffer below ``module``: a call
    that finds each value in its place skips the full check; raises where they are not dicts."""
    _lookup("module-internals", "read")
    slots: list[tuple[Any, str, Any]] = []
    for owner in module.modules():
        for kind in ("_modules", "_parameters", "_buffers"):
            container = vars(owner).get(kind)
            if not isinstance(container, dict):
                raise TypeError(f"torch.nn.Module.{kind} is a {type(container).__name__}, not a dict")
            slots.extend((container, name, value) for name, value in container.items())
    return slots


def has_joint_export(torch: Any) -> bool:
    """Whether this torch can make an exported loss into one graph of the loss and its gradients."""
    _lookup("joint-export", "call")
    try:
        from torch.export import experimental
    except ImportError:
        return False
    return callable(getattr(experimental, "_export_forward_backward", None))


def joint_program(torch: Any, program: Any) -> Any:
    """``program`` (an export whose forward returns ``(loss,)``) as one program that returns the loss,
    then the gradient of each parameter that requires one; raises where this torch has no such pass."""
    _lookup("joint-export", "call")
    from torch.export import experimental

    joint = getattr(experimental, "_export_forward_backward", None)
    if joint is None:
        raise NotImplementedError(f"torch {torch.__version__} has no torch.export.experimental._export_forward_backward")
    with _math_attention_on_cpu(torch, program):
        return joint(program, joint_loss_index=0)


def _math_attention_on_cpu(torch: Any, program: Any) -> Any:
    """Attention by its math kernel while a CPU program's backward is derived: the joint graph of
    the fused CPU kernel (_scaled_dot_product_flash_attention_for_cpu) gives other gradients than
    eager's (torch 2.13: off by 0.1 to 5 on a small transformer), the math kernel's matches. GPU
    programs keep their fused kernels; the build's check compares every gradient either way."""
    import contextlib

    tensors = [*program.state_dict.values(), *getattr(program, "constants", {}).values()]
    if any(getattr(t, "is_cuda", False) for t in tensors):
        return contextlib.nullcontext()
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError:
        return contextlib.nullcontext()
    return sdpa_kernel([SDPBackend.MATH])
