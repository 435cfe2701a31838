"""The rules of docs/architecture.md, checked over hatch_precompile's source with ``ast``: the layering,
no private name of another module, no import cycle (lazy imports included), torch's private
modules and attributes only where pyproject's banned-api rule lets them be, hatchling known only to
the hatch adapter, ``run/`` standard library only at import, our variables read only in
``run/variables.py``, and every exception and warning in ``errors.py`` (one defined elsewhere is
private to its module), none named as torch's.

Each failure names ``file:line``, the rule, and what broke it."""

from __future__ import annotations

import ast
import builtins
import fnmatch
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest
import tomllib

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "hatch_precompile"

# Imports go one way: a module imports its own layer and the layers after it in this list, never one
# before it. The root package (``hatch_precompile/__init__.py``, every module's parent, whose public
# names resolve on first use) is in no layer: importing it is what importing any module does first.
# ``hatch`` (the hatchling adapter) and ``tools`` (the command line) both sit on ``builder``.
LAYERS = ("hatch", "tools", "builder", "child", "run", "protocol", "errors")

# Above every layer, the entry points: modules started by name (``python -m``) and imported by no
# module. ``__main__`` starts the command line; each child's main (``child/*_child.py``: the build's,
# verify's, snoop's) is started by child/supervisor.py and runs builder/ and run/ in the child. They
# may import any layer but the hatchling adapter (a child runs without hatchling).
ENTRY_POINTS = "entry points"
ENTRY_POINT_MODULES = (f"{PACKAGE}.__main__", f"{PACKAGE}.child.*_child")

# The files that may touch torch's private modules and private attributes: the touchpoints' owners
# (run/torch_internals/, and builder/steps/torch_export.py for what only a build calls) and what runs in a build's,
# verify's or snoop's child (child/, and builder/steps/export.py; outside the package, what measures torch from
# outside). pyproject.toml's per-file-ignores for TID251 must name exactly these.
TORCH_INTERNALS_ALLOWED = (
    "hatch_precompile/run/torch_internals/**/*.py",
    "hatch_precompile/builder/steps/torch_export.py",
    "hatch_precompile/child/*.py",
    "hatch_precompile/builder/steps/export.py",
    "tests/**",
    "bench/**",
    "scripts/**",
    "sample_pkg/**",
)


@dataclass(frozen=True)
class Import:
    """One import statement's binding: ``target`` is the module imported from (the submodule when
    ``from pkg import submodule``), ``name`` the name taken from it (None for ``import x``)."""

    source: str
    path: str
    line: int
    target: str
    name: str | None
    lazy: bool


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@cache
def modules(root: Path = ROOT) -> dict[str, Path]:
    return {module_name(p, root): p for p in sorted((root / PACKAGE).rglob("*.py"))}


@cache
def tree(module: str, root: Path = ROOT) -> ast.Module:
    return ast.parse(modules(root)[module].read_text(), str(modules(root)[module]))


def rel(module: str, root: Path = ROOT) -> str:
    return str(modules(root)[module].relative_to(root))


def named_import(node: ast.AST) -> str | None:
    """The module a call imports or looks up by a constant name: ``importlib.import_module("m")``,
    ``__import__("m")``, ``sys.modules.get("m")`` / ``sys.modules["m"]``."""
    if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
        func = ast.unparse(node.func)
        if func in {"importlib.import_module", "import_module", "__import__", "sys.modules.get"}:
            return node.args[0].value if isinstance(node.args[0].value, str) else None
    if isinstance(node, ast.Subscript) and ast.unparse(node.value) == "sys.modules" and isinstance(node.slice, ast.Constant):
        return node.slice.value if isinstance(node.slice.value, str) else None
    return None


