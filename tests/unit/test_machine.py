"""What the kernels need of the user's machine, in this process: CPU features, libraries, the
compiler that stands in, the Inductor settings a set brings, the wheel tag. (The same end to end,
on real wheels, is in test_portable.py.)"""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import pytest

from hatch_precompile.builder.sets import elf, isa
from hatch_precompile.errors import ElfUnreadable, MissingTool
from hatch_precompile.protocol import DYNAMIC_THREADS_VAR, Manifest
from hatch_precompile.run.caches import cache_keys_as_built, isa_probes, relocate, warm_shortcuts
from hatch_precompile.run.sets import environment_key, machine
from unit.test_install import assert_skipped, ship

LINUX = sys.platform.startswith("linux")
needs_linux = pytest.mark.skipif(not LINUX, reason="reads /proc/cpuinfo and ELF symbol versions")


# -- CPU features ------------------------------------------------------------------------------


def test_cpu_features_are_what_every_cpu_has(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(
        "processor\t: 0\nflags\t\t: fpu sse2 avx2 avx512f\n\n"
        "processor\t: 1\nflags\t\t: fpu sse2 avx2\n\n"  # a core without avx512f: kernels may move there
    )
    assert machine.cpu_features(cpuinfo) == {"fpu", "sse2", "avx2"}
    assert machine.cpu_features(tmp_path / "missing") is None
    assert machine.missing_features(["avx2", "AVX512F"], machine.cpu_features(cpuinfo)) == ["AVX512F"]
    assert machine.missing_features([], None) == [] and machine.missing_features(["avx2"], None) is None


def a_feature_this_cpu_lacks() -> str:
    have = machine.cpu_features() or frozenset()
    return next(f for f in ("avx10_2", "xop", "fma4", "avx512_4fmaps", "sve2") if f not in have)


@needs_linux
def test_a_set_claiming_a_feature_this_cpu_lacks_is_refused_before_any_file(tmp_path, monkeypatch, env_here, cache):
    lacking = a_feature_this_cpu_lacks()
    for target in ("portable", "native"):
        package, _ = ship(tmp_path / target, monkeypatch, env_here,
                          manifest={"cpu_target": target, "cpu_features": ["sse2", lacking]})
        reason = assert_skipped(package, cache, f"its kernels may use CPU features this CPU lacks: {lacking}")
        assert "sse2" not in reason.split("lacks: ")[1]


def test_unreadable_cpu_features_refuse_native_but_not_portable_sets(tmp_path, monkeypatch, env_here, cache):
    # A platform without /proc/cpuinfo, simulated: a portable set's ISA is the one Inductor's own
    # probe picked on this CPU (its flags name the kernels), a native one may use anything.
    monkeypatch.setattr(machine, "CPUINFO", tmp_path / "no-cpuinfo")
    machine.cpu_features.cache_clear()
    try:
        package, _ = ship(tmp_path / "native", monkeypatch, env_here,
                          manifest={"cpu_target": "native", "cpu_features": ["avx2"]})
        assert_skipped(package, cache, "built with -march=native), and this machine's CPU features cannot be read")
        package, _ = ship(tmp_path / "portable", monkeypatch, env_here,
                          manifest={"cpu_target": "portable", "cpu_features": ["avx2"]})
        from hatch_precompile.run import load_caches

        assert load_caches.load(package).loaded
    finally:
        machine.cpu_features.cache_clear()


# -- libraries -----------------------------------------------------------------------------------


@needs_linux
def test_libraries_are_asked_of_the_dynamic_linker():
    import torch  # noqa: F401  (its libraries are loaded, as in every process that loads kernels)

    assert machine.missing_libraries({"libc.so.6": {"GLIBC_2.2.5": "malloc"}, "libtorch_cpu.so": {}}) == []
    assert machine.missing_libraries({"libstdc++.so.6": {"GLIBCXX_99.0": "_ZdlPv"}}) == ["libstdc++.so.6 GLIBCXX_99.0"]
    assert machine.missing_libraries({"libnot-there.so.7": {}}) == ["libnot-there.so.7 (not found)"]


@needs_linux
@pytest.mark.parametrize(
    ("libraries", "reason"),
    [
        ({"libstdc++.so.6": {"GLIBCXX_99.0": "_ZdlPv"}}, "need system libraries this machine lacks: libstdc++.so.6 GLIBCXX_99.0"),
        ({"libgomp-not-here.so.1": {}}, "need system libraries this machine lacks: libgomp-not-here.so.1 (not found)"),
    ],
)
def test_a_set_needing_a_missing_library_is_refused(tmp_path, monkeypatch, env_here, cache, libraries, reason):
    package, _ = ship(tmp_path, monkeypatch, env_here, manifest={"libraries": libraries})
    assert_skipped(package, cache, reason)


@needs_linux
def test_needs_are_read_from_real_elf_files():
    import torch

    found = elf.needs(Path(torch.__file__).parent / "lib" / "libtorch_cpu.so")
    assert "libc.so.6" in found and any(v.startswith("GLIBC_") for v in found["libc.so.6"])
    assert all(isinstance(symbol, str) and symbol for versions in found.values() for symbol in versions.values())
    assert machine.missing_libraries(found) == []


def test_not_elf_is_told_apart(tmp_path):
    (tmp_path / "x.so").write_bytes(b"\x7fELF but nothing else")
    assert elf.is_elf(tmp_path / "x.so")
    with pytest.raises(ElfUnreadable):
        elf.needs(tmp_path / "x.so")
    (tmp_path / "y.cpp").write_text("int x;")
    assert not elf.is_elf(tmp_path / "y.cpp")


# -- the wheel tag -------------------------------------------------------------------------------

KERNEL_NEEDS = {
    "libgomp.so.1": {"GOMP_4.0": "GOMP_parallel"}, "libtorch_cpu.so": {},
    "libstdc++.so.6": {"GLIBCXX_3.4.21": "_ZNSt7__cxx1119basic_ostringstreamIcSt11char_traitsIcESaIcEED1Ev",
                       "CXXABI_1.3.9": "_ZdlPvm"},
    "libc.so.6": {"GLIBC_2.14": "memcpy"},
}
TORCH_SHIPS = {"libgomp.so.1", "libtorch_cpu.so", "libc10.so", "libtorch.so"}


def test_platform_tag_follows_auditwheels_policy():
    # GLIBCXX_3.4.21 is gcc 5's: past manylinux2014 (3.4.19), within manylinux_2_24. What torch
    # itself ships (libgomp.so.1, libtorch_cpu.so) comes with the torch the key demands.
    assert elf.platform_tag(KERNEL_NEEDS, TORCH_SHIPS, "x86_64")[0] == "manylinux_2_24_x86_64"
    newer = dict(KERNEL_NEEDS, **{"libc.so.6": {"GLIBC_2.34": "pthread_create"}})
    assert elf.platform_tag(newer, TORCH_SHIPS, "x86_64")[0] == "manylinux_2_34_x86_64"
    tag, why = elf.platform_tag(KERNEL_NEEDS, TORCH_SHIPS - {"libgomp.so.1"}, "x86_64")
    assert tag is None and why == "libgomp.so.1 is neither allowed by manylinux nor shipped with torch"
    assert elf.platform_tag({"libc.so.6": {"GLIBC_PRIVATE": "x"}}, set(), "x86_64")[0] is None


def test_without_auditwheel_tagging_is_refused_naming_the_extra(monkeypatch):
    """Users' installs carry no auditwheel: `warm` records no tag, `bake` stops at once (the hook takes
    the platform's own tag: test_build.py)."""
    import importlib.util

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "auditwheel" else find_spec(name, *a))
    assert elf.platform_tag(KERNEL_NEEDS, TORCH_SHIPS, "x86_64") == (
        None, "auditwheel is not installed (hatch-precompile[publish])")
    with pytest.raises(MissingTool) as raised:
        elf.require_publishing_tools("build hook `precompile`: ")
    assert str(raised.value) == (
        "build hook `precompile`: the wheel's manylinux tag needs auditwheel's policies, and auditwheel is not "
        "installed here: install hatch-precompile's publishing tools with: pip install 'hatch-precompile[publish]'")
    assert raised.value.exit_code == 2
    monkeypatch.undo()
    elf.require_publishing_tools()  # the test extra installs it


