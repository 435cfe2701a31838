"""Generated modules shipped with a header that imports only what their code calls
(builder/caches/lean_headers.py), from kernel paths the build's child proved (child/kernel_bindings.py)."""

from __future__ import annotations

import functools

from hatch_precompile.builder.caches import lean_headers
from hatch_precompile.child import kernel_bindings

HEADER = """# AOT ID: ['0_forward']
from ctypes import c_void_p, c_long, c_int
import torch
import math
from torch._inductor.hooks import run_intermediate_hooks
from torch._inductor.utils import maybe_profile
from torch._inductor.codegen.memory_planning import _align as align
from torch import device, empty_strided
from torch._inductor.async_compile import AsyncCompile
from torch._inductor.select_algorithm import extern_kernels

aten = torch.ops.aten
async_compile = AsyncCompile()
"""

CALL = """
def call(args):
    primals_1, primals_2, primals_3 = args
    buf0 = empty_strided((4, 8), (8, 1), dtype=torch.float32)
    extern_kernels.addmm(primals_3, primals_1, primals_2, alpha=1, beta=1, out=buf0)
    buf1 = empty_strided((4, 8), (8, 1), dtype=torch.float32)
    extern_kernels.mm(buf0, primals_2, out=buf1)
    return (buf1,)
"""

PROVEN = {"mm": "torch.mm", "addmm": "torch.addmm", "bmm": "torch.bmm"}


def test_the_header_binds_only_what_the_code_calls_one_line_each():
    source = HEADER + CALL
    lean = lean_headers.lean(source, PROVEN)
    assert lean is not None
    assert len(lean.split("\n")) == len(source.split("\n"))  # torch's line map still points at the code
    assert lean_headers.SELECT not in lean and lean_headers.ALIGN not in lean
    assert "SimpleNamespace(addmm=torch.addmm, mm=torch.mm)" in lean and "bmm" not in lean
    assert lean.split("\n")[:4] == source.split("\n")[:4]


def test_the_lean_module_computes_what_torchs_does():
    import torch

    def run(source: str) -> torch.Tensor:
        scope: dict = {}
        exec(compile(source, "<generated>", "exec"), scope)
        torch.manual_seed(0)
        a, b, c = torch.randn(4, 8), torch.randn(8, 8), torch.randn(8)
        return scope["call"]([a, b, c])[0]

    assert torch.equal(run(lean_headers.lean(HEADER + CALL, PROVEN)), run(HEADER + CALL))


def test_a_module_it_cannot_show_the_same_is_left_as_torch_wrote_it():
    source = HEADER + CALL
    unproven = {"mm": "torch.mm"}  # addmm has no proven path: the import stays, align still goes
    lean = lean_headers.lean(source, unproven)
    assert lean is not None and lean_headers.SELECT in lean and lean_headers.ALIGN not in lean
    bare = source + "\nkernels = extern_kernels\n"  # read other than by a name: the import stays
    assert lean_headers.SELECT in lean_headers.lean(bare, PROVEN)
    aligned = source + "\nsize = align(12)\n"  # align called: its import stays
    assert lean_headers.ALIGN in lean_headers.lean(aligned, PROVEN)
    assert lean_headers.lean(source.replace("import math", "import triton"), PROVEN) is None  # a GPU's module
    assert lean_headers.lean(source, {"mm": "torch.mm", "addmm": "os.system('x')"}) == lean  # not a path from torch
    untouched = "import torch\nx = 1\n"
    assert lean_headers.lean(untouched, PROVEN) is None


def test_only_the_code_caches_modules_change_and_they_can_be_put_back(tmp_path):
    generated = tmp_path / "ab" / "cabc.py"
    generated.parent.mkdir()
    generated.write_text(HEADER + CALL)
    other = tmp_path / "fxgraph" / "xy" / "entry.py"  # not a generated module's place
    other.parent.mkdir(parents=True)
    other.write_text(HEADER + CALL)
    before = lean_headers.apply(tmp_path, PROVEN)
    assert list(before) == [generated] and lean_headers.SELECT not in generated.read_text()
    assert other.read_text() == HEADER + CALL
    lean_headers.restore(before)
    assert generated.read_text() == HEADER + CALL
    assert lean_headers.apply(tmp_path, None) == {generated: HEADER + CALL}  # align goes without any path
    lean_headers.restore({generated: HEADER + CALL})


def test_each_proven_path_gives_the_very_kernel_registered():
    import torch
    import torch._inductor.lowering  # noqa: F401  (registers the extern kernels, as a compile does)
    from torch._inductor.select_algorithm import extern_kernels

    proven = kernel_bindings.proven()
    assert proven["mm"] == "torch.mm" and proven["addmm"] == "torch.addmm"
    for name, path in proven.items():
        assert functools.reduce(getattr, path.split(".")[1:], torch) is getattr(extern_kernels, name), name
    assert "bias_addmm" not in proven  # a function of Inductor's own: no path from torch gives it
