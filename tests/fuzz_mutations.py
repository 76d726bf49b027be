"""Seeded mutations of a valid file's bytes, for the file fuzz test (test_fuzz_files.py).

Each mutator takes the bytes and a `random.Random` and returns new bytes. Generic ones
flip, set, insert, delete, duplicate and truncate; format-aware ones edit what a checksum
or a length would otherwise guard: a safetensors header's JSON (length rewritten), the
structure record of a tianyuan file (its CRC made right again, as an attacker would), the
pickle inside a .pth zip (the zip's CRCs rewritten), a PNG's chunks (CRCs rewritten), a
JSON document's values (numbers to strings, NaN, huge, negative; nesting without end).
"""
import io
import json
import struct
import zipfile
import zlib

INTERESTING = [0, 1, 0x7F, 0x80, 0xFF, 0x20, 0x2D, 0x30, 0x39, 0x5B, 0x7B, 0x22]
# values a JSON edit puts in place of a number, string, list or object
JSON_VALUES = ["x", "72", -1, -2 ** 63, 2 ** 64, 10 ** 30, 1e308, 0.5, True, None, [], {},
               [1, "2"], {"a": 1}, "NaN", "\u2028", "a" * 300]
DEEP = "__fuzz_deep__"   # replaced by a nesting of lists thousands deep after dumping
PICKLE_TOKENS = [b"]", b"}", b"(", b"t", b"l", b"d", b"R", b"b", b"a", b"s", b"u", b"0",
                 b"h\x00", b"q\x00", b"r\xff\xff\xff\x7f", b"N", b"K\xff", b"J\xff\xff\xff\x7f",
                 b"X\xff\xff\xff\x7f", b"cos\nsystem\n", b"c_codecs\nencode\n",
                 b"X\x01\x00\x00\x00aX\x09\x00\x00\x00os.system\x86R",
                 b"]" * 5000 + b"a" * 4999, b"(" * 3000, b"\x95\xff\xff\xff\xff\xff\xff\xff\x7f"]


# ---------------------------------------------------------------- generic bytes

def flip_bits(data, rng):
    data = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        if data:
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
    return bytes(data)


def set_bytes(data, rng):
    data = bytearray(data)
    for _ in range(rng.randint(1, 3)):
        if data:
            data[rng.randrange(len(data))] = rng.choice(INTERESTING + [rng.randrange(256)])
    return bytes(data)


def truncate(data, rng):
    keep = rng.choice([0, 1, 2, 7, 8, 9, 16, rng.randrange(len(data) + 1), len(data) - 1])
    return data[:max(0, min(keep, len(data)))]


def insert(data, rng):
    at = rng.randrange(len(data) + 1)
    junk = bytes(rng.randrange(256) for _ in range(rng.randint(1, 64)))
    return data[:at] + junk + data[at:]


def delete(data, rng):
    if not data:
        return data
    at = rng.randrange(len(data))
    return data[:at] + data[at + rng.randint(1, 64):]


def duplicate(data, rng):
    if not data:
        return data
    at, to = rng.randrange(len(data)), rng.randrange(len(data))
    return data[:to] + data[at:at + rng.randint(1, 256)] + data[to:]


BYTE_MUTATORS = [flip_bits, set_bytes, truncate, insert, delete, duplicate]


# ---------------------------------------------------------------- JSON values

def _paths(node, path=()):
    yield path
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _paths(value, path + (key,))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _paths(value, path + (i,))


def edit_json(obj, rng):
    """`obj` (parsed JSON) with one value replaced, a key dropped, or nesting without end
    put in; returns the new JSON text."""
    paths = [p for p in _paths(obj) if p]
    if not paths:
        return json.dumps(rng.choice(JSON_VALUES))
    path = rng.choice(paths)
    parent = obj
    for key in path[:-1]:
        parent = parent[key]
    roll = rng.random()
    if roll < 0.1 and isinstance(parent, dict):
        del parent[path[-1]]
    elif roll < 0.2:
        parent[path[-1]] = DEEP
    else:
        parent[path[-1]] = rng.choice(JSON_VALUES + [float("nan"), float("inf")])
    depth = rng.choice([200, 1000, 100_000])
    return json.dumps(obj).replace(f'"{DEEP}"', "[" * depth + "]" * depth)