def test_publishing_tools_are_an_extra_and_the_hooks_dependencies_not_a_users():
    import tomllib

    project = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())["project"]
    assert project["optional-dependencies"]["publish"] == list(elf.PUBLISH_REQUIREMENTS)
    assert set(elf.PUBLISH_REQUIREMENTS) <= set(project["optional-dependencies"]["test"])
    runtime = {d.split(">")[0].split("=")[0] for d in project["dependencies"]}
    assert runtime == {"packaging", "tomlkit", "pyelftools"}  # load() needs none; users' commands these


def test_the_build_hook_asks_for_the_publishing_tools_when_it_precompiles(tmp_path, monkeypatch):
    """Through hatchling itself, as a frontend asks it: get_requires_for_build_wheel."""
    import hatchling.build

    (tmp_path / "tiny").mkdir()
    (tmp_path / "tiny" / "__init__.py").write_text("")
    (tmp_path / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["hatchling", "hatch-precompile"]\nbuild-backend = "hatchling.build"\n'
        '[project]\nname = "tiny"\nversion = "1.0"\ndependencies = ["torch>=2.7"]\n'
        '[tool.hatch.build.hooks.precompile]\nworkload = "tiny.work:workload"\n')
    monkeypatch.chdir(tmp_path)
    assert set(elf.PUBLISH_REQUIREMENTS) <= set(hatchling.build.get_requires_for_build_wheel())
    monkeypatch.setenv("PRECOMPILE", "0")
    assert hatchling.build.get_requires_for_build_wheel() == []
    # Without isolation and without the tools the build goes on with this platform's own tag:
    # test_build.py's test_a_build_without_isolation_or_auditwheel_takes_this_platforms_tag.


