"""What the shipped kernels may execute: the arch flags each compile really used, and the CPU
features those flags let the compiler use.

Runs in the build's child. Inductor runs every C++ compile through ``cpp_builder.run_compile_cmd``
(torch 2.7 to 2.15), which is wrapped here:

- for a ``portable`` set, ``-march=native`` (``-mcpu=``/``-mtune=native``) is dropped from the
  command that builds each binary, but not from the hashed command line that names it: the
  kernels keep the names every process with the same vector ISA looks up, and contain only the
  instructions of that ISA (the ``-mavx512f ...`` flags Inductor chose, which its own probe
  checks on the user's CPU before it picks the ISA). A ``native`` set keeps ``-march=native``:
  its kernels may use every feature of the build machine's CPU;
- the ``-m`` flags of every compile are recorded.

``features()`` then asks the compiler which features those flags enable (``-dM -E``: its
``__AVX512F__``-style macros, minus those of the architecture's baseline) and names them as
Linux's ``/proc/cpuinfo`` does, which load() compares with the user's CPU (run/sets/machine.py). A
macro without a known name is kept as ``?<macro>``: no CPU has that feature name, so a set that
needs it is refused rather than trusted.
"""

from __future__ import annotations

import platform
import re
import shlex
import subprocess
from typing import Any

from hatch_precompile.run.torch_internals import patching

NATIVE = re.compile(r"(?<!\S)-m(arch|cpu|tune)=native(?!\S)")
# Every CPU of the architecture has these: what a feature macro is measured against.
BASELINE = {"x86_64": ["-march=x86-64"], "AMD64": ["-march=x86-64"], "aarch64": ["-march=armv8-a"],
            "arm64": ["-march=armv8-a"]}

# x86 feature macros (gcc, clang) -> /proc/cpuinfo flags, where the names differ beyond case.
_X86 = {
    "SSE3": "pni", "LZCNT": "abm", "LAHF_SAHF": "lahf_lm", "PRFCHW": "3dnowprefetch", "SHA": "sha_ni",
    "PCLMUL": "pclmulqdq", "RDRND": "rdrand", "BMI": "bmi1", "CRC32": "sse4_2", "AVX512VNNI": "avx512_vnni",
    "AVX512BF16": "avx512_bf16", "AVX512FP16": "avx512_fp16", "AVX512VBMI2": "avx512_vbmi2",
    "AVX512BITALG": "avx512_bitalg", "AVX512VPOPCNTDQ": "avx512_vpopcntdq",
    "AVX512VP2INTERSECT": "avx512_vp2intersect", "AVX5124FMAPS": "avx512_4fmaps",
    "AVX5124VNNIW": "avx512_4vnniw", "AVXVNNI": "avx_vnni", "AVXIFMA": "avx_ifma",
    "AVXVNNIINT8": "avx_vnni_int8", "AVXNECONVERT": "avx_ne_convert", "3dNOW": "3dnow", "3dNOW_A": "3dnowext",
    "AMX_TILE": "amx_tile", "AMX_BF16": "amx_bf16", "AMX_INT8": "amx_int8", "AMX_FP16": "amx_fp16",
    "AMX_COMPLEX": "amx_complex", "SSE4_1": "sse4_1", "SSE4_2": "sse4_2",
}
_X86_PLAIN = {
    "MMX", "SSE", "SSE2", "SSSE3", "SSE4A", "FXSR", "AVX", "AVX2", "FMA", "FMA4", "F16C", "XOP", "TBM", "LWP",
    "POPCNT", "ABM", "BMI2", "MOVBE", "ADX", "AES", "RDSEED", "FSGSBASE", "XSAVE", "XSAVEC", "XSAVEOPT",
    "XSAVES", "CLFLUSHOPT", "CLWB", "CLZERO", "MWAITX", "RDPID", "RDPRU", "RTM", "HLE", "PKU", "GFNI", "VAES",
    "VPCLMULQDQ", "MOVDIRI", "MOVDIR64B", "SERIALIZE", "TSXLDTRK", "WAITPKG", "CLDEMOTE", "WBNOINVD", "SGX",
    "PCONFIG", "ENQCMD", "UINTR", "HRESET", "AVX512F", "AVX512CD", "AVX512DQ", "AVX512BW", "AVX512VL",
    "AVX512IFMA", "AVX512VBMI", "AVX512ER", "AVX512PF",
}
# Macros that change with -march but name no instruction set.
# SHSTK (CET shadow stack; -march=znver3 and later set it): gcc emits its instructions only from
# its own intrinsics, never for kernel code, and /proc/cpuinfo names it only where the kernel
# enables user shadow stacks; counted as a feature, every AMD Zen 3+ build's native set would be refused.
# RDSEED likewise: only its intrinsic emits it, and Linux hides it where the CPU's is unreliable
# (AMD Zen 5: cpuid, and so -march=native, has it; /proc/cpuinfo does not), which would refuse a
# native set on the very machine that built it.
_NOT_FEATURES = {"BIGGEST_ALIGNMENT", "FLT_EVAL_METHOD_TS_18661_3", "SSE_MATH", "SSE2_MATH", "MMX_WITH_SSE",
                 "code_model_small", "SEG_FS", "SEG_GS", "GCC_ASM_FLAG_OUTPUTS", "SHSTK", "RDSEED"}