def json_text(data, rng):
    """A JSON document (a COCO-format file) with one value edited."""
    return edit_json(json.loads(data), rng).encode()


# ---------------------------------------------------------------- safetensors

def _split(data):
    (length,) = struct.unpack("<Q", data[:8])
    return json.loads(data[8:8 + length]), data[8 + length:]


def _join(header_text, body):
    raw = header_text.encode() if isinstance(header_text, str) else header_text
    return struct.pack("<Q", len(raw)) + raw + body


def safetensors_header(data, rng):
    """A tensor record or metadata value edited, the header length rewritten to fit."""
    header, body = _split(data)
    if rng.random() < 0.2:   # an edit to the data that keeps the header's checksum fields
        body = flip_bits(body, rng)
        return _join(json.dumps(header), body)
    return _join(edit_json(header, rng), body)


def header_length(data, rng):
    (length,) = struct.unpack("<Q", data[:8])
    new = rng.choice([0, 1, 2, length - 1, length + 1, length + rng.randint(2, 64),
                      len(data), len(data) - 8, 2 ** 63, 2 ** 64 - 1, rng.getrandbits(64)])
    return struct.pack("<Q", max(0, min(new, 2 ** 64 - 1))) + data[8:]


def tianyuan_structure(data, rng):
    """The structure record of a tianyuan file edited and its CRC made right again (what an
    attacker does); a graph file's fields then meet the graph loader's checks."""
    header, body = _split(data)
    metadata = header["__metadata__"]
    metadata["tianyuan"] = edit_json(json.loads(metadata["tianyuan"]), rng)
    metadata["tianyuan.crc32.structure"] = f"{zlib.crc32(metadata['tianyuan'].encode()):08x}"
    return _join(json.dumps(header), body)


def _memory_plan_edit(plan, rng):
    """A graph file's memory plan with one plausible lie: a buffer moved onto another's
    place, past the arena, misaligned or resized; the arena shrunk; a buffer dropped or
    doubled; a step put in place that may not be; or any JSON value edited."""
    buffers, roll = plan["buffers"], rng.randrange(8)
    if roll == 0 and len(buffers) > 1:
        a, b = rng.sample(range(len(buffers)), 2)
        buffers[a][1] = buffers[b][1]
    elif roll == 1 and buffers:
        rng.choice(buffers)[1] += rng.choice([1, 64, plan["arena"], -64, 2 ** 62])
    elif roll == 2 and buffers:
        rng.choice(buffers)[2] += rng.choice([-64, 64, 1, -1])
    elif roll == 3:
        plan["arena"] = rng.choice([0, max(0, plan["arena"] - 64), -1, 2 ** 63, 1.5])
    elif roll == 4 and buffers:
        buffers.pop(rng.randrange(len(buffers)))
    elif roll == 5 and buffers:
        buffers.append(list(rng.choice(buffers)))
    elif roll == 6:
        plan["inplace"].append([rng.randrange(-2, 40), rng.randrange(-2, 60)])
    else:
        return json.loads(edit_json(plan, rng))
    return plan


def _plain(node):
    """A tianyuan structure record's dicts ({"d": [[key, value], ...]}) as Python dicts."""
    if isinstance(node, dict) and set(node) == {"d"}:
        return {k: _plain(v) for k, v in node["d"]}
    return [_plain(v) for v in node] if isinstance(node, list) else node


def _packed(obj):
    if isinstance(obj, dict):
        return {"d": [[k, _packed(v)] for k, v in obj.items()]}
    return [_packed(v) for v in obj] if isinstance(obj, list) else obj


