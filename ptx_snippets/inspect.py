"""PTX and SASS of kernels compiled for sm_90a on a machine without a GPU.

    ptx, _ = compile_for_hopper(kernel_fn, sig, launch_bounds=(128, 1))
    asm = assemble(ptx)                 # ptxas -arch=sm_90a: cubin + register / spill / smem report
    sass = disassemble(asm.cubin)       # nvdisasm
    check_sass(sass, ["HGMMA.64x64x16", "UTMALDG.2D", "SYNCS"])

or all at once: ``inspect_kernel(fn, sig, **opts)`` (cached). The tools come from the NVIDIA wheels
(``nvidia-cuda-nvcc`` brings ptxas, ``nvidia-cuda-nvdisasm`` nvdisasm; found under the installed
``nvidia`` package), else from PATH / ``$CUDA_HOME/bin``.

numba's NVVM may write a newer PTX ISA ``.version`` than the ptxas at hand accepts (NVVM 13.5 writes
9.5, ptxas 13.0 reads up to 9.0): :func:`assemble` then rewrites the version line to the newest the
ptxas supports and says so in ``Assembled.notes``. Instructions newer than that ISA would then fail to
assemble, with ptxas's message.
"""
from __future__ import annotations

import contextlib
import functools
import glob
import os
import re
import shutil
import subprocess
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable

HOPPER_CC = (9, 0, "a")
HOPPER_ARCH = "sm_90a"

# The newest PTX ISA each CUDA release's ptxas reads (CUDA release notes / PTX ISA release history).
_PTX_ISA_OF_CUDA = {(12, 0): (8, 0), (12, 1): (8, 1), (12, 2): (8, 2), (12, 3): (8, 3), (12, 4): (8, 4),
                    (12, 5): (8, 5), (12, 6): (8, 5), (12, 8): (8, 7), (12, 9): (8, 8), (13, 0): (9, 0),
                    (13, 1): (9, 1), (13, 2): (9, 2)}


class ToolNotFound(RuntimeError):
    pass


class SassCheckError(AssertionError):
    """The SASS lacks instructions it should contain; the message lists them and what was found."""


def tool_path(name: str) -> str:
    """Path of a CUDA tool (ptxas, nvdisasm, cuobjdump): the pip wheel's copy first, then PATH / CUDA_HOME."""
    candidates = []
    try:
        import nvidia
        for root in list(getattr(nvidia, "__path__", [])):
            candidates += sorted(glob.glob(os.path.join(root, "*", "bin", name)))
            candidates += sorted(glob.glob(os.path.join(root, "*", "*", "bin", name)))
    except ImportError:
        pass
    for c in candidates:
        if os.access(c, os.X_OK):
            return c
    found = shutil.which(name)
    if found:
        return found
    cuda_home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    if cuda_home and os.access(os.path.join(cuda_home, "bin", name), os.X_OK):
        return os.path.join(cuda_home, "bin", name)
    raise ToolNotFound(f"{name} not found: install the nvidia-cuda-nvcc / nvidia-cuda-nvdisasm wheels or put "
                       f"the CUDA toolkit's bin/ on PATH")


@functools.lru_cache(maxsize=None)
def ptxas_version() -> tuple[int, int]:
    out = subprocess.run([tool_path("ptxas"), "--version"], capture_output=True, text=True, check=True).stdout
    m = re.search(r"release (\d+)\.(\d+)", out)
    if not m:
        raise RuntimeError(f"cannot read the ptxas version from: {out!r}")
    return int(m.group(1)), int(m.group(2))


def max_ptx_isa() -> tuple[int, int] | None:
    """The newest PTX ISA version the installed ptxas reads (None if its release is not in the table)."""
    return _PTX_ISA_OF_CUDA.get(ptxas_version())


def _to_python_function(pyfunc):
    return getattr(pyfunc, "py_func", pyfunc)


class _Hopper:
    """Stands in for the current device while compiling without a GPU (see _device_functions_without_gpu)."""
    compute_capability = HOPPER_CC[:2]


@contextlib.contextmanager
def _device_functions_without_gpu():
    """numba-cuda compiles every device function that is not inlined at the numba-IR level (plain, or
    ``forceinline=True``) for the *current device's* compute capability, which fails when there is no
    GPU. With no GPU, answer (9, 0) for the duration of the compile; the kernel's PTX is still generated
    for sm_90a by ``compile_ptx``. With a GPU nothing is changed."""
    from numba import cuda
    from numba.cuda import dispatcher
    if cuda.is_available():
        yield
        return
    original = dispatcher.get_current_device
    dispatcher.get_current_device = _Hopper
    try:
        yield
    finally:
        dispatcher.get_current_device = original


