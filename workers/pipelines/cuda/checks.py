"""What the response's compiled object may contain when a harness is given, checked before linking.

The response's host code runs inside the harness's process, so its object is read (`elf`) for the ways
it could act outside the calls the harness makes into it: code that runs before main (constructors,
ifunc resolvers), names that replace the harness's, the farm wrapper's or a system library's functions,
references to the calls in `symbols.FORBIDDEN`, raw system-call instructions, writable or oddly
placed code. Each finding is a `compile_error` naming it. Device code (the fatbinary) is data here.

nvcc emits one static constructor per object, `__sti____cudaRegisterAll` (a local function that
registers the fatbinary and its kernels, then `atexit`s the unregistration); with <iostream> (GCC 12)
the object also has `_GLOBAL__sub_I_<file>`, which constructs `std::ios_base::Init`. Both are
recognised by name and by what they reference (every reference of theirs goes through a relocation:
the response is compiled with -ffunction-sections, so no call between functions is resolved by the
assembler); any other constructor, or one of these referencing anything else, is refused. A dynamic
initialiser that references nothing (arithmetic on the response's own globals, merged by GCC into
`_GLOBAL__sub_I_`) passes unseen: it can neither print nor end the process.

Weak definitions (inline functions, template instantiations) are made private to the response (renamed)
unless the harness needs them, so the response's copy of `std::` code, or of the harness's own inline
helpers, can never replace the one the harness and the libraries use; a strong definition of such a
name is refused.
"""

from __future__ import annotations

import collections
import re
from dataclasses import dataclass

from workers.pipelines.cuda import elf
from workers.pipelines.cuda.elf import Elf, MalformedElf, Symbol
from workers.pipelines.cuda.symbols import forbidden, in_library, system_names

PRIVATE = "farm.private."  # the prefix of a weak definition made private to the response
STB_GNU_UNIQUE = 10
R_X86_64_64, R_X86_64_IRELATIVE = 1, 37
MAX_CONSTRUCTORS = 16  # nvcc's and <iostream>'s are two; the bound keeps a hostile object's check linear
REGISTER_ALL = "_ZL24__sti____cudaRegisterAllv"
# what nvcc's registration may reach: the functions it follows, the runtime calls it makes
NVCC_HELPERS = {REGISTER_ALL, "_ZL31__nv_cudaEntityRegisterCallbackPPv", "_ZL26__cudaUnregisterBinaryUtilv",
                "_ZL22____nv_dummy_param_refPv", "_ZL37__nv_save_fatbinhandle_for_managed_rtPPv",
                "_ZL32__nv_init_managed_rt_with_modulePPv"}
NVCC_CALLS = {"__cudaRegisterFatBinary", "__cudaRegisterFatBinaryEnd", "__cudaRegisterFunction", "__cudaRegisterVar",
              "__cudaRegisterManagedVar", "__cudaRegisterHostVar", "__cudaRegisterTexture", "__cudaRegisterSurface",
              "__cudaInitModule", "__cudaUnregisterFatBinary", "atexit"}
IOSTREAM_HELPERS = {"_Z41__static_initialization_and_destruction_0ii"}
IOSTREAM_CALLS = {"_ZNSt8ios_base4InitC1Ev", "_ZNSt8ios_base4InitD1Ev", "__cxa_atexit", "__dso_handle"}
_INIT = re.compile(r"^\.(init_array|preinit_array|ctors|init)(\..*)?$")
_FINI = re.compile(r"^\.(fini_array|dtors|fini)(\..*)?$")
_LINKER_BUILT = (".interp", ".dynamic", ".dynsym", ".dynstr", ".hash", ".gnu.hash", ".gnu.version", ".got", ".plt",
                 ".gnu.lto_", ".tm_clone_table")
_SYSCALL = {b"\x0f\x05": "syscall", b"\x0f\x34": "sysenter", b"\xcd\x80": "int $0x80"}


@dataclass(frozen=True)
class Verdict:
    problems: tuple[str, ...]  # empty when the object may be linked
    object: bytes  # what to link: the response's object with its weak definitions made private

    @property
    def message(self) -> str:
        shown = "; ".join(self.problems[:4]) + ("; ..." if len(self.problems) > 4 else "")
        return f"the response's compiled code was refused: {shown}"