def graph_memory_plan(data, rng):
    """The memory plan in a graph file's structure record edited (_memory_plan_edit), the
    CRC made right again: the loader's plan checks, not the checksum, meet it."""
    header, body = _split(data)
    metadata = header["__metadata__"]
    structure = json.loads(metadata["tianyuan"])
    entry = next(pair for pair in structure["d"] if pair[0] == "memory")
    entry[1] = _packed(_memory_plan_edit(_plain(entry[1]), rng))
    metadata["tianyuan"] = json.dumps(structure)
    metadata["tianyuan.crc32.structure"] = f"{zlib.crc32(metadata['tianyuan'].encode()):08x}"
    return _join(json.dumps(header), body)


def tianyuan_arrays(data, rng):
    """Array bytes changed and the file's array CRC made right again: it must load, with the
    changed values (or be refused by a loader that checks values, as graph files do)."""
    header, body = _split(data)
    body = flip_bits(body, rng) if body else body
    tensors = {k: v for k, v in header.items() if k != "__metadata__"}
    crc = 0
    for name in sorted(tensors):
        begin, end = tensors[name]["data_offsets"]
        crc = zlib.crc32(body[begin:end], crc)
    header["__metadata__"]["tianyuan.crc32"] = f"{crc:08x}"
    return _join(json.dumps(header), body)


# ---------------------------------------------------------------- pickles and zips

def pickle_token(data, rng):
    """A pickle opcode (or a run of them) put somewhere in the pickle."""
    at = rng.randrange(len(data) + 1)
    return data[:at] + rng.choice(PICKLE_TOKENS) + data[at:]


PICKLE_MUTATORS = BYTE_MUTATORS + [pickle_token, pickle_token]


def zip_member(data, rng):
    """One member of a .pth zip (the pickle, a storage, the byteorder) mutated, the zip
    rewritten around it with correct CRCs."""
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        members = [(info.filename, archive.read(info)) for info in archive.infolist()]
    index = rng.randrange(len(members))
    name, content = members[index]
    if name.endswith("data.pkl"):
        content = rng.choice(PICKLE_MUTATORS)(content, rng)
    else:
        content = rng.choice(BYTE_MUTATORS)(content, rng)
    members[index] = (name, content)
    if rng.random() < 0.1:
        members.pop(rng.randrange(len(members)))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as archive:
        for name, content in members:
            archive.writestr(name, content)
    return out.getvalue()


# ---------------------------------------------------------------- images

def png_chunks(data, rng):
    """Bytes of one PNG chunk mutated (often IHDR's width and height), every CRC rewritten,
    so the decoder, not the checksum, meets the damage."""
    chunks, at = [], 8
    while at + 8 <= len(data):
        (length,) = struct.unpack(">I", data[at:at + 4])
        chunks.append([data[at + 4:at + 8], data[at + 8:at + 8 + length]])
        at += 12 + length
    chunk = chunks[0] if rng.random() < 0.4 else rng.choice(chunks)
    if chunk[0] == b"IHDR" and rng.random() < 0.6:
        width, height = (rng.choice([0, 1, 2 ** 31 - 1, 2 ** 32 - 1, 65535, 30000,
                                     rng.randrange(1, 5000)]) for _ in range(2))
        chunk[1] = struct.pack(">II", width, height) + chunk[1][8:]
    else:
        chunk[1] = rng.choice(BYTE_MUTATORS)(chunk[1], rng)
    out = data[:8]
    for kind, body in chunks:
        out += struct.pack(">I", len(body)) + kind + body
        out += struct.pack(">I", zlib.crc32(kind + body))
    return out


def jpeg_size(data, rng):
    """The frame header's height and width (SOF0/SOF2) set to odd values."""
    for marker in (b"\xff\xc0", b"\xff\xc2"):
        at = data.find(marker)
        if at >= 0:
            size = struct.pack(">HH", *(rng.choice([0, 1, 65535, 30000, rng.randrange(1, 4000)])
                                        for _ in range(2)))
            return data[:at + 5] + size + data[at + 9:]
    return flip_bits(data, rng)