# arm64: __ARM_FEATURE_<X> -> /proc/cpuinfo "Features"; the listed non-features say how, not what.
_ARM = {
    "SVE": "sve", "SVE2": "sve2", "BF16": "bf16", "BF16_VECTOR_ARITHMETIC": "bf16", "BF16_SCALAR_ARITHMETIC": "bf16",
    "DOTPROD": "asimddp", "MATMUL_INT8": "i8mm", "FP16_VECTOR_ARITHMETIC": "asimdhp", "FP16_SCALAR_ARITHMETIC": "fphp",
    "FP16_FML": "asimdfhm", "CRC32": "crc32", "ATOMICS": "atomics", "AES": "aes", "SHA2": "sha2", "SHA3": "sha3",
    "SHA512": "sha512", "SM3": "sm3", "SM4": "sm4", "RCPC": "lrcpc", "JCVT": "jscvt", "COMPLEX": "fcma",
    "FRINT": "frint", "RNG": "rng", "MEMORY_TAGGING": "mte", "QRDMX": "asimdrdm", "SVE_MATMUL_INT8": "svei8mm",
    "SVE_BF16": "svebf16", "SVE2_AES": "sveaes", "SVE2_BITPERM": "svebitperm", "SVE2_SHA3": "svesha3",
    "SVE2_SM4": "svesm4", "CRYPTO": "aes",
}
_ARM_NOT_FEATURES = {"SVE_BITS", "SVE_VECTOR_OPERATORS", "SVE_PREDICATE_OPERATORS", "PAC_DEFAULT", "BTI_DEFAULT",
                     "GCS_DEFAULT", "CLZ", "FMA", "IDIV", "NUMERIC_MAXMIN", "DIRECTED_ROUNDING", "UNALIGNED",
                     "QBIT", "SAT", "LDREX", "SIMD32", "DSP"}


class CompileFlags:
    """Records (and for a portable set, rewrites) the arch flags of every compile in this process."""

    def __init__(self, portable: bool) -> None:
        self.portable = portable
        self.failed = False  # a compile ran as torch made it (its command could not be read)
        self.flag_sets: set[tuple[str, ...]] = set()

    def install(self) -> None:
        patching.wrap("compile-command", before=self._before_compile)

    @property
    def applied(self) -> bool:
        """Every compile went through the wrapper (it saw some, and read each): its flag sets are
        what the binaries were built with."""
        return bool(self.flag_sets) and not self.failed

    def _before_compile(self, arguments: dict[str, Any]) -> dict[str, Any]:
        try:
            return {"cmd_line": self.seen(arguments["cmd_line"])}
        except Exception:  # the command runs as torch made it; features() then says native
            self.failed = True
            raise

    def seen(self, cmd_line: Any) -> Any:
        """``cmd_line`` as it is to run (without -march=native for a portable set), its flags noted."""
        if not isinstance(cmd_line, str):
            raise TypeError(f"a compile command of type {type(cmd_line).__name__}")
        if self.portable:
            cmd_line = NATIVE.sub("", cmd_line)
        self.flag_sets.add(arch_flags(cmd_line))
        return cmd_line

    @property
    def target(self) -> str:
        return "portable" if self.portable and self.applied else "native"


def arch_flags(command: str) -> tuple[str, ...]:
    """The ``-m`` options of a compiler command line, in order (``-march=native``, ``-mavx2``, ...)."""
    try:
        words = shlex.split(command)
    except ValueError:
        words = command.split()
    return tuple(w for w in words if w.startswith("-m") and len(w) > 2)


def features(compiler: str, flag_sets: set[tuple[str, ...]]) -> list[str]:
    """The CPU features (``/proc/cpuinfo`` names) the compiler may use under any of ``flag_sets``."""
    machine = platform.machine()
    command = shlex.split(compiler)
    baseline = _macros(command, BASELINE.get(machine, []))
    found: set[str] = set()
    for flags in flag_sets:
        for macro in _macros(command, list(flags)) - baseline:
            name = feature_name(macro)
            if name:
                found.add(name)
    return sorted(found)


def _macros(command: list[str], flags: list[str]) -> set[str]:
    """``NAME=value`` of every macro the compiler predefines under ``flags``."""
    proc = subprocess.run([*command, *flags, "-dM", "-E", "-x", "c++", "-"], input="", capture_output=True,
                          text=True, timeout=60, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(command + flags)} -dM -E failed: {proc.stderr.strip()[-500:]}")
    found = set()
    for line in proc.stdout.splitlines():
        parts = line.split(None, 2)
        if len(parts) >= 2 and parts[0] == "#define":
            found.add(f"{parts[1]}={parts[2] if len(parts) > 2 else ''}")
    return found


def feature_name(macro: str) -> str | None:
    """The /proc/cpuinfo name of the feature a predefined macro announces; None for a macro that
    names no feature; ``?<macro>`` for an unknown one (no CPU is known to have it)."""
    name, _, value = macro.partition("=")
    if name == "__GCC_HAVE_SYNC_COMPARE_AND_SWAP_16":
        return "cx16"
    if name.startswith("__ARM_FEATURE_"):
        feature = name[len("__ARM_FEATURE_"):]
        if feature in _ARM_NOT_FEATURES:
            return None
        return _ARM.get(feature, f"?{name}")
    if not (name.startswith("__") and name.endswith("__")) or not name[2:-2]:
        return None
    inner = name[2:-2]
    if inner in _NOT_FEATURES or inner.startswith(("tune_", "FP_FAST")) or inner != inner.upper() and inner not in _X86:
        return None  # __znver4__, __tune_znver4__: the CPU's name, not an instruction set
    if value.strip() != "1":
        return None
    if inner in _X86:
        return _X86[inner]
    if inner in _X86_PLAIN:
        return inner.lower()
    return f"?{name}"