def check(kernel: bytes, harness: bytes, wrapper: bytes) -> Verdict:
    """The verdict on the response's object `kernel`, given the harness's and the farm wrapper's objects."""
    try:
        obj, theirs, ours = Elf(kernel), Elf(harness), Elf(wrapper)
        relocs = collections.defaultdict(list)
        for r in obj.relocations():
            relocs[r.section].append(r)
        problems: list[str] = []
        problems += _sections(obj)
        registration, more = _constructors(obj, relocs, _by_section(obj))
        problems += more
        problems += [f"{s.name} is a GNU ifunc (its resolver runs before main)"
                     for s in obj.symbols if s.type == elf.STT_GNU_IFUNC]
        if any(r.type == R_X86_64_IRELATIVE for rs in relocs.values() for r in rs):
            problems.append("an IRELATIVE relocation (an ifunc resolver runs before main)")
        more, renames = _definitions(obj, theirs, ours)
        problems += more
        problems += _references(obj, theirs, ours, relocs, registration)
    except MalformedElf as exc:
        return Verdict((f"the object file could not be read ({exc})",), kernel)
    return Verdict(tuple(problems), obj.with_names(renames) if renames and not problems else kernel)


def _sections(obj: Elf) -> list[str]:
    problems = []
    for sec in obj.sections:
        name = sec.name
        if _FINI.match(name) or sec.type == elf.SHT_FINI_ARRAY:
            problems.append(f"a static destructor (section {name} runs code after main)")
        elif (_INIT.match(name) and not name.startswith(".init_array")) or sec.type == elf.SHT_PREINIT_ARRAY:
            problems.append(f"a static constructor (section {name} runs code before main)")
        elif name.startswith(_LINKER_BUILT) or sec.type in (elf.SHT_DYNAMIC, elf.SHT_DYNSYM):
            problems.append(f"a {name} section (a structure only the linker may build)")
        if sec.flags & elf.SHF_EXECINSTR:
            if sec.flags & elf.SHF_WRITE:
                problems.append(f"writable code (section {name})")
            if name != ".text" and not name.startswith(".text."):
                stack = " (an executable stack)" if name == ".note.GNU-stack" else ""
                problems.append(f"code in section {name}{stack}")
            # any position, not only instruction starts: a jump into the middle of an instruction finds these too
            for pattern, what in _SYSCALL.items():
                if pattern in sec.data:
                    problems.append(f"a raw `{what}` instruction in {name} (system calls go through the C library)")
    return problems


def _by_section(obj: Elf) -> dict[int, list[Symbol]]:
    """The named symbols of each section (an index: a hostile object may hold a million symbols)."""
    out = collections.defaultdict(list)
    for s in obj.symbols:
        if s.type != elf.STT_SECTION:
            out[s.shndx].append(s)
    return out


def _constructors(obj: Elf, relocs: dict, symbols: dict) -> tuple[set[int], list[str]]:
    """The sections of nvcc's registration (its references are checked here), and what else runs before main."""
    problems: list[str] = []
    registration: set[int] = set()
    entries = [(sec, relocs.get(sec.index, [])) for sec in obj.sections
               if sec.name.startswith(".init_array") or sec.type == elf.SHT_INIT_ARRAY]
    if sum(len(rs) for _, rs in entries) > MAX_CONSTRUCTORS:
        return registration, [f"more than {MAX_CONSTRUCTORS} static constructors"]
    for sec, rs in entries:
        if len(rs) * 8 != sec.size or any(r.type != R_X86_64_64 for r in rs):
            problems.append(f"a static constructor the checker cannot follow (section {sec.name})")
            continue
        for r in rs:
            s = r.symbol
            offset = r.addend if s.type == elf.STT_SECTION else s.value + r.addend
            fn = next((f for f in symbols.get(s.shndx, []) if f.type == elf.STT_FUNC and f.value == offset), None)
            if fn is not None and fn.name == REGISTER_ALL and not registration:
                seen, more = _closure(obj, relocs, symbols, fn, NVCC_HELPERS, NVCC_CALLS, strict=False)
                registration |= seen
            elif fn is not None and fn.name.startswith("_GLOBAL__sub_I_"):
                _, more = _closure(obj, relocs, symbols, fn, IOSTREAM_HELPERS, IOSTREAM_CALLS, strict=True)
            else:
                name = fn.name if fn is not None else s.name or "an unnamed address"
                more = [f"a static constructor ({name} runs before main)"]
            problems += more
    return registration, problems


