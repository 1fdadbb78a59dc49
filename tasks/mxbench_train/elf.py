"""What a shared library (libmxnet.so) needs and which GPUs it has kernels for, read from its ELF.

Stdlib only: the Dockerfiles' build-time checks, benchmarks/gpu_check.sh and the tests read
libmxnet.so with it where no ``readelf`` or ``cuobjdump`` is installed.

- ``needed(path)``: its DT_NEEDED entries (the shared libraries the loader must find);
- ``fatbin_archs(section(path, ".nv_fatbin"))``: the cubin and PTX archs of its CUDA kernels.
  ``.nv_fatbin`` is a run of fatbinaries, each a 16-byte header (magic 0xBA55ED50, u16 version,
  u16 header size, u64 size of its entries) then entries of u16 kind (1 PTX, 2 and 0x10 cubin), u16,
  u32 header size, u64 payload size, ..., u32 arch at byte 28 (e.g. 86 for sm_86); cuobjdump
  --list-elf --list-ptx, where present, is the reference (docker/README.md cross-checked the two).

``python -m mxbench_train.elf archs [LIB] [--require "7.0;8.6;9.0+PTX"]`` prints the archs and fails
when a required one is missing (the source image's build checks MXNET_CUDA_ARCH with it).
"""
import argparse
import importlib.util
import struct
import sys
from pathlib import Path

FATBIN_MAGIC = struct.pack("<I", 0xBA55ED50)
PTX, CUBINS = 1, (2, 0x10)
DT_NEEDED, DT_STRTAB = 1, 5
SHT_DYNAMIC = 6


class ElfError(ValueError):
    pass


def _header(f, path):
    ident = f.read(64)
    if ident[:4] != b"\x7fELF" or ident[4] != 2 or ident[5] != 1:
        raise ElfError(f"{path} is not a 64-bit little-endian ELF library")
    (table_at,) = struct.unpack_from("<Q", ident, 0x28)
    entry_size, count, names_index = struct.unpack_from("<HHH", ident, 0x3A)
    f.seek(table_at)
    table = f.read(entry_size * count)
    # each section header: name, type, flags, address, offset, size, link, ...
    return [struct.unpack_from("<IIQQQQI", table, i * entry_size) for i in range(count)], names_index


def _read(f, offset, size):
    f.seek(offset)
    return f.read(size)


def section(path, wanted):
    """The bytes of the named section; b"" when the library has none (.nv_fatbin of a CPU build)."""
    with open(path, "rb") as f:
        sections, names_index = _header(f, path)
        names = _read(f, sections[names_index][4], sections[names_index][5])
        for name, _, _, _, offset, size, _ in sections:
            if names[name:names.index(b"\0", name)].decode() == wanted:
                return _read(f, offset, size)
    return b""


def needed(path):
    """The DT_NEEDED sonames of a shared library, in its order (what ``readelf -d`` lists as NEEDED)."""
    with open(path, "rb") as f:
        sections, _ = _header(f, path)
        dynamic = [s for s in sections if s[1] == SHT_DYNAMIC]
        if not dynamic:
            return []
        _, _, _, _, offset, size, link = dynamic[0]
        strings = _read(f, sections[link][4], sections[link][5])  # the dynamic string table (.dynstr)
        entries = _read(f, offset, size)
    names = []
    for at in range(0, len(entries) - 15, 16):
        tag, value = struct.unpack_from("<qQ", entries, at)
        if tag == 0:
            break
        if tag == DT_NEEDED:
            names.append(strings[value:strings.index(b"\0", value)].decode())
    return names


def fatbin_archs(data):
    """(cubin archs, PTX archs, fatbinaries) of a .nv_fatbin section, archs as 86 for sm_86."""
    cubins, ptx, fatbins, at = set(), set(), 0, 0
    while (at := data.find(FATBIN_MAGIC, at)) >= 0:  # fatbinaries may be padded apart
        header_size, entries_size = struct.unpack_from("<HQ", data, at + 6)
        entry, end = at + header_size, min(at + header_size + entries_size, len(data))
        while entry + 32 <= end:
            kind, _, entry_header, payload = struct.unpack_from("<HHIQ", data, entry)
            (arch,) = struct.unpack_from("<I", data, entry + 28)
            if kind == PTX:
                ptx.add(arch)
            elif kind in CUBINS:
                cubins.add(arch)
            if entry_header == 0:
                break  # not a fatbinary after all: stop rather than loop
            entry += entry_header + payload
        fatbins, at = fatbins + 1, end
    return cubins, ptx, fatbins


def required_archs(spec):
    """MXNet's MXNET_CUDA_ARCH list ("7.0;8.6;9.0+PTX", numbers only) -> (cubin archs, PTX archs).
    A "X.Y(A.B)" entry is a cubin for X.Y built from A.B's PTX: X.Y is what must be there."""
    cubins, ptx = set(), set()
    for item in filter(None, (part.strip() for part in spec.replace(" ", ";").split(";"))):
        number = item.removesuffix("+PTX").split("(")[0]
        major, dot, minor = number.partition(".")
        if not (dot and major.isdigit() and minor.isdigit()):
            raise ElfError(f"MXNET_CUDA_ARCH entry {item!r}: give compute capabilities as numbers, e.g. 8.6 or 9.0+PTX")
        cubins.add(int(major) * 10 + int(minor))
        if item.endswith("+PTX"):
            ptx.add(int(major) * 10 + int(minor))
    return cubins, ptx


def installed_libmxnet():
    """libmxnet.so of the mxnet package this Python would import, found without importing it."""
    spec = importlib.util.find_spec("mxnet")
    if spec is None or not spec.submodule_search_locations:
        raise ElfError("no mxnet package is installed for this Python")
    return Path(list(spec.submodule_search_locations)[0]) / "libmxnet.so"


def names(archs, prefix="sm_"):
    return ", ".join(f"{prefix}{a}" for a in sorted(archs)) or "none"


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m mxbench_train.elf",
                                     description="the GPU archs (or the needed libraries) of libmxnet.so")
    parser.add_argument("what", choices=["archs", "needed"])
    parser.add_argument("lib", nargs="?", help="default: libmxnet.so of the installed mxnet")
    parser.add_argument("--require", default="", help='archs that must have cubins, as MXNET_CUDA_ARCH ("8.0;9.0")')
    args = parser.parse_args(argv)
    try:
        lib = Path(args.lib) if args.lib else installed_libmxnet()
        if args.what == "needed":
            print("\n".join(needed(lib)))
            return 0
        cubins, ptx, fatbins = fatbin_archs(section(lib, ".nv_fatbin"))
        print(f"{lib}: SASS {names(cubins)}; PTX {names(ptx, 'compute_')} ({fatbins} fatbinaries)")
        want_cubins, want_ptx = required_archs(args.require)
    except (ElfError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    missing = [f"sm_{a}" for a in sorted(want_cubins - cubins)] + [f"compute_{a}" for a in sorted(want_ptx - ptx)]
    if missing:
        print(f"error: {lib} lacks kernels for {', '.join(missing)} (required: {args.require})",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
