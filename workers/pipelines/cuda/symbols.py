"""Names, for the checks on a response's object (`checks`): what its host code may not call, what it
may not define (the system libraries' names), and which names are library template code.

The forbidden calls are the ways a response's host code could end the process or move control past the
harness's checks, take over stdin/stdout, run code on another thread, or read the environment (the
completion record's nonce) or the process's own tables. The record (`record`) already defeats
every early ending; naming them here turns the attempt into a clear `compile_error` before any GPU time.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess

from workers.pipelines.cuda.elf import Elf, archive_symbols
from workers.sandbox import SANDBOX_PATH

# name (after `normalise`) -> why it is refused; every entry is something a kernel's host code never needs.
# The cost: an honest CUDA_CHECK macro that calls exit(1) on an error is refused too; with a harness, a
# response reports errors by returning or throwing (an uncaught exception aborts: `runtime_error`).
_WHY = {
    "end the process before the harness's checks": (
        "exit", "Exit", "quick_exit", "abort", "pthread_exit", "thrd_exit", "err", "errx", "verr", "verrx",
        "error", "error_at_line", "pthread_cancel"),
    "run code when the process ends": ("atexit", "at_quick_exit", "on_exit"),
    "jump past the harness's code": ("longjmp", "siglongjmp", "setcontext", "swapcontext", "makecontext"),
    "send or catch signals": (
        "kill", "killpg", "raise", "tgkill", "tkill", "pthread_kill", "pthread_sigqueue", "sigqueue", "signal",
        "sigaction", "sigset", "bsd_signal", "sysv_signal", "ssignal", "gsignal", "alarm", "ualarm", "setitimer",
        "timer_create", "sigaltstack"),
    "start processes or threads": (
        "fork", "vfork", "clone", "clone3", "system", "popen", "posix_spawn", "posix_spawnp", "daemon",
        "pthread_create", "thrd_create", "execve", "execv", "execvp", "execvpe", "execl", "execle", "execlp",
        "fexecve", "execveat"),
    "open, close or redirect files and descriptors (stdout belongs to the harness)": (
        "open", "open64", "openat", "openat64", "creat", "creat64", "close", "close_range", "closefrom",
        "fcloseall", "dup", "dup2", "dup3", "fcntl", "fcntl64", "ioctl", "pipe", "pipe2", "socket", "socketpair",
        "read", "readv", "pread", "pread64", "preadv", "write", "writev", "pwrite", "pwrite64", "pwritev",
        "sendfile", "splice", "tee", "vmsplice", "fopen", "fopen64", "freopen", "freopen64", "fdopen", "fclose",
        "fopencookie", "fmemopen", "open_memstream", "setvbuf", "setbuf", "setbuffer", "setlinebuf",
        "memfd_create", "mkfifo", "mknod"),
    "read the harness's input (stdin belongs to the harness)": (
        "stdin", "IO_2_1_stdin_", "scanf", "vscanf", "wscanf", "vwscanf", "getchar", "getchar_unlocked", "getwchar",
        "gets"),
    "read the environment": ("getenv", "secure_getenv", "environ", "setenv", "putenv", "unsetenv", "clearenv"),
    "load code, change memory protection or reach the kernel directly": (
        "dlopen", "dlmopen", "dlsym", "dlvsym", "dladdr", "dladdr1", "dlinfo", "dl_iterate_phdr", "mmap",
        "mmap64", "munmap", "mremap", "mprotect", "pkey_mprotect", "pkey_alloc", "process_vm_readv",
        "process_vm_writev", "ptrace", "prctl", "arch_prctl", "personality", "seccomp", "syscall", "r_debug",
        "DYNAMIC", "ehdr_start"),
}
FORBIDDEN = {name: why for why, names in _WHY.items() for name in names}
# prefixes: glibc's internal entry points, and CUDA calls that run host code on a runtime thread
# (host functions, callbacks, graph host nodes) or hand out raw driver entry points
FORBIDDEN_PREFIXES = {
    "libc_": "call glibc's internal entry points",
    "dl_": "call the dynamic loader",
    "cudaLaunchHostFunc": "run host code on a CUDA runtime thread",
    "cudaStreamAddCallback": "run host code on a CUDA runtime thread",
    "cudaGraphAddHostNode": "run host code on a CUDA runtime thread",
    "cudaGraphAddNode": "run host code on a CUDA runtime thread",
    "cudaGraphHostNodeSetParams": "run host code on a CUDA runtime thread",
    "cudaGraphExecHostNodeSetParams": "run host code on a CUDA runtime thread",
    "cudaGraphNodeSetParams": "run host code on a CUDA runtime thread",
    "cudaGraphExecNodeSetParams": "run host code on a CUDA runtime thread",
    "cudaUserObjectCreate": "run host code on a CUDA runtime thread",
    "cudaLogsRegisterCallback": "run host code on a CUDA runtime thread",
    "cudaGetDriverEntryPoint": "take raw CUDA driver entry points",
    "cudaGetProcAddress": "take raw CUDA driver entry points",
    "cudaGetExportTable": "take raw CUDA driver entry points",
}
# C++ library entities, by a piece of their mangled name
FORBIDDEN_MANGLED = {
    "_ZSt3cin": "read the harness's input (stdin belongs to the harness)",
    "_ZSt4wcin": "read the harness's input (stdin belongs to the harness)",
    "_ZNSt6thread15_M_start_thread": "start processes or threads",
    "13basic_filebuf": "open, close or redirect files and descriptors (stdout belongs to the harness)",
    "14basic_ofstream": "open, close or redirect files and descriptors (stdout belongs to the harness)",
    "14basic_ifstream": "open, close or redirect files and descriptors (stdout belongs to the harness)",
    "13basic_fstream": "open, close or redirect files and descriptors (stdout belongs to the harness)",
    "13stdio_filebuf": "open, close or redirect files and descriptors (stdout belongs to the harness)",
    "_ZNSt8ios_base15sync_with_stdio": "open, close or redirect files and descriptors (stdout belongs to the harness)",
    "_ZNSt10filesystem": "open, close or redirect files and descriptors (stdout belongs to the harness)",
}
_PUBLIC = {"libc_single_threaded"}  # read by libstdc++'s inline shared_ptr code
_FORTIFIED = re.compile(r"^(?:isoc99_|isoc23_)?(.*?)(?:_chk|_2)?$")  # __read_chk, __open_2, __isoc99_scanf


def normalise(name: str) -> str:
    """The C name a reference resolves to: no symbol version, no leading underscores, no fortify suffix."""
    return _FORTIFIED.match(name.split("@")[0].lstrip("_")).group(1)


def forbidden(name: str) -> str | None:
    """Why the response's host code may not reference `name`, or None."""
    if name.startswith("_Z"):
        return next((why for piece, why in FORBIDDEN_MANGLED.items() if piece in name), None)
    plain = normalise(name)
    if plain in FORBIDDEN:
        return FORBIDDEN[plain]
    if plain in _PUBLIC:
        return None
    return next((why for prefix, why in FORBIDDEN_PREFIXES.items() if plain.startswith(prefix)), None)