def compile_for_hopper(pyfunc, sig, **opts) -> tuple[str, object]:
    """``cuda.compile_ptx(pyfunc, sig, cc=(9, 0, "a"), **opts)`` -> (PTX text, return type). Works with
    no GPU (also for kernels calling ``forceinline`` device functions). `pyfunc` may be a Python
    function or a ``cuda.jit`` dispatcher; opts e.g. ``launch_bounds=(threads, 1)`` (needed for
    setmaxnreg), ``lineinfo=True``."""
    from numba import cuda
    with _device_functions_without_gpu():
        return cuda.compile_ptx(_to_python_function(pyfunc), sig, cc=HOPPER_CC, **opts)


@dataclass(frozen=True)
class PtxasInfo:
    registers: int | None
    spill_stores: int
    spill_loads: int
    stack_frame: int
    smem_bytes: int
    barriers: int
    report: str

    def summary(self) -> str:
        return (f"{self.registers} registers, {self.spill_stores} B spill stores / {self.spill_loads} B spill loads, "
                f"{self.stack_frame} B stack, {self.smem_bytes} B static smem, {self.barriers} barriers")


@dataclass(frozen=True)
class Assembled:
    """ptxas's output. Unpacks as ``cubin, info = assemble(ptx)``."""
    cubin: bytes
    info: PtxasInfo
    notes: tuple[str, ...] = field(default=())

    def __iter__(self):
        return iter((self.cubin, self.info))


def _parse_ptxas(report: str) -> PtxasInfo:
    def grab(pattern, default=0):
        m = re.search(pattern, report)
        return int(m.group(1)) if m else default

    return PtxasInfo(registers=grab(r"Used (\d+) registers", None),
                     spill_stores=grab(r"(\d+) bytes spill stores"), spill_loads=grab(r"(\d+) bytes spill loads"),
                     stack_frame=grab(r"(\d+) bytes stack frame"), smem_bytes=grab(r"(\d+) bytes smem"),
                     barriers=grab(r"used (\d+) barriers"), report=report)


_VERSION_LINE = re.compile(r"^\.version\s+(\d+)\.(\d+)\s*$", re.MULTILINE)


def assemble(ptx: str, *, arch: str = HOPPER_ARCH, opt_level: int = 3, extra: Iterable[str] = ()) -> Assembled:
    """Run ptxas on `ptx` for `arch`; returns the cubin and the parsed ``-v`` report. Raises RuntimeError
    with ptxas's message if it refuses the PTX."""
    notes = []
    m = _VERSION_LINE.search(ptx)
    newest = max_ptx_isa()
    if m and newest and (int(m.group(1)), int(m.group(2))) > newest:
        ptx = _VERSION_LINE.sub(f".version {newest[0]}.{newest[1]}", ptx, count=1)
        notes.append(f"PTX .version {m.group(1)}.{m.group(2)} rewritten to {newest[0]}.{newest[1]}, the newest "
                     f"this ptxas {'.'.join(map(str, ptxas_version()))} reads")
    with tempfile.TemporaryDirectory(prefix="ptx_snippets_") as tmp:
        src = os.path.join(tmp, "kernel.ptx")
        out = os.path.join(tmp, "kernel.cubin")
        with open(src, "w") as f:
            f.write(ptx)
        cmd = [tool_path("ptxas"), f"-arch={arch}", f"-O{opt_level}", "-v", *extra, src, "-o", out]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"ptxas refused the PTX ({' '.join(cmd[1:-3])}):\n{proc.stderr.strip()}")
        with open(out, "rb") as f:
            cubin = f.read()
    report = (proc.stdout + proc.stderr).strip()
    warnings = [line for line in report.splitlines() if "warning" in line.lower()]
    notes.extend(warnings)
    return Assembled(cubin=cubin, info=_parse_ptxas(report), notes=tuple(notes))


def disassemble(cubin: bytes) -> str:
    """SASS text of a cubin (``nvdisasm -c``: code sections only)."""
    with tempfile.TemporaryDirectory(prefix="ptx_snippets_") as tmp:
        path = os.path.join(tmp, "kernel.cubin")
        with open(path, "wb") as f:
            f.write(cubin)
        proc = subprocess.run([tool_path("nvdisasm"), "-c", path], capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"nvdisasm failed: {proc.stderr.strip()}")
        return proc.stdout