def test_the_wheel_takes_the_least_compatible_sets_tag():
    sets = [{"tag": "manylinux_2_24_x86_64", "why": "a"}, {"tag": "manylinux_2_34_x86_64", "why": "b"}]
    assert elf.wheel_platform(sets) == ("manylinux_2_34_x86_64", "b")
    assert elf.wheel_platform([*sets, {"tag": None, "why": "libfoo.so is neither ..."}]) == (None, "libfoo.so is neither ...")


# -- what the compiler may use -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("macro", "name"),
    [
        ("__AVX512F__=1", "avx512f"), ("__AVX512VNNI__=1", "avx512_vnni"), ("__SSE3__=1", "pni"),
        ("__LZCNT__=1", "abm"), ("__SHA__=1", "sha_ni"), ("__AMX_TILE__=1", "amx_tile"),
        ("__GCC_HAVE_SYNC_COMPARE_AND_SWAP_16=1", "cx16"), ("__ARM_FEATURE_SVE=1", "sve"),
        ("__ARM_FEATURE_SVE_BITS=256", None), ("__BIGGEST_ALIGNMENT__=64", None), ("__znver4__=1", None),
        ("__tune_znver4__=1", None), ("__FP_FAST_FMA=1", None), ("__SHSTK__=1", None), ("__RDSEED__=1", None), ("__SOMETHING_NEW__=1", "?__SOMETHING_NEW__"),
        ("__ARM_FEATURE_FUTURE=1", "?__ARM_FEATURE_FUTURE"),
    ],
)
def test_feature_names_are_cpuinfos_and_unknown_ones_are_never_trusted(macro, name):
    assert isa.feature_name(macro) == name


def test_a_portable_compile_drops_native_but_keeps_the_isa():
    flags = isa.CompileFlags(portable=True)
    command = "g++ i.cpp -O3 -march=native -mtune=native -fopenmp -mavx2 -mfma -march=native-ish -o o.so"
    assert flags.seen(command) == "g++ i.cpp -O3   -fopenmp -mavx2 -mfma -march=native-ish -o o.so"
    assert flags.flag_sets == {("-mavx2", "-mfma", "-march=native-ish")}
    kept = isa.CompileFlags(portable=False)
    assert kept.seen(command) == command and ("-march=native", "-mtune=native", "-mavx2", "-mfma",
                                              "-march=native-ish") in kept.flag_sets
    assert kept.target == "native" and flags.target == "portable"
    assert isa.CompileFlags(portable=True).target == "native", "portable only once compiles went through it"