# namespaces of the C++ and CUDA libraries whose templates both the harness and the response instantiate
_LIBRARY = ("St", "Sa", "Sb", "Ss", "Si", "So", "Sd", "9__gnu_cxx", "10__cxxabiv1", "6thrust", "3cub", "4cuda")


def in_library(name: str) -> bool:
    """True for a mangled name in std::, __gnu_cxx::, thrust::, cub:: or cuda:: (and its vtables, guards)."""
    if not name.startswith("_Z"):
        return False
    rest = name[2:]
    for special in ("TV", "TT", "TI", "TS", "GV", "TH", "TW", "GR"):
        if rest.startswith(special):
            rest = rest[2:]
            break
    rest = rest[1:] if rest.startswith("Z") else rest  # a static local: its function's name follows
    rest = rest[1:].lstrip("rVKRO") if rest.startswith("N") else rest
    return rest.startswith(_LIBRARY)


_SHARED = ("libc.so.6", "libm.so.6", "libstdc++.so.6", "libgcc_s.so.1", "ld-linux-x86-64.so.2", "libpthread.so.0",
           "libdl.so.2", "librt.so.1")
_STATIC = ("libc_nonshared.a", "libgcc.a", "libgcc_eh.a")
_STARTUP = ("crt1.o", "Scrt1.o", "crti.o", "crtn.o", "crtbegin.o", "crtbeginS.o", "crtend.o", "crtendS.o")


@functools.lru_cache(maxsize=1)
def system_names() -> dict[str, str]:
    """Every name the linked program's libraries and start-up files define or expect -> the file.

    A response defining one would interpose on it (replace memcmp or printf for the harness, or be
    called by the C runtime before main, as __gmon_start__ is). Read once per worker; a library that
    cannot be found raises FileNotFoundError (the stage reports infra_error: a check with holes is
    not run).
    """
    names: dict[str, str] = {}
    for lib in _SHARED:
        path = _gcc_file(lib)
        if path is None and lib in ("libc.so.6", "libstdc++.so.6", "libm.so.6"):
            raise FileNotFoundError(f"cannot find {lib} to check the response's symbols against")
        if path is not None:
            for s in Elf(_read(path)).dynamic_symbols:
                names.setdefault(s.name.split("@")[0], lib)
    for lib in _STATIC:
        path = _gcc_file(lib)
        if path is not None:
            for name in archive_symbols(_read(path)):
                names.setdefault(name, lib)
    for obj in _STARTUP:
        path = _gcc_file(obj)
        if path is not None:
            for s in Elf(_read(path)).symbols:
                if s.bind != 0 and s.name:
                    names.setdefault(s.name, obj)
    for lib in ("libcudart_static.a", "libcudadevrt.a"):
        for name in archive_symbols(_read(_cuda_library(lib))):
            names.setdefault(name, lib)
    names.pop("", None)
    return names


def _read(path: str) -> bytes:
    with open(path, "rb") as fh:
        return fh.read()


def _gcc_file(name: str) -> str | None:
    out = subprocess.run(["gcc", f"-print-file-name={name}"], capture_output=True, text=True, timeout=30).stdout.strip()
    return out if os.path.isabs(out) and os.path.exists(out) else None


def _cuda_library(name: str) -> str:
    nvcc = shutil.which("nvcc", path=SANDBOX_PATH)
    roots = [os.path.dirname(os.path.dirname(os.path.realpath(nvcc)))] if nvcc else []
    roots += [os.environ.get("CUDA_HOME", ""), "/usr/local/cuda"]
    for root in filter(None, roots):
        for sub in ("targets/x86_64-linux/lib", "lib64", "lib"):
            path = os.path.join(root, sub, name)
            if os.path.exists(path):
                return path
    raise FileNotFoundError(f"cannot find {name} (next to nvcc) to check the response's symbols against")
