#!/usr/bin/env python3
"""Load `distopt export` output with the `safetensors` package and PyTorch
(the GPU machine's venv has both) and compare it with the FP32 masters.

Usage: hf_export_check.py REFERENCE EXPORT [EXPORT ...]

REFERENCE is an export of the checkpoint with -dtype f32 (the FP32 masters,
bit for bit); each EXPORT is an export of the same checkpoint with -dtype
bf16 or fp8 (block or per-tensor scales, E4M3 or E5M2). For every export
the script:

  - reads model.safetensors.index.json and loads every file it names with
    safetensors.torch.load_file (and safe_open for the "format": "pt"
    metadata); the files hold exactly the tensors the weight map gives
    them, and total_size is their bytes;
  - BF16 tensors: equal, bit for bit, to the reference cast by PyTorch
    (reference.to(torch.bfloat16), round to nearest even);
  - FP8 tensors (torch.float8_e4m3fn / torch.float8_e5m2) with
    "<name>_scale_inv" [ceil(R/128), ceil(C/128)] (quantization_config.json
    weight_block_size [128, 128]) or the scalar "<name>_scale": per block
    (or tensor) amax a of the reference, scale = fmax / a in float32 (1 for
    a = 0); the stored scale equals 1 / scale bit for bit, and the codes
    equal PyTorch's own cast (reference * scale).to(fp8 dtype) bit for bit;
    the dequantized weights (code * stored scale) are reported as the
    largest error relative to the block's amax.

It prints one line per export and "ok" at the end, or the first mismatch
and exits 1. It runs on the CPU (bitwise comparisons need no GPU).
"""

import json
import os
import sys

import torch
from safetensors import safe_open
from safetensors.torch import load_file

BLOCK = 128
FP8 = {torch.float8_e4m3fn: 448.0, torch.float8_e5m2: 57344.0}


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def load_export(d):
    with open(os.path.join(d, "model.safetensors.index.json")) as f:
        index = json.load(f)
    tensors, total = {}, 0
    for fname in sorted(set(index["weight_map"].values())):
        path = os.path.join(d, fname)
        with safe_open(path, framework="pt") as f:
            if (f.metadata() or {}).get("format") != "pt":
                fail("%s: metadata %r" % (path, f.metadata()))
        part = load_file(path)
        for name, t in part.items():
            if index["weight_map"].get(name) != fname:
                fail("%s holds %s, the index says %r" % (path, name, index["weight_map"].get(name)))
            total += t.numel() * t.element_size()
        tensors.update(part)
    if set(tensors) != set(index["weight_map"]) or total != index["metadata"]["total_size"]:
        fail("%s: index and files disagree (%d tensors, %d bytes)" % (d, len(tensors), total))
    qc = None
    qpath = os.path.join(d, "quantization_config.json")
    if os.path.exists(qpath):
        with open(qpath) as f:
            qc = json.load(f)
    return tensors, qc


def block_view(x, rows, cols):
    """x padded with zeros to whole blocks, as [br, BLOCK, bc, BLOCK]."""
    br, bc = -(-rows // BLOCK), -(-cols // BLOCK)
    p = torch.zeros(br * BLOCK, bc * BLOCK, dtype=x.dtype)
    p[:rows, :cols] = x
    return p.view(br, BLOCK, bc, BLOCK), br, bc


def expand(s, rows, cols):
    return s.repeat_interleave(BLOCK, 0).repeat_interleave(BLOCK, 1)[:rows, :cols]


def check_fp8(name, w, tensors, ref, qc):
    fmax = FP8[w.dtype]
    rows, cols = ref.shape
    block = qc is not None and qc.get("weight_block_size") == [BLOCK, BLOCK]
    if block:
        s_inv = tensors.get(name + "_scale_inv")
        v, br, bc = block_view(ref.abs(), rows, cols)
        amax = v.amax(dim=(1, 3))
        if s_inv is None or tuple(s_inv.shape) != (br, bc):
            fail("%s: scale_inv %r" % (name, None if s_inv is None else tuple(s_inv.shape)))
    else:
        s_inv = tensors.get(name + "_scale")
        amax = ref.abs().amax().reshape(())
        if s_inv is None or s_inv.dim() != 0:
            fail("%s: weight_scale %r" % (name, None if s_inv is None else tuple(s_inv.shape)))
    if s_inv.dtype != torch.float32:
        fail("%s: scale dtype %s" % (name, s_inv.dtype))
    scale = torch.where(amax > 0, torch.tensor(fmax, dtype=torch.float32) / amax, torch.ones_like(amax))
    if not torch.equal((1 / scale).view(torch.int32), s_inv.view(torch.int32)):
        fail("%s: stored scales differ from 1/(fmax/amax)" % name)
    full = expand(scale, rows, cols) if block else scale
    want = (ref * full).to(w.dtype)
    if not torch.equal(want.view(torch.uint8), w.view(torch.uint8)):
        bad = (want.view(torch.uint8) != w.view(torch.uint8)).nonzero()[0].tolist()
        fail("%s%r: code %#x, PyTorch's cast %#x" % (name, bad, w.view(torch.uint8)[tuple(bad)].item(), want.view(torch.uint8)[tuple(bad)].item()))
    deq = w.float() * (expand(s_inv, rows, cols) if block else s_inv)
    amax_full = expand(amax, rows, cols) if block else amax
    return ((deq - ref).abs() / amax_full.clamp(min=1e-30)).max().item()


def main():
    if len(sys.argv) < 3:
        fail("usage: hf_export_check.py REFERENCE EXPORT [EXPORT ...]")
    ref, _ = load_export(sys.argv[1])
    if any(t.dtype != torch.float32 for t in ref.values()):
        fail("the reference is not an f32 export")
    for d in sys.argv[2:]:
        tensors, qc = load_export(d)
        n_bf16, n_fp8, worst = 0, 0, 0.0
        for name, r in ref.items():
            w = tensors.get(name)
            if w is None or tuple(w.shape) != tuple(r.shape):
                fail("%s: %s missing or of another shape" % (d, name))
            if w.dtype == torch.bfloat16:
                if not torch.equal(w.view(torch.int16), r.to(torch.bfloat16).view(torch.int16)):
                    fail("%s: %s differs from the reference in BF16" % (d, name))
                n_bf16 += 1
            elif w.dtype in FP8:
                worst = max(worst, check_fp8(name, w, tensors, r, qc))
                n_fp8 += 1
            else:
                fail("%s: %s has dtype %s" % (d, name, w.dtype))
        print("%s: %d BF16 tensors equal to torch's cast, %d FP8 weights equal to torch's cast with the same scales; "
              "largest dequantization error %.3g of the block amax" % (d, n_bf16, n_fp8, worst))
    print("ok")


if __name__ == "__main__":
    main()