def _closure(obj: Elf, relocs: dict, symbols: dict, root: Symbol, helpers: set[str], calls: set[str],
             strict: bool) -> tuple[set[int], list[str]]:
    """The sections a recognised constructor reaches, following its helpers; anything else it references
    (in `strict` mode any code at all; otherwise a call outside `calls`) is a problem."""
    todo, seen, problems = [root], set(), []
    what = ("nvcc's registration" if root.name == REGISTER_ALL else
            f"a static constructor ({root.name}, which initialises global objects)")
    while todo:
        fn = todo.pop()
        if fn.shndx in seen:
            continue
        seen.add(fn.shndx)
        sec = obj.section(fn.shndx)
        if any(s.value != 0 or s.size != sec.size for s in symbols[fn.shndx]):  # one function owns the section
            return seen, [f"{what} shares its section with other code"]
        for r in relocs.get(fn.shndx, []):
            s = r.symbol
            if not s.defined:
                if s.name not in calls:
                    problems.append(f"{what} references {s.name}")
                continue
            if s.shndx in (elf.SHN_ABS, elf.SHN_COMMON) or not obj.section(s.shndx).flags & elf.SHF_EXECINSTR:
                continue  # data: the fatbinary, handles, strings
            target = next((t for t in symbols.get(s.shndx, []) if t.type == elf.STT_FUNC), None)
            if target is not None and target.name.removesuffix(".cold") in helpers | {root.name}:
                todo.append(target)
            elif strict or target is None:
                problems.append(f"{what} calls {target.name if target else 'code outside any function'}")
    return seen, problems


def _definitions(obj: Elf, theirs: Elf, ours: Elf) -> tuple[list[str], dict[int, str]]:
    """Problems with the names the response defines, and the weak ones to make private."""
    system = system_names()
    wrapper = {s.name for s in ours.symbols if s.bind != elf.STB_LOCAL and s.name}
    wrapper |= {"__wrap_main", "__real_main"}
    harness = {s.name for s in theirs.symbols if s.defined and s.bind != elf.STB_LOCAL}
    harness_needs = {s.name for s in theirs.symbols if not s.defined and s.name}
    problems, renames = [], {}
    for i, s in enumerate(obj.symbols):
        if not s.defined or s.bind == elf.STB_LOCAL or not s.name:
            continue
        name = s.name.split("@")[0]
        owner = ("which the harness defines" if name in harness else
                 f"which {system[name]} provides or uses" if name in system else
                 "which the farm's wrapper uses" if name in wrapper else None)
        if s.bind not in (elf.STB_GLOBAL, elf.STB_WEAK, STB_GNU_UNIQUE):
            problems.append(f"{s.name} has an unknown binding {s.bind}")
        elif name == "main":
            problems.append("it defines main (with a harness, the harness's main is the program's)")
        elif s.bind != elf.STB_GLOBAL and (owner or name not in harness_needs):
            renames[i] = PRIVATE + s.name  # inline or template code: the response keeps its copy to itself
        elif owner:
            problems.append(f"it defines {name}, {owner} (the response may not replace it)")
    return problems, _with_groups(obj, renames)


def _with_groups(obj: Elf, renames: dict[int, str]) -> dict[int, str]:
    """Rename the signature of every COMDAT group holding a renamed symbol too, so that the linker does
    not drop the response's copy in favour of the harness's (the response's references point into it)."""
    sections = {obj.symbols[i].shndx for i in renames}
    for sec in obj.sections:
        if sec.type != elf.SHT_GROUP or sec.info in renames or sec.info >= len(obj.symbols):
            continue
        members = {int.from_bytes(sec.data[k:k + 4], "little") for k in range(4, len(sec.data) - 3, 4)}
        signature = obj.symbols[sec.info]
        if members & sections and signature.type != elf.STT_SECTION and signature.name:
            renames[sec.info] = PRIVATE + signature.name
    return renames


def _references(obj: Elf, theirs: Elf, ours: Elf, relocs: dict, registration: set[int]) -> list[str]:
    """Problems with the names the response's code references."""
    where = collections.defaultdict(set)
    for section, rs in relocs.items():
        for r in rs:
            where[r.symbol.name].add(section)
    system = system_names()
    inside = {s.name for e in (theirs, ours) for s in e.symbols if s.defined and s.bind != elf.STB_LOCAL}
    inside.add("__real_main")  # the harness's main, under --wrap=main
    problems = []
    for name in sorted({s.name for s in obj.symbols if not s.defined and s.name}):
        why = forbidden(name)
        if why and not (name in NVCC_CALLS and where[name] and where[name] <= registration):
            problems.append(f"its host code references {name} (a response may not {why})")
        plain = name.split("@")[0]
        if plain in inside and plain not in system and not in_library(plain):
            problems.append(f"it references {plain}, which the harness or the farm's wrapper defines "
                            "(the harness calls the response, not the other way round)")
    return problems