@needs_linux
@pytest.mark.skipif(environment_key.compiler_version("g++").startswith("unavailable"), reason="needs g++")
def test_features_are_asked_of_the_compiler():
    import platform

    if platform.machine() != "x86_64":
        pytest.skip("x86 flags")
    assert isa.features("g++", {("-mavx2", "-mfma", "-mf16c")}) == [
        "avx", "avx2", "f16c", "fma", "pni", "popcnt", "sse4_1", "sse4_2", "ssse3", "xsave"]
    assert isa.features("g++", {()}) == []
    native = isa.features("g++", {("-march=native",)})
    assert machine.missing_features(native, machine.cpu_features()) == []  # this CPU has what native means


# -- the compiler stands in ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("command", "family"),
    [("g++", "gcc"), ("g++-12", "gcc"), ("/usr/bin/x86_64-linux-gnu-g++-13", "gcc"), ("clang++-17", "clang"),
     ("/opt/wrap/g++-wrapper", "gcc"), ("c++", "other"), ("icpx", "other")],
)
def test_compiler_family_as_inductor_tells_it(command, family):
    if sys.platform == "darwin":
        pytest.skip("Apple's clang answers to g++")
    assert environment_key.compiler_family(command, "") == family


def test_the_build_compiler_is_put_into_the_key_only_for_a_stand_in(monkeypatch):
    monkeypatch.setattr(cache_keys_as_built, "_built_compiler", {"config": [None, "g++"], "family": "gcc"})
    for resolved, expected in (("g++-12", (None, "g++")), ("clang++", (None, "g++-12"))):
        monkeypatch.setattr(cache_keys_as_built, "stands_in", lambda resolved=resolved: environment_key.compiler_family(resolved) == "gcc")
        key = {"cpp.cxx": (None, "g++-12"), "cpp.threads": -1}
        cache_keys_as_built.agree_compiler(key)
        assert key == {"cpp.cxx": expected, "cpp.threads": -1}


def test_kernel_command_lines_template_the_compiler():
    values = relocate.path_values("/venv/lib/python3.11/site-packages/torch", "g++")
    line = "None g++ i -D X -I/venv/lib/python3.11/site-packages/torch/include -march=native -o o.so"
    template = relocate.to_template(line, values)
    assert template.startswith(f"None {relocate.CXX} i ") and f"-I{relocate.TORCH_DIR}/include" in template
    other = relocate.path_values("/other/torch", "/usr/bin/g++-12")
    assert relocate.render(template, other) == "None /usr/bin/g++-12 i -D X -I/other/torch/include -march=native -o o.so"


# -- settings and probes a set brings ------------------------------------------------------------


def test_a_sets_dynamic_threads_reach_this_process_unless_the_user_chose(monkeypatch):
    from torch._inductor import config

    manifest = Manifest("p", {}, {}, settings={"cpp.dynamic_threads": True})
    monkeypatch.setattr(config.cpp, "dynamic_threads", False)
    monkeypatch.delenv(DYNAMIC_THREADS_VAR, raising=False)
    later: list[str] = []
    assert cache_keys_as_built.match_build_keys(manifest, later.append) == []
    assert config.cpp.dynamic_threads is True
    monkeypatch.setattr(config.cpp, "dynamic_threads", False)
    monkeypatch.setenv(DYNAMIC_THREADS_VAR, "0")
    (note,) = cache_keys_as_built.match_build_keys(manifest, later.append)
    assert later == [] and note.startswith("TORCHINDUCTOR_CPP_DYNAMIC_THREADS=0 here") and config.cpp.dynamic_threads is False