@dataclass(frozen=True)
class KernelInspection:
    ptx: str
    sass: str
    info: PtxasInfo
    notes: tuple[str, ...]

    @property
    def instructions(self) -> set[str]:
        return instructions(self.sass)

    def counts(self) -> Counter:
        return mnemonic_counts(self.sass)


def _freeze(value):
    if isinstance(value, dict):
        return tuple(sorted((k, _freeze(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(v) for v in value)
    return value


_CACHE: dict = {}


def inspect_kernel(pyfunc, sig, **opts) -> KernelInspection:
    """Compile for sm_90a, assemble and disassemble; cached per (function, signature, options)."""
    fn = _to_python_function(pyfunc)
    key = (fn, _freeze(sig), _freeze(opts))
    if key not in _CACHE:
        ptx, _ = compile_for_hopper(fn, sig, **opts)
        asm = assemble(ptx)
        _CACHE[key] = KernelInspection(ptx=ptx, sass=disassemble(asm.cubin), info=asm.info, notes=asm.notes)
    return _CACHE[key]


def sass_of(pyfunc, sig, **opts) -> str:
    """The SASS of a kernel compiled for sm_90a (cached)."""
    return inspect_kernel(pyfunc, sig, **opts).sass


# One SASS instruction line: "/*0190*/   @P0 SYNCS.EXCH.64 URZ, [UR6], UR4 ;"
_SASS_LINE = re.compile(r"^\s*/\*[0-9a-f]+\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*(?:\.[A-Za-z0-9_]+)*)")


def instructions(sass: str) -> set[str]:
    """Every opcode in the SASS with its modifiers, e.g. {'HGMMA.64x64x16.F32.BF16', 'UTMALDG.2D', ...}."""
    return {m.group(1) for m in map(_SASS_LINE.match, sass.splitlines()) if m}


def mnemonic_counts(sass: str) -> Counter:
    """How often each base mnemonic (before the first '.') occurs."""
    return Counter(m.group(1).split(".")[0] for m in map(_SASS_LINE.match, sass.splitlines()) if m)


def opcode_counts(sass: str) -> Counter:
    """How often each full opcode (with modifiers) occurs."""
    return Counter(m.group(1) for m in map(_SASS_LINE.match, sass.splitlines()) if m)


# The instruction text of a SASS line, without its address and encoding: "@P0 SYNCS.EXCH.64 URZ, [UR6], UR4"
_SASS_INSTRUCTION = re.compile(r"^\s*/\*[0-9a-f]+\*/\s+(.*?)\s*;")
_SYMBOL_OPERAND = re.compile(r"`\([^)]*\)")


def fingerprint(sass: str) -> str:
    """A short hash (SHA-1, 12 hex digits) of the instruction stream — every instruction with its
    operands, in order, without addresses. Two builds with the same fingerprint run the same machine
    code: a kernel whose fingerprint equals the one its GPU tests ran on needs no new GPU run."""
    import hashlib

    lines = (m.group(1) for m in map(_SASS_INSTRUCTION.match, sass.splitlines()) if m)
    # Symbol operands (`(name)` of a call or return) carry numba's per-process version counters, which
    # change with what else the process compiled first: they are not machine-code differences.
    stream = "\n".join(_SYMBOL_OPERAND.sub("`(symbol)", line) for line in lines)
    return hashlib.sha1(stream.encode()).hexdigest()[:12]


def missing_instructions(sass: str, expected_prefixes: Iterable[str]) -> list[str]:
    ops = instructions(sass)
    return [p for p in expected_prefixes if not any(op.startswith(p) for op in ops)]


def check_sass(sass: str, expected_prefixes: Iterable[str]) -> None:
    """Raise :class:`SassCheckError` unless every prefix starts at least one opcode of the SASS."""
    expected = list(expected_prefixes)
    missing = missing_instructions(sass, expected)
    if missing:
        interesting = sorted(op for op in instructions(sass)
                             if op.split(".")[0] in {"HGMMA", "UTMALDG", "UTMASTG", "UBLKCP", "UTMACCTL", "SYNCS",
                                                     "ELECT", "USETMAXREG", "BAR", "CS2R", "WARPGROUP", "FENCE",
                                                     "REDG", "RED", "STG", "WARPSYNC", "UTMACMDFLUSH"})
        raise SassCheckError(f"SASS lacks {missing}; expected prefixes {expected}; relevant opcodes present: "
                             f"{interesting}")