def imports(module: str, root: Path = ROOT) -> Iterator[Import]:
    """Every import in ``module``, at any depth (lazy imports in functions included, and imports
    by a constant name: ``importlib.import_module("hatch_precompile.run.load_caches")``)."""
    path = modules(root)[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    top_level = set(map(id, tree(module, root).body))
    for node in ast.walk(tree(module, root)):
        lazy = id(node) not in top_level
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Import(module, rel(module, root), node.lineno, alias.name, None, lazy)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            for alias in node.names:
                submodule = f"{source}.{alias.name}"
                target = submodule if submodule in modules(root) else source
                yield Import(module, rel(module, root), node.lineno, target, alias.name, lazy)
        elif (name := named_import(node)) is not None and name.split(".")[0] == PACKAGE:
            yield Import(module, rel(module, root), node.lineno, name, None, True)


def own(target: str) -> bool:
    return target == PACKAGE or target.startswith(PACKAGE + ".")


def layer(module: str) -> str | None:
    """The layer of ``module`` (its folder under the package, or ENTRY_POINTS); None for the root."""
    parts = module.split(".")
    if len(parts) == 1:
        return None
    return ENTRY_POINTS if any(fnmatch.fnmatchcase(module, entry) for entry in ENTRY_POINT_MODULES) else parts[1]


# --- the layering -----------------------------------------------------------------------------------


def layering_violations(root: Path = ROOT) -> list[str]:
    found = []
    for module in modules(root):
        mine = layer(module)
        for imp in imports(module, root):
            theirs = layer(imp.target) if own(imp.target) else None
            if mine is None or theirs is None:
                continue
            if theirs == ENTRY_POINTS:
                found.append(f"{imp.path}:{imp.line}: layering: imports {imp.target}, an entry point (started by "
                             "module name, imported by no module)")
            elif mine == ENTRY_POINTS:
                if theirs == HATCHLING_LAYER:
                    found.append(f"{imp.path}:{imp.line}: layering: an entry point imports {imp.target}; entry points "
                                 f"import any layer but {HATCHLING_LAYER}/")
            elif LAYERS.index(theirs) < LAYERS.index(mine):
                found.append(f"{imp.path}:{imp.line}: layering: {mine}/ imports {imp.target}, a layer above it "
                             f"(imports go {' -> '.join(LAYERS)})")
    return found


def test_every_module_is_in_a_layer():
    unknown = [rel(m) for m in modules() if layer(m) not in (None, ENTRY_POINTS, *LAYERS)]
    assert not unknown, f"modules in no layer of {LAYERS}: {unknown}; add the folder to LAYERS and docs/architecture.md"


def test_imports_go_one_way():
    found = layering_violations()
    assert not found, "\n".join(found)


def started_by_name(root: Path = ROOT) -> dict[str, str]:
    """Each module a child job starts by name (``supervisor.Job("hatch_precompile....", ...)``): where."""
    found = {}
    for module in modules(root):
        for node in ast.walk(tree(module, root)):
            if (isinstance(node, ast.Call) and ast.unparse(node.func).split(".")[-1] == "Job" and node.args
                    and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
                found[node.args[0].value] = f"{rel(module, root)}:{node.lineno}"
    return found


def test_each_childs_main_is_an_entry_point_that_a_job_starts():
    """The children's mains are entry points because they are started by name: each ``child/*_child.py``
    is started by a job, and each module a job starts exists with a ``main(argv)``."""
    started = started_by_name()
    mains = [m for m in modules() if layer(m) == ENTRY_POINTS and m != f"{PACKAGE}.__main__"]
    assert mains, f"no child's main matches {ENTRY_POINT_MODULES}"
    assert not [m for m in mains if m not in started], "a child's main no job starts: " + ", ".join(
        m for m in mains if m not in started)
    for name, where in started.items():
        assert name in modules(), f"{where}: a job starts {name}, which is no module"
        assert any(isinstance(node, ast.FunctionDef) and node.name == "main" for node in tree(name).body), \
            f"{where}: a job starts {name}, which has no main(argv)"


def test_the_architecture_doc_states_the_layering_checked():
    doc = (ROOT / "docs" / "architecture.md").read_text()
    order = " → ".join(f"`{name}`" for name in LAYERS)
    assert order in doc, f"docs/architecture.md should state the layers checked here, in order: {order}"


# --- private names ------------------------------------------------------------------------------------


def by_place(finding: str) -> tuple[str, int]:
    path, line, _ = finding.split(":", 2)
    return path, int(line)


def private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def module_bindings(module: str, root: Path = ROOT) -> dict[str, str]:
    """The names ``module`` binds to one of our modules, anywhere in it: name -> module."""
    bound = {}
    for node in ast.walk(tree(module, root)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if own(alias.name):
                    bound[alias.asname or alias.name.partition(".")[0]] = alias.asname and alias.name or PACKAGE
        elif isinstance(node, ast.ImportFrom):
            for imp, alias in zip(imports_of(module, node, root), node.names):
                if imp.target in modules(root) and imp.target.endswith("." + alias.name):
                    bound[alias.asname or alias.name] = imp.target
    return bound


def imports_of(module: str, node: ast.ImportFrom, root: Path = ROOT) -> list[Import]:
    return [imp for imp in imports(module, root) if imp.line == node.lineno and imp.name in {a.name for a in node.names}]


def dotted(node: ast.expr) -> list[str] | None:
    """``a.b.c`` as ["a", "b", "c"]; None for anything but names and attributes."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return [node.id, *reversed(parts)]


def attribute_owner(node: ast.Attribute, bound: dict[str, str], root: Path = ROOT) -> str:
    """The module of ours whose name ``node`` reads (``switch._x``, ``hatch_precompile.run.load_caches._x``:
    submodules followed), or "" when it reads no module of ours."""
    parts = dotted(node.value)
    if not parts or parts[0] not in bound:
        return ""
    owner = bound[parts[0]]
    for part in parts[1:]:
        if f"{owner}.{part}" not in modules(root):
            return ""
        owner = f"{owner}.{part}"
    return owner


def private_name_violations(root: Path = ROOT) -> list[str]:
    found = []
    for module in modules(root):
        for imp in imports(module, root):
            if own(imp.target) and imp.target != module:
                names = [imp.name] if imp.name else imp.target.split(".")
                for name in filter(private, names):
                    found.append(f"{imp.path}:{imp.line}: private name: imports {name} from {imp.target}")
        bound = module_bindings(module, root)
        for node in ast.walk(tree(module, root)):
            if isinstance(node, ast.Attribute) and private(node.attr):
                owner = attribute_owner(node, bound, root)
                if owner and owner != module:
                    found.append(f"{rel(module, root)}:{node.lineno}: private name: uses {ast.unparse(node)} "
                                 f"({node.attr} of {owner})")
            elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in {"getattr", "setattr"}
                  and len(node.args) >= 2 and isinstance(node.args[0], ast.Name) and node.args[0].id in bound
                  and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str)
                  and private(node.args[1].value) and bound[node.args[0].id] != module):
                found.append(f"{rel(module, root)}:{node.lineno}: private name: {node.func.id} of {node.args[1].value!r} "
                             f"on {bound[node.args[0].id]}")
    return found


def test_no_module_uses_another_modules_private_names():
    found = private_name_violations()
    assert not found, "\n".join(found)


# --- errors -------------------------------------------------------------------------------------------

ERRORS = f"{PACKAGE}.errors"
BASE_ERROR, BASE_WARNING = "HatchPrecompileError", "PrecompileWarning"
# The names torch.compiler.precompile's error goes by (torch.compiler.PrecompileError, torch 2.14):
# run/steps/shipped_steps.py catches torch's beside ours, and a traceback that shows both should not leave
# a reader asking whose it is. Written out, not read from torch: importing torch takes seconds, too
# slow for a unit test.
TORCH_PRECOMPILE_NAMES = ("PrecompileError",)
BUILTIN_EXCEPTIONS = frozenset(name for name, value in vars(builtins).items()
                               if isinstance(value, type) and issubclass(value, BaseException))


def base_names(node: ast.ClassDef) -> list[str]:
    return [ast.unparse(base).rpartition(".")[2] for base in node.bases]


def exception_classes(root: Path = ROOT) -> list[tuple[str, ast.ClassDef]]:
    """Every class of the package whose bases chain to an exception or a warning, as far as ``ast``
    can tell: a base named ``*Error``, ``*Exception``, ``*Warning``, a builtin exception
    (``Exception``, ``PermissionError``, ``StopIteration``, ...) or a class already found to be one."""
    classes = [(module, node) for module in modules(root) for node in ast.walk(tree(module, root))
               if isinstance(node, ast.ClassDef)]
    known = set(BUILTIN_EXCEPTIONS)
    while True:
        more = {node.name for _, node in classes if node.name not in known and any(
            name in known or name.endswith(("Error", "Exception", "Warning")) for name in base_names(node))}
        if not more:
            return [(module, node) for module, node in classes if node.name in known - BUILTIN_EXCEPTIONS]
        known |= more


def error_violations(root: Path = ROOT) -> list[str]:
    """Every exception and warning of the package is a class in errors.py, once, under its base and
    by a name torch's precompile does not use; one defined elsewhere is its module's own (private);
    errors.py is the standard library only; and each import of one of its names is from errors.py."""
    found = []
    ours = {node.name: node for node in tree(ERRORS, root).body if isinstance(node, ast.ClassDef)} \
        if ERRORS in modules(root) else {}
    for module, node in exception_classes(root):
        where = f"{rel(module, root)}:{node.lineno}: errors:"
        if module != ERRORS:
            if not private(node.name):
                found.append(f"{where} {node.name} is an exception class outside {PACKAGE}/errors.py; move it there, "
                             f"or, if only its module sees it, name it _{node.name}")
            continue
        if ours.get(node.name) is not node:
            found.append(f"{where} {node.name} is defined twice in {PACKAGE}/errors.py; give each a name that says what "
                         "it is")
        if node.name in TORCH_PRECOMPILE_NAMES:
            found.append(f"{where} {node.name} is also torch.compiler's; name ours otherwise (as {BASE_ERROR})")
        seen, todo = set(), base_names(node)
        while todo:  # up its bases, as far as errors.py defines them
            name = todo.pop()
            if name not in seen:
                seen.add(name)
                todo += base_names(ours[name]) if name in ours else []
        if node.name not in (BASE_ERROR, BASE_WARNING) and not seen & {BASE_ERROR, BASE_WARNING}:
            found.append(f"{where} {node.name} derives from neither {BASE_ERROR} nor {BASE_WARNING}")
    for module in modules(root):
        if module == ERRORS:
            found += [f"{imp.path}:{imp.line}: errors: {PACKAGE}/errors.py imports {imp.target}; it is the bottom "
                      "layer, standard library only" for imp in imports(module, root)
                      if imp.target.split(".")[0] not in sys.stdlib_module_names | {"__future__"}]
            continue
        bound = module_bindings(module, root)
        for node in ast.walk(tree(module, root)):
            if isinstance(node, ast.ImportFrom):
                found += [f"{imp.path}:{imp.line}: errors: imports {imp.name} from {imp.target}; import it from {ERRORS}"
                          for imp in imports_of(module, node, root)
                          if imp.name in ours and own(imp.target) and imp.target != ERRORS]
            elif isinstance(node, ast.Attribute) and node.attr in ours:
                owner = attribute_owner(node, bound, root)
                if owner and owner != ERRORS:
                    found.append(f"{rel(module, root)}:{node.lineno}: errors: uses {ast.unparse(node)}; {node.attr} "
                                 f"is {ERRORS}'s")
    return sorted(found, key=by_place)


def test_every_exception_is_in_errors_or_private_to_its_module():
    holds(error_violations())


def test_the_exception_check_finds_every_exception_class():
    """Derived through a chain of our own classes, from a builtin, by name: each is one."""
    names = {node.name for _, node in exception_classes()}
    assert {BASE_ERROR, BASE_WARNING, "CannotCompile", "Untrusted", "StepRefused"} <= names
    assert not names & {"Manifest", "Step", "ExportedStep", "Options"}


# --- cycles ---------------------------------------------------------------------------------------------


def graph(root: Path = ROOT) -> dict[str, dict[str, list[Import]]]:
    """module -> module it imports -> the imports that do, lazy ones included. An import of a
    package's ``__init__`` by a module below it is left out: Python runs it first anyway."""
    edges: dict[str, dict[str, list[Import]]] = {m: {} for m in modules(root)}
    for module in modules(root):
        for imp in imports(module, root):
            if imp.target in modules(root) and imp.target != module and not module.startswith(imp.target + "."):
                edges[module].setdefault(imp.target, []).append(imp)
    return edges


def cycles(edges: dict[str, dict[str, list[Import]]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for succ in edges[node]:
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in edges:
        if node not in index:
            visit(node)
    return sorted(found)


def test_no_import_cycle_lazy_imports_included():
    edges = graph()
    found = []
    for component in cycles(edges):
        lines = [f"{imp.path}:{imp.line}: import cycle: imports {imp.target}{' (lazily)' if imp.lazy else ''}"
                 for module in component for target, imps in edges[module].items() if target in component
                 for imp in imps]
        found.append(f"cycle among {', '.join(component)}:\n  " + "\n  ".join(lines))
    assert not found, "\n".join(found)


def test_the_cycle_check_finds_a_cycle():
    edges = {"a": {"b": []}, "b": {"c": []}, "c": {"a": []}, "d": {"a": []}}
    assert cycles(edges) == [["a", "b", "c"]]


# --- torch's internals ------------------------------------------------------------------------------


def pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def banned() -> list[str]:
    return list(pyproject()["tool"]["ruff"]["lint"]["flake8-tidy-imports"]["banned-api"])


def allowed(path: str) -> bool:
    """Whether ``path`` matches a pattern as ruff reads it: ``**/`` is any number of folders, none included."""
    return any(fnmatch.fnmatch(path, pattern) or fnmatch.fnmatch(path, pattern.replace("**/", ""))
               for pattern in TORCH_INTERNALS_ALLOWED)


def torch_private_modules(root: Path = ROOT) -> dict[str, list[str]]:
    """Each private torch module product code names (``torch._x``, ``torch.utils._pytree``), up to
    its first private part: where, as ``file:line``. Imports and attribute paths off ``torch``."""
    used: dict[str, list[str]] = {}
    for module in modules(root):
        names = []
        for node in ast.walk(tree(module, root)):
            if isinstance(node, ast.Import):
                names += [(node.lineno, alias.name.split(".")) for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                names += [(node.lineno, [*node.module.split("."), alias.name]) for alias in node.names]
            elif isinstance(node, ast.Attribute):
                names.append((node.lineno, dotted(node) or []))
            elif (name := named_import(node)) is not None:
                names.append((node.lineno, name.split(".")))
        for line, parts in names:
            if not parts or parts[0] != "torch":
                continue
            for i, part in enumerate(parts):
                if private(part):
                    used.setdefault(".".join(parts[: i + 1]), []).append(f"{rel(module, root)}:{line}")
                    break
    return used


def test_the_banned_api_rule_covers_every_private_torch_module_used():
    found = []
    for name, where in sorted(torch_private_modules().items()):
        if not any(name == ban or name.startswith(ban + ".") for ban in banned()):
            found.append(f"{where[0]}: torch internals: {name} is not in pyproject's banned-api list "
                         f"(also at {', '.join(where[1:]) or 'nowhere else'})")
    assert not found, "\n".join(found)


def test_only_the_designs_files_are_exempt_from_the_banned_api_rule():
    ignores = pyproject()["tool"]["ruff"]["lint"]["per-file-ignores"]
    exempt = {path for path, rules in ignores.items() if "TID251" in rules}
    lines = (ROOT / "pyproject.toml").read_text().splitlines()
    found = []
    for path in sorted(exempt - set(TORCH_INTERNALS_ALLOWED)):
        line = next(i for i, text in enumerate(lines, 1) if text.startswith(f'"{path}"'))
        uses = [f"{name} at {where}" for name, places in torch_private_modules().items() for where in places
                if fnmatch.fnmatch(where.partition(":")[0], path)]
        found.append(f"pyproject.toml:{line}: torch internals: {path} is exempt from TID251, but it is neither "
                     f"run/torch_internals/ nor a child's (docs/architecture.md); it uses {', '.join(uses) or 'none'}")
    missing = sorted(set(TORCH_INTERNALS_ALLOWED) - exempt)
    assert not found and not missing, "\n".join(found + [f"pyproject.toml: {path} is not exempt from TID251 "
                                                         "though the design allows it" for path in missing])


def torch_private_modules_by_name(root: Path = ROOT) -> list[str]:
    """``import_module("torch._x")`` and the like, which ruff's banned-api rule does not see, outside
    the files allowed to touch torch's internals."""
    found = []
    for module in modules(root):
        if allowed(rel(module, root)):
            continue
        for node in ast.walk(tree(module, root)):
            name = named_import(node)
            if name and name.split(".")[0] == "torch" and any(map(private, name.split("."))):
                found.append(f"{rel(module, root)}:{node.lineno}: torch internals: {ast.unparse(node)} names a private "
                             "torch module; go through run/torch_internals/")
    return found


def test_torch_private_modules_named_by_string_only_where_internals_are_allowed():
    found = torch_private_modules_by_name()
    assert not found, "\n".join(found)


@cache
def module_private_attributes() -> frozenset[str]:
    """The private attributes of every ``torch.nn.Module`` (``_modules``, ``_parameters``,
    ``_forward_hooks``, ...), as this torch has them."""
    torch = pytest.importorskip("torch")
    return frozenset(name for name in vars(torch.nn.Module()) if private(name))


def own_state(node: ast.Attribute) -> bool:
    """``self._modules`` in a class of ours is that class's own attribute, not torch's."""
    return isinstance(node.value, ast.Name) and node.value.id in {"self", "cls"}


def torch_private_attribute_uses(root: Path = ROOT) -> list[str]:
    found = []
    names = module_private_attributes()
    for module in modules(root):
        if allowed(rel(module, root)):
            continue
        for node in ast.walk(tree(module, root)):
            if isinstance(node, ast.Attribute) and node.attr in names and not own_state(node):
                found.append(f"{rel(module, root)}:{node.lineno}: torch internals: {ast.unparse(node)} is a private "
                             "attribute of torch.nn.Module; go through run/torch_internals/")
            elif isinstance(node, ast.Constant) and node.value in names:
                found.append(f"{rel(module, root)}:{node.lineno}: torch internals: {node.value!r} names a private "
                             "attribute of torch.nn.Module; go through run/torch_internals/")
    return sorted(found, key=by_place)


def test_torch_modules_private_attributes_only_where_internals_are_allowed():
    found = torch_private_attribute_uses()
    assert not found, "\n".join(found)


def test_the_private_attribute_check_knows_torchs_module_state():
    assert {"_modules", "_parameters", "_buffers", "_forward_hooks"} <= module_private_attributes()


# --- hatchling, run/'s imports, our variables ------------------------------------------------------

def holds(found: list[str]) -> None:
    """The rule holds: else each place that breaks it, one a line."""
    assert not found, "\n".join(found)


# Only the hatch adapter knows hatchling: the code below it is backend-neutral (scikit-build-core's
# hatch/ is the model), so `warm`, `bake` and verify run it without hatchling installed.
HATCHLING_LAYER = "hatch"


def hatchling_imports(root: Path = ROOT) -> list[str]:
    """Every import of hatchling, lazy ones included, outside the hatch adapter."""
    found = []
    for module in modules(root):
        if layer(module) == HATCHLING_LAYER:
            continue
        for imp in imports(module, root):
            if imp.target.split(".")[0] == "hatchling":
                found.append(f"{imp.path}:{imp.line}: hatchling: imports {imp.target}; only the modules under "
                             f"{PACKAGE}/{HATCHLING_LAYER}/ know hatchling")
    return found


def test_only_the_hatch_adapter_imports_hatchling():
    holds(hatchling_imports())


# What run/ may import when it is imported (every `import pkg` pays for it): the standard library,
# the contract, the errors and run/ itself. torch and triton are imported inside functions, when
# there is something to load.
RUN_IMPORTS_ALLOWED = ("hatch_precompile.protocol", "hatch_precompile.errors", "hatch_precompile.run")


def import_time_nodes(node: ast.AST) -> Iterator[ast.AST]:
    """The nodes of ``node`` that run when its module is imported: not a function's body, nor an
    ``if TYPE_CHECKING:`` block."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue
        if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
            continue
        yield child
        yield from import_time_nodes(child)


def run_import_time_imports(root: Path = ROOT) -> list[str]:
    found = []
    for module in modules(root):
        if layer(module) != "run":
            continue
        lines = {node.lineno for node in import_time_nodes(tree(module, root)) if isinstance(node, (ast.Import, ast.ImportFrom))}
        for imp in imports(module, root):
            if imp.line not in lines or imp.target.split(".")[0] in sys.stdlib_module_names | {"__future__"}:
                continue
            if not any(imp.target == ok or imp.target.startswith(ok + ".") for ok in RUN_IMPORTS_ALLOWED):
                found.append(f"{imp.path}:{imp.line}: run/ imports: {imp.target} at import time; run/ imports only "
                             f"the standard library, {', '.join(RUN_IMPORTS_ALLOWED)} when imported (torch and "
                             "triton inside the functions that need them)")
    return found


def test_run_imports_only_the_standard_library_and_the_contract_at_import_time():
    holds(run_import_time_imports())


VARIABLE_PREFIXES = ("HATCH_PRECOMPILE", "PRECOMPILE")  # ours: HATCH_PRECOMPILE_*, PRECOMPILE, PRECOMPILE_<NAME>
VARIABLES_READER = "hatch_precompile/run/variables.py"


def variable_constants(root: Path = ROOT) -> dict[str, str]:
    """The module-level constants naming one of our variables (``PACKAGE_VAR = "HATCH_PRECOMPILE_PACKAGE"``)."""
    found = {}
    for module in modules(root):
        for node in tree(module, root).body:
            if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
                    and isinstance(node.value.value, str) and node.value.value.startswith(VARIABLE_PREFIXES)):
                found.update({target.id: node.value.value for target in node.targets if isinstance(target, ast.Name)})
    return found


def variable_reads(root: Path = ROOT) -> list[str]:
    """Each read of one of our variables (``os.environ.get``/``[...]``/``in os.environ``,
    ``os.getenv``, or the same on an ``environ``/``env`` mapping), by a literal name, an f-string
    starting with one, or a constant naming one, outside run/variables.py. Writes (a child's
    environment set up) are not reads."""
    constants = variable_constants(root)

    def ours(node: ast.expr) -> bool:
        if isinstance(node, ast.Constant):
            return isinstance(node.value, str) and node.value.startswith(VARIABLE_PREFIXES)
        if isinstance(node, ast.JoinedStr):
            return bool(node.values) and ours(node.values[0])
        return (isinstance(node, ast.Name) and node.id in constants
                or isinstance(node, ast.Attribute) and node.attr in constants)

    def environment(node: ast.expr) -> bool:
        return ast.unparse(node).split(".")[-1] in {"environ", "env", "environment"}

    found = []
    for module in modules(root):
        if rel(module, root) == VARIABLES_READER:
            continue
        for node in ast.walk(tree(module, root)):
            read = None
            if isinstance(node, ast.Call) and node.args and ours(node.args[0]):
                func = node.func
                if (isinstance(func, ast.Attribute) and func.attr in {"get", "pop"} and environment(func.value)
                        or ast.unparse(func) in {"os.getenv", "getenv"}):
                    read = node
            elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) and environment(node.value) \
                    and ours(node.slice):
                read = node
            elif (isinstance(node, ast.Compare) and ours(node.left) and any(isinstance(op, (ast.In, ast.NotIn))
                  for op in node.ops) and any(environment(c) for c in node.comparators)):
                read = node
            if read is not None:
                found.append(f"{rel(module, root)}:{node.lineno}: variables: {ast.unparse(read)} reads one of our "
                             f"variables; read it through {VARIABLES_READER}")
    return sorted(found, key=by_place)


def test_our_variables_are_read_only_in_run_variables():
    holds(variable_reads())


# --- each check finds what it is for ---------------------------------------------------------------


def test_each_check_reports_a_broken_rule_with_its_place(tmp_path):
    """A made-up package that breaks every rule once: each check names the file, the line and the rule."""
    files = {
        "__init__.py": "",
        "errors.py": ("import torch\n\n\nclass HatchPrecompileError(Exception):\n    pass\n\n\n"
                      "class PrecompileError(HatchPrecompileError):\n    pass\n\n\nclass Stray(ValueError):\n    pass\n"
                      "\n\nclass Stray(HatchPrecompileError):\n    pass\n"),
        "protocol/__init__.py": "",
        "protocol/names.py": ("import importlib\n\nimportlib.import_module('hatch_precompile.run.switch')\n"
                              "NO_STEPS_VAR = 'HATCH_PRECOMPILE_NO_STEPS'\n"),
        "run/__init__.py": "",
        "run/switch.py": "_secret = 1\n\ndef f():\n    from hatch_precompile.run import load_caches\n",
        "run/load_caches.py": ("from hatch_precompile.run import switch\nfrom hatch_precompile.run.switch import _secret\n"
                          "import torch.utils._pytree\n\ndef g(m):\n    return switch._secret, m._buffers, self_ok()\n"
                          "\n\ndef h():\n    import sys\n    return sys.modules.get('torch._inductor.config')\n"),
        "run/variables.py": "import os\n\nos.environ.get('HATCH_PRECOMPILE_DEBUG')\n",
        "run/lazy.py": ("import json\nimport torch\nfrom hatch_precompile import errors\n\n\ndef f():\n"
                        "    import triton\n"),
        "builder/__init__.py": "",
        "builder/steps/step_check.py": ("from hatch_precompile import errors\nfrom hatch_precompile.run import switch\n"
                                "from hatch_precompile.run.lazy import HatchPrecompileError\n\n\n"
                                "class Mismatch(errors.HatchPrecompileError, AssertionError):\n    pass\n\n\n"
                                "class _Retry(Exception):\n    pass\n\n\ndef f():\n    class Local(Mismatch):\n"
                                "        pass\n    return switch.HatchPrecompileError, HatchPrecompileError, Local\n"),
        "builder/workload_run.py": "from hatch_precompile.child import build_child\n",
        "child/__init__.py": "",
        "child/build_child.py": "from hatch_precompile.builder.sets import artifact_layout\nfrom hatch_precompile.hatch import hooks\n",
        "hatch/__init__.py": "",
        "hatch/hooks.py": "from hatchling.plugin import hookimpl\n",
        "builder/sets/artifact_layout.py": ("import os\n\nfrom hatch_precompile.protocol import names\n\n\ndef f(env):\n"
                             "    from hatchling.builders import wheel\n"
                             "    return os.getenv('PRECOMPILE'), env[names.NO_STEPS_VAR], os.environ.get(f'PRECOMPILE_{f}')\n"
                             "\n\ndef g():\n    os.environ[NO_STEPS_VAR] = '1'\n"),
    }
    for name, text in files.items():
        (tmp_path / PACKAGE / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / PACKAGE / name).write_text(text)
    assert layering_violations(tmp_path) == [
        "hatch_precompile/builder/workload_run.py:1: layering: imports hatch_precompile.child.build_child, an entry point "
        "(started by module name, imported by no module)",
        "hatch_precompile/child/build_child.py:2: layering: an entry point imports hatch_precompile.hatch.hooks; entry "
        "points import any layer but hatch/",
        "hatch_precompile/protocol/names.py:3: layering: protocol/ imports hatch_precompile.run.switch, a layer above it "
        f"(imports go {' -> '.join(LAYERS)})"]
    assert private_name_violations(tmp_path) == [
        "hatch_precompile/run/load_caches.py:2: private name: imports _secret from hatch_precompile.run.switch",
        "hatch_precompile/run/load_caches.py:6: private name: uses switch._secret (_secret of hatch_precompile.run.switch)"]
    assert cycles(graph(tmp_path)) == [["hatch_precompile.run.load_caches", "hatch_precompile.run.switch"]]
    assert sorted(torch_private_modules(tmp_path)) == ["torch._inductor", "torch.utils._pytree"]
    assert torch_private_modules_by_name(tmp_path) == [
        "hatch_precompile/run/load_caches.py:11: torch internals: sys.modules.get('torch._inductor.config') names a "
        "private torch module; go through run/torch_internals/"]
    assert torch_private_attribute_uses(tmp_path) == [
        "hatch_precompile/run/load_caches.py:6: torch internals: m._buffers is a private attribute of torch.nn.Module; "
        "go through run/torch_internals/"]
    assert hatchling_imports(tmp_path) == [
        "hatch_precompile/builder/sets/artifact_layout.py:7: hatchling: imports hatchling.builders; only the modules under "
        "hatch_precompile/hatch/ know hatchling"]
    assert run_import_time_imports(tmp_path) == [
        "hatch_precompile/run/lazy.py:2: run/ imports: torch at import time; run/ imports only the standard library, "
        f"{', '.join(RUN_IMPORTS_ALLOWED)} when imported (torch and triton inside the functions that need them)",
        "hatch_precompile/run/load_caches.py:3: run/ imports: torch.utils._pytree at import time; run/ imports only the "
        f"standard library, {', '.join(RUN_IMPORTS_ALLOWED)} when imported (torch and triton inside the functions "
        "that need them)"]
    outside = "is an exception class outside hatch_precompile/errors.py; move it there, or, if only its module sees it"
    assert error_violations(tmp_path) == [
        "hatch_precompile/builder/steps/step_check.py:3: errors: imports HatchPrecompileError from hatch_precompile.run.lazy; "
        "import it from hatch_precompile.errors",
        f"hatch_precompile/builder/steps/step_check.py:6: errors: Mismatch {outside}, name it _Mismatch",
        f"hatch_precompile/builder/steps/step_check.py:15: errors: Local {outside}, name it _Local",
        "hatch_precompile/builder/steps/step_check.py:17: errors: uses switch.HatchPrecompileError; HatchPrecompileError is "
        "hatch_precompile.errors's",
        "hatch_precompile/errors.py:1: errors: hatch_precompile/errors.py imports torch; it is the bottom layer, "
        "standard library only",
        "hatch_precompile/errors.py:8: errors: PrecompileError is also torch.compiler's; name ours otherwise (as "
        "HatchPrecompileError)",
        "hatch_precompile/errors.py:12: errors: Stray is defined twice in hatch_precompile/errors.py; give each a name "
        "that says what it is",
        "hatch_precompile/errors.py:12: errors: Stray derives from neither HatchPrecompileError nor PrecompileWarning"]
    reads = "read it through hatch_precompile/run/variables.py"
    assert variable_reads(tmp_path) == [
        f"hatch_precompile/builder/sets/artifact_layout.py:8: variables: os.getenv('PRECOMPILE') reads one of our variables; {reads}",
        f"hatch_precompile/builder/sets/artifact_layout.py:8: variables: env[names.NO_STEPS_VAR] reads one of our variables; {reads}",
        f"hatch_precompile/builder/sets/artifact_layout.py:8: variables: os.environ.get(f'PRECOMPILE_{{f}}') reads one of our "
        f"variables; {reads}"]