def test_a_missing_compiler_is_said_through_the_loaders_note(monkeypatch):
    """Once Inductor is imported, key_agreement tells load()'s note (passed in: it does not import the loader)."""
    notes: list[str] = []
    monkeypatch.setattr(environment_key, "compiler", lambda: {"command": "g++", "version": "unavailable: not found"})
    cache_keys_as_built._say_if_unavailable({"family": "gcc"}, notes.append)
    assert notes == ["no working C++ compiler here (g++: unavailable: not found): torch needs one, "
                     "of the gcc family, even to load the shipped kernels"]
    monkeypatch.setattr(environment_key, "compiler", lambda: {"command": "g++", "version": "13.2"})
    cache_keys_as_built._say_if_unavailable({"family": "gcc"}, notes.append)
    assert len(notes) == 1


def test_probes_are_vouched_for_only_with_their_flags_and_this_cpus_features(monkeypatch):
    monkeypatch.setattr(isa_probes, "_vouched", {})
    manifest = Manifest("p", {}, {}, compiler={"version": environment_key.compiler_version(environment_key.cxx_command())},
                        probes={"-mavx2 -mfma": ["avx2", "fma"], "-mfoo": ["no-such-feature"]})
    warm_shortcuts.install_shortcuts(manifest, frozenset({"avx2", "fma", "sse2"}))
    assert isa_probes.vouches("-mfma -mavx2")  # the same flags, in any order
    assert not isa_probes.vouches("-mavx2") and not isa_probes.vouches("-mfoo") and not isa_probes.vouches("")
    monkeypatch.setattr(isa_probes, "_vouched", {})
    warm_shortcuts.install_shortcuts(manifest, None)  # this CPU's features unknown: nothing is vouched for
    assert not isa_probes.vouches("-mavx2 -mfma")


# -- the compiler's --version, remembered ------------------------------------------------------------


LOGGING_COMPILER = """#include <stdio.h>
int main(int argc, char **argv) {
    FILE *log = fopen(%s, "a");
    for (int i = 0; i < argc; i++) fprintf(log, "%%s ", argv[i]);
    fputs("\\n", log);
    fclose(log);
    puts(%s);
    return 0;
}
"""


def logging_compiler(directory: Path, name: str, version: str) -> Path:
    """A compiler on PATH that writes a line to ``execs`` each time it is started: a binary, as a
    real compiler is (a script is asked every time, whatever its name)."""
    import subprocess

    directory.mkdir(parents=True, exist_ok=True)
    source = directory / f"{name}.c"
    source.write_text(LOGGING_COMPILER % (json.dumps(str(directory / "execs")), json.dumps(version)))
    built = directory / f".{name}.new"
    subprocess.run(["cc", "-o", str(built), str(source)], check=True)
    return built.replace(directory / name)  # a new file, as an upgrade installs


def starts(directory: Path) -> int:
    return len((directory / "execs").read_text().splitlines()) if (directory / "execs").exists() else 0


@needs_linux
def test_a_compilers_version_is_remembered_by_its_file_and_asked_again_when_it_changes(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    compiler = logging_compiler(bin_dir, "g++", "g++ (Fake) 12.2.0")
    logging_compiler(bin_dir, "ccache", "ccache version 4.8")
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))

    def asked(command: str) -> str:
        environment_key.remembered_compiler_version.cache_clear()  # a fresh process
        environment_key.compiler_version.cache_clear()
        return environment_key.remembered_compiler_version(command)

    assert asked("g++") == "g++ (Fake) 12.2.0" and starts(bin_dir) == 1
    assert asked("g++") == "g++ (Fake) 12.2.0" and starts(bin_dir) == 1  # the next process starts nothing
    logging_compiler(bin_dir, "g++", "g++ (Fake) 13.1.0")  # upgraded in place: another file
    assert asked("g++") == "g++ (Fake) 13.1.0" and starts(bin_dir) == 2
    assert asked(str(compiler)) == "g++ (Fake) 13.1.0" and starts(bin_dir) == 2  # one file, whatever the name
    asked("ccache"), asked("ccache")  # a wrapper may change compilers behind one file: always asked
    assert starts(bin_dir) == 4
    (bin_dir / "c++").symlink_to(bin_dir / "ccache")  # ccache's masquerade: a compiler's name, ccache's file
    asked("c++"), asked("c++")
    assert starts(bin_dir) == 6
    # Spack's `cc`, Nix's `g++`: scripts named as compilers, running whichever they were set up with.
    script = bin_dir / "wrapped" / "g++"
    script.parent.mkdir()
    script.write_text(f'#!/bin/sh\nexec {bin_dir / "g++"} "$@"\n')
    script.chmod(0o755)
    assert asked(str(script)) == "g++ (Fake) 13.1.0" and asked(str(script)) == "g++ (Fake) 13.1.0"
    assert starts(bin_dir) == 8
    assert asked("no-such-g++") == "unavailable (not found)" and starts(bin_dir) == 8
    (tmp_path / "not-a-dir").write_text("")  # a cache dir that cannot be made: asked each time, never an error
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "not-a-dir" / "cache"))
    assert asked("g++") == "g++ (Fake) 13.1.0" and asked("g++") == "g++ (Fake) 13.1.0"
    assert starts(bin_dir) == 10


