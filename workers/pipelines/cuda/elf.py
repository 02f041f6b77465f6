"""A small reader for x86-64 ELF files: the sections, symbols and relocations of a relocatable object
(what nvcc -c makes of a response), the dynamic symbols of a shared library, the index of an archive.

Pure Python on purpose: the object is the response's (top-level asm can shape every byte of it), and
a bounds-checked `struct` reader cannot be exploited the way a C parser of hostile input can. Anything
out of bounds or out of the ELF64 little-endian format raises `MalformedElf`.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Iterator

SHT_SYMTAB, SHT_RELA, SHT_DYNAMIC, SHT_NOBITS, SHT_REL, SHT_DYNSYM = 2, 4, 6, 8, 9, 11
SHT_INIT_ARRAY, SHT_FINI_ARRAY, SHT_PREINIT_ARRAY, SHT_GROUP, SHT_SYMTAB_SHNDX = 14, 15, 16, 17, 18
SHF_WRITE, SHF_EXECINSTR = 0x1, 0x4
STB_LOCAL, STB_GLOBAL, STB_WEAK = 0, 1, 2
STT_FUNC, STT_SECTION, STT_FILE, STT_GNU_IFUNC = 2, 3, 4, 10
SHN_UNDEF, SHN_ABS, SHN_COMMON, SHN_XINDEX = 0, 0xFFF1, 0xFFF2, 0xFFFF


class MalformedElf(ValueError):
    pass


@dataclass(frozen=True)
class Section:
    index: int
    name: str
    type: int
    flags: int
    offset: int
    size: int
    link: int
    info: int
    data: bytes  # empty for SHT_NOBITS


@dataclass(frozen=True)
class Symbol:
    name: str
    value: int
    size: int
    bind: int
    type: int
    visibility: int
    shndx: int  # the section it is defined in; SHN_UNDEF when it is only referenced

    @property
    def defined(self) -> bool:
        return self.shndx != SHN_UNDEF


@dataclass(frozen=True)
class Relocation:
    section: int  # the section the relocation patches
    offset: int
    type: int
    symbol: Symbol
    addend: int


class Elf:
    """One ELF64 little-endian file, parsed eagerly; every offset is checked against the file's size."""

    def __init__(self, data: bytes):
        self.data = data
        if data[:4] != b"\x7fELF" or data[4:6] != b"\x02\x01":
            raise MalformedElf("not an ELF64 little-endian file")
        (self.type, self.machine, shoff, shentsize, shnum, shstrndx) = (
            *self._unpack("<HH", 16), *self._unpack("<Q", 40), *self._unpack("<HHH", 58))
        self.shoff = shoff
        self.sections: list[Section] = []
        self.symbols: list[Symbol] = []
        self.dynamic_symbols: list[Symbol] = []
        if shoff == 0:
            return
        if shentsize != 64:
            raise MalformedElf(f"section header entries of {shentsize} bytes")
        first = self._unpack("<IIQQQQIIQQ", shoff)
        shnum = shnum or first[5]  # extended numbering: the count is in section 0
        shstrndx = first[6] if shstrndx == SHN_XINDEX else shstrndx
        if shnum > len(data) // 64:
            raise MalformedElf(f"{shnum} section headers do not fit in the file")
        headers = [self._unpack("<IIQQQQIIQQ", shoff + 64 * i) for i in range(shnum)]
        names = self._bytes(headers[shstrndx][4], headers[shstrndx][5]) if shstrndx < shnum else b""
        self.sections = [
            Section(i, _string(names, h[0]), h[1], h[2], h[4], h[5], h[6], h[7],
                    b"" if h[1] == SHT_NOBITS else self._bytes(h[4], h[5]))
            for i, h in enumerate(headers)]
        self.symbols = self._symbols(SHT_SYMTAB)
        self.dynamic_symbols = self._symbols(SHT_DYNSYM)

    def _unpack(self, fmt: str, offset: int) -> tuple:
        size = struct.calcsize(fmt)
        if offset < 0 or offset + size > len(self.data):
            raise MalformedElf(f"a {size}-byte field at {offset} lies outside the file")
        return struct.unpack_from(fmt, self.data, offset)

    def _bytes(self, offset: int, size: int) -> bytes:
        if offset < 0 or size < 0 or offset + size > len(self.data):
            raise MalformedElf(f"{size} bytes at {offset} lie outside the file")
        return self.data[offset:offset + size]

    def section(self, index: int) -> Section:
        if not 0 <= index < len(self.sections):
            raise MalformedElf(f"no section {index}")
        return self.sections[index]

    def _symbols(self, kind: int) -> list[Symbol]:
        table = next((s for s in self.sections if s.type == kind), None)
        if table is None:
            return []
        strings = self.section(table.link).data
        extended = next((s.data for s in self.sections if s.type == SHT_SYMTAB_SHNDX and s.link == table.index), b"")
        out = []
        for i in range(len(table.data) // 24):
            name, info, other, shndx, value, size = struct.unpack_from("<IBBHQQ", table.data, 24 * i)
            if shndx == SHN_XINDEX:
                if 4 * i + 4 > len(extended):
                    raise MalformedElf(f"symbol {i} has no extended section index")
                shndx = struct.unpack_from("<I", extended, 4 * i)[0]
            out.append(Symbol(_string(strings, name), value, size, info >> 4, info & 0xF, other & 0x3, shndx))
        return out

    def relocations(self) -> Iterator[Relocation]:
        """Every relocation entry, with the symbol it names (a section symbol for most local references)."""
        for sec in self.sections:
            if sec.type not in (SHT_RELA, SHT_REL):
                continue
            width = 24 if sec.type == SHT_RELA else 16
            for i in range(len(sec.data) // width):
                offset, info = struct.unpack_from("<QQ", sec.data, width * i)
                addend = struct.unpack_from("<q", sec.data, width * i + 16)[0] if sec.type == SHT_RELA else 0
                index = info >> 32
                if index >= len(self.symbols):
                    raise MalformedElf(f"relocation names symbol {index} of {len(self.symbols)}")
                yield Relocation(sec.info, offset, info & 0xFFFFFFFF, self.symbols[index], addend)


    def with_names(self, names: dict[int, str]) -> bytes:
        """The file with symbols renamed (symbol index -> new name): the new names go in a copy of the
        string table appended to the file; relocations and groups name symbols by index, so follow."""
        table = next(s for s in self.sections if s.type == SHT_SYMTAB)
        strings = self.section(table.link)
        out = bytearray(self.data)
        out += b"\0" * (-len(out) % 8)
        grown = bytearray(strings.data)
        for index, name in names.items():
            struct.pack_into("<I", out, table.offset + 24 * index, len(grown))
            grown += name.encode() + b"\0"
        header = self.shoff + 64 * strings.index
        struct.pack_into("<QQ", out, header + 24, len(out), len(grown))
        return bytes(out + grown)


def archive_symbols(data: bytes) -> set[str]:
    """The names an `ar` archive's index says its members define (GNU format, the "/" member)."""
    if data[:8] != b"!<arch>\n":
        raise MalformedElf("not an ar archive")
    header = data[8:68]
    if len(header) < 60 or header[:16].strip() != b"/":
        return set()
    size = int(header[48:58])
    body = data[68:68 + size]
    count = struct.unpack_from(">I", body, 0)[0]
    names = body[4 + 4 * count:].split(b"\0")
    return {n.decode("utf-8", "replace") for n in names[:count] if n}


def _string(table: bytes, offset: int) -> str:
    if offset >= len(table):
        raise MalformedElf(f"a name at {offset} lies outside its string table")
    end = table.find(b"\0", offset)
    return table[offset:end if end >= 0 else len(table)].decode("utf-8", "replace")
