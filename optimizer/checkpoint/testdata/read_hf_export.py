#!/usr/bin/env python3
"""An independent reader of Hugging Face style safetensors exports: the
Python standard library and the published formats only.

Usage: read_hf_export.py DIR MASTERS.json

DIR holds model.safetensors.index.json ({"metadata": {"total_size": N},
"weight_map": {tensor: file}}), the files it names, and for an FP8 export
quantization_config.json. MASTERS.json maps each parameter to its FP32
master values (flattened). The script checks that the files tile their
data sections, that the index maps exactly the tensors of the files and
total_size is their bytes, and every parameter's values:

  - BF16: the master rounded to nearest even, exactly;
  - F32: the master, exactly;
  - F8_E4M3 / F8_E5M2 with "<name>_scale_inv" of shape [ceil(R/128),
    ceil(C/128)] (quantization_config weight_block_size [128, 128]) or the
    scalar "<name>_scale" (per tensor): the code decoded (OCP FP8) times
    the scale of its block is within half a step of the format of the
    master: |x - q| <= |x| * 2^-(m+1) + s * 2^(emin-m-1) for m mantissa
    bits, emin the least normal exponent, s the scale.

It prints "ok: N parameters checked" and exits 0, or prints the first
difference and exits 1.
"""

import json
import math
import os
import struct
import sys

SIZES = {"F32": 4, "BF16": 2, "F8_E4M3": 1, "F8_E5M2": 1}
# (exponent bits, mantissa bits, bias) of the OCP FP8 formats.
FORMATS = {"F8_E4M3": (4, 3, 7), "F8_E5M2": (5, 2, 15)}


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def read_file(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack_from("<Q", data, 0)
    header = json.loads(data[8:8 + n].decode("utf-8"))
    meta = header.pop("__metadata__", {}) or {}
    if meta.get("format") != "pt":
        fail("%s: metadata %r" % (path, meta))
    body = data[8 + n:]
    spans, tensors = [], {}
    for name, t in header.items():
        begin, end = t["data_offsets"]
        count = math.prod(t["shape"])
        if t["dtype"] not in SIZES or end - begin != count * SIZES[t["dtype"]]:
            fail("%s: tensor %s: %s%r over [%d, %d)" % (path, name, t["dtype"], t["shape"], begin, end))
        spans.append((begin, end, name))
        tensors[name] = (t["dtype"], t["shape"], body[begin:end])
    at = 0
    for begin, end, name in sorted(spans):
        if begin != at:
            fail("%s: tensor %s starts at %d, the previous one ends at %d" % (path, name, begin, at))
        at = end
    if at != len(body):
        fail("%s: data section of %d bytes, tensors cover %d" % (path, len(body), at))
    return tensors


def bf16_round(x):
    """The bfloat16 bits of float32 x, rounded to nearest even."""
    (b,) = struct.unpack("<I", struct.pack("<f", x))
    if (b & 0x7F800000) == 0x7F800000 and (b & 0x7FFFFF):
        return (b >> 16) | 0x40
    return (b + 0x7FFF + ((b >> 16) & 1)) >> 16


def fp8_decode(code, dtype):
    e_bits, m_bits, bias = FORMATS[dtype]
    sign = -1.0 if code & 0x80 else 1.0
    e = (code >> m_bits) & ((1 << e_bits) - 1)
    m = code & ((1 << m_bits) - 1)
    if dtype == "F8_E4M3" and e == 15 and m == 7:
        return math.nan
    if dtype == "F8_E5M2" and e == 31:
        return math.nan if m else sign * math.inf
    if e == 0:
        return sign * m * 2.0 ** (1 - bias - m_bits)
    return sign * (1 + m / 2.0 ** m_bits) * 2.0 ** (e - bias)


def check_fp8(name, dtype, shape, raw, scales, masters, block):
    e_bits, m_bits, bias = FORMATS[dtype]
    rows, cols = shape
    s_dtype, s_shape, s_raw = scales
    s = struct.unpack("<%df" % (len(s_raw) // 4), s_raw)
    bcols = (cols + block - 1) // block if block else 1
    for i, x in enumerate(masters):
        r, c = divmod(i, cols)
        sc = s[(r // block) * bcols + c // block] if block else s[0]
        q = fp8_decode(raw[i], dtype) * sc
        bound = abs(x) * 2.0 ** -(m_bits + 1) + sc * 2.0 ** (1 - bias - m_bits - 1)
        if not abs(q - x) <= bound * (1 + 1e-6):
            fail("%s[%d]: %r dequantizes to %r (code %#x, scale %r), beyond %r" % (name, i, x, q, raw[i], sc, bound))


def main():
    if len(sys.argv) != 3:
        fail("usage: read_hf_export.py DIR MASTERS.json")
    out, masters_path = sys.argv[1], sys.argv[2]
    with open(os.path.join(out, "model.safetensors.index.json")) as f:
        index = json.load(f)
    with open(masters_path) as f:
        masters = json.load(f)
    block = 0
    qpath = os.path.join(out, "quantization_config.json")
    if os.path.exists(qpath):
        with open(qpath) as f:
            qc = json.load(f)
        if qc.get("quant_method") != "fp8" or qc.get("activation_scheme") != "dynamic":
            fail("quantization config %r" % qc)
        block = (qc.get("weight_block_size") or [0])[0]
    tensors, total = {}, 0
    for fname in sorted(set(index["weight_map"].values())):
        for name, t in read_file(os.path.join(out, fname)).items():
            if index["weight_map"].get(name) != fname:
                fail("%s holds %s, the index says %r" % (fname, name, index["weight_map"].get(name)))
            tensors[name] = t
            total += len(t[2])
    if set(tensors) != set(index["weight_map"]) or total != index["metadata"]["total_size"]:
        fail("the index maps %d tensors, total_size %r; the files hold %d of %d bytes" % (
            len(index["weight_map"]), index["metadata"]["total_size"], len(tensors), total))
    for name, vals in masters.items():
        if name not in tensors:
            fail("no tensor %s" % name)
        dtype, shape, raw = tensors[name]
        if math.prod(shape) != len(vals):
            fail("%s: shape %r for %d values" % (name, shape, len(vals)))
        if dtype == "F32":
            got = struct.unpack("<%df" % len(vals), raw)
            bad = [i for i, x in enumerate(vals) if struct.pack("<f", got[i]) != struct.pack("<f", x)]
        elif dtype == "BF16":
            got = struct.unpack("<%dH" % len(vals), raw)
            bad = [i for i, x in enumerate(vals) if got[i] != bf16_round(x)]
        else:
            scale = tensors.get(name + ("_scale_inv" if block else "_scale"))
            if scale is None or len(shape) != 2:
                fail("%s: %s%r without its scales" % (name, dtype, shape))
            check_fp8(name, dtype, shape, raw, scale, vals, block)
            bad = []
        if bad:
            fail("%s[%d]: %s differs from the master %r" % (name, bad[0], dtype, vals[bad[0]]))
    print("ok: %d parameters checked" % len(masters))


if __name__ == "__main__":
    main()