@needs_linux
@pytest.mark.parametrize("memo", [b"", b"\n", b"g++ (Planted) 99\n", b"{key}\n\n", b"{key}\nunavailable (exit 1)\n",
                                  b"{key}\ng++ (Fake) 12.2.0\nmore\n"],
                         ids=["empty", "blank", "no-key", "empty-value", "unavailable", "extra-line"])
def test_a_malformed_compiler_memo_is_ignored_and_written_anew(tmp_path, monkeypatch, memo):
    bin_dir = tmp_path / "bin"
    logging_compiler(bin_dir, "g++", "g++ (Fake) 12.2.0")
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    environment_key.remembered_compiler_version.cache_clear()
    environment_key.compiler_version.cache_clear()
    assert environment_key.remembered_compiler_version("g++") == "g++ (Fake) 12.2.0" and starts(bin_dir) == 1
    (file,) = (tmp_path / "cache" / "hatch-precompile" / ".compilers").iterdir()
    assert stat.S_IMODE(file.stat().st_mode) == 0o600
    assert stat.S_IMODE(file.parent.stat().st_mode) == stat.S_IMODE(file.parent.parent.stat().st_mode) == 0o700
    file.write_bytes(memo.replace(b"{key}", file.name.encode()))
    for expected_starts in (2, 2):  # asked once, then remembered again
        environment_key.remembered_compiler_version.cache_clear()
        environment_key.compiler_version.cache_clear()
        assert environment_key.remembered_compiler_version("g++") == "g++ (Fake) 12.2.0"
        assert starts(bin_dir) == expected_starts
    assert file.read_text() == f"{file.name}\ng++ (Fake) 12.2.0\n"


WARM_COMPILER = """
import json
from hatch_precompile.run.caches import warm_shortcuts
warm_shortcuts.install_shortcuts()
from torch._inductor import cpp_builder
command = cpp_builder.get_cpp_compiler()
print(json.dumps([command, cpp_builder._is_intel_compiler(command)]))
"""


@needs_linux
def test_a_warm_process_finds_the_compiler_as_torch_does_without_starting_it(tmp_path):
    """Inductor asks ``--version`` to find the compiler and to tell Intel's apart; with the shortcuts
    the second process of a user answers both from the remembered line, as torch would."""
    import subprocess

    bin_dir = tmp_path / "bin"
    logging_compiler(bin_dir, "g++", "g++ (Fake) 12.2.0")
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "XDG_CACHE_HOME": str(tmp_path / "cache"),
           "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor"), "CXX": "g++"}
    env.pop("TORCH_INDUCTOR_INSTALL_GXX", None)
    plain = subprocess.run([sys.executable, "-c", WARM_COMPILER.replace("warm_shortcuts.install_shortcuts()", "")],
                           env=env, capture_output=True, text=True, check=True).stdout.splitlines()[-1]
    by_torch = starts(bin_dir)
    answers = [subprocess.run([sys.executable, "-c", WARM_COMPILER], env=env, capture_output=True, text=True,
                              check=True).stdout.splitlines()[-1] for _ in range(2)]
    assert answers == [plain, plain] and json.loads(plain) == ["g++", False]
    assert by_torch == 2  # torch alone: one start to find it, one to ask whether it is Intel's
    assert starts(bin_dir) == by_torch + 1  # the first warm process asks once; the second starts none
