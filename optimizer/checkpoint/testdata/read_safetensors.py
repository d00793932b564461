#!/usr/bin/env python3
"""An independent safetensors reader: the Python standard library and the
published format only (8-byte little-endian header length, a JSON header of
{name: {dtype, shape, data_offsets}} plus an optional __metadata__ map of
strings, then the data section).

Usage: read_safetensors.py FILE EXPECTED.json

EXPECTED.json holds {"sha256": hex or null, "metadata": {key: value},
"tensors": {name: {"dtype": D, "shape": [...], "values": [...]}}}. The
script checks the file's layout rules, its SHA-256, every expected metadata
entry, and every expected tensor's dtype, shape and values (exactly). It
prints "ok: N tensors checked" and exits 0, or prints the first difference
and exits 1.
"""

import hashlib
import json
import struct
import sys

SIZES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4,
         "I16": 2, "I8": 1, "U64": 8, "U32": 4, "U16": 2, "U8": 1,
         "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1}


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def parse(data):
    if len(data) < 8:
        fail("shorter than the length prefix")
    (n,) = struct.unpack_from("<Q", data, 0)
    if 8 + n > len(data):
        fail("header of %d bytes past the end" % n)
    text = data[8:8 + n].decode("utf-8")
    if not text.startswith("{"):
        fail("header does not start with '{'")
    header = json.loads(text)
    meta = header.pop("__metadata__", {}) or {}
    for k, v in meta.items():
        if not isinstance(k, str) or not isinstance(v, str):
            fail("metadata %r: %r is not a string pair" % (k, v))
    body = data[8 + n:]
    spans = []
    for name, t in header.items():
        begin, end = t["data_offsets"]
        count = 1
        for d in t["shape"]:
            count *= d
        if t["dtype"] not in SIZES or end - begin != count * SIZES[t["dtype"]]:
            fail("tensor %s: %s%r over [%d, %d)" % (name, t["dtype"], t["shape"], begin, end))
        spans.append((begin, end, name))
    at = 0
    for begin, end, name in sorted(spans):
        if begin != at:
            fail("tensor %s starts at %d, the previous one ends at %d" % (name, begin, at))
        at = end
    if at != len(body):
        fail("data section of %d bytes, tensors cover %d" % (len(body), at))
    return meta, header, body


def decode(dtype, raw):
    if dtype == "F32":
        return list(struct.unpack("<%df" % (len(raw) // 4), raw))
    if dtype == "F64":
        return list(struct.unpack("<%dd" % (len(raw) // 8), raw))
    if dtype == "F16":
        return list(struct.unpack("<%de" % (len(raw) // 2), raw))
    if dtype == "BF16":
        halves = struct.unpack("<%dH" % (len(raw) // 2), raw)
        return [struct.unpack("<f", struct.pack("<I", h << 16))[0] for h in halves]
    fail("no decoder for %s" % dtype)


def main():
    if len(sys.argv) != 3:
        fail("usage: read_safetensors.py FILE EXPECTED.json")
    with open(sys.argv[1], "rb") as f:
        data = f.read()
    with open(sys.argv[2]) as f:
        want = json.load(f)
    if want.get("sha256") and hashlib.sha256(data).hexdigest() != want["sha256"]:
        fail("SHA-256 %s, want %s" % (hashlib.sha256(data).hexdigest(), want["sha256"]))
    meta, header, body = parse(data)
    for k, v in want.get("metadata", {}).items():
        if meta.get(k) != v:
            fail("metadata %s = %r, want %r" % (k, meta.get(k), v))
    for name, w in want["tensors"].items():
        t = header.get(name)
        if t is None:
            fail("no tensor %s" % name)
        if t["dtype"] != w["dtype"] or t["shape"] != w["shape"]:
            fail("tensor %s is %s%r, want %s%r" % (name, t["dtype"], t["shape"], w["dtype"], w["shape"]))
        begin, end = t["data_offsets"]
        got = decode(t["dtype"], body[begin:end])
        if got != w["values"]:
            i = next(i for i, (a, b) in enumerate(zip(got, w["values"])) if a != b)
            fail("tensor %s[%d] = %r, want %r" % (name, i, got[i], w["values"][i]))
    print("ok: %d tensors checked" % len(want["tensors"]))


if __name__ == "__main__":
    main()
