#!/usr/bin/env python3
"""torch_scaled_mm.py: the PyTorch baseline of distopt-bench-gemm.

On one GPU, torch._scaled_mm (cuBLASLt underneath) on the shapes of
distopt-bench-gemm: the linear layers of a GPT (hidden 2048, FFN 8192,
16384 tokens: QKV 2048->6144, proj 2048->2048, fc1 2048->8192,
fc2 8192->2048) and 8192^3, for each product of a linear layer:

  forward  Y  = X  @ W^T   (X [T,in] e4m3 row-major, W [out,in] e4m3 as stored)
  dgrad    dX = dY @ W     (dY e5m2; W must be column-major for _scaled_mm:
                            timed with W^T made beforehand, and with the
                            transpose W.t().contiguous() counted)
  wgrad    dW = dY^T @ X   (dY^T and X column-major made beforehand, and
                            with both transposes counted)

with per-tensor scales, and with 128x128 weight / 1x128 activation block
scales where this PyTorch build accepts them (errors are printed, not
hidden). Times are CUDA-event means over --iters after --warmup; TFLOP/s
counts 2*M*N*K. Prints a markdown table.
"""
import argparse

import torch


def timed(fn, iters, warmup):
    for _ in range(warmup):
        fn()
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / iters  # ms


def fp8(shape, dtype, dev, g):
    # the codes distopt-bench-gemm fills its operands with: uniform below
    # 0x78 (finite in both formats) with a random sign, scale_inv 1
    mag = torch.randint(0, 0x78, shape, device=dev, generator=g, dtype=torch.uint8)
    sign = torch.randint(0, 2, shape, device=dev, generator=g, dtype=torch.uint8) << 7
    return (mag | sign).view(dtype)


def scales(kind, rows, cols, dev, operand):
    """Scale tensors for a [rows, cols] K-major operand (K = cols)."""
    one = torch.ones((), device=dev)
    if kind == "tensor":
        return one
    kb = (cols + 127) // 128
    if operand == "act":  # 1x128: shape (rows, K/128), rows contiguous
        return torch.ones((kb, rows), device=dev).t()
    return torch.ones(((rows + 127) // 128, kb), device=dev)  # 128x128, row-major


def mm(a, b, sa, sb):
    return torch._scaled_mm(a, b, scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)


def products(T, fin, fout, kind, dev, g):
    x = fp8((T, fin), torch.float8_e4m3fn, dev, g)
    w = fp8((fout, fin), torch.float8_e4m3fn, dev, g)
    dy = fp8((T, fout), torch.float8_e5m2, dev, g)
    wt = w.t().contiguous()            # [in, out]
    dyt = dy.t().contiguous()          # [out, T]
    xt = x.t().contiguous()            # [in, T]
    s = lambda r, c, op: scales(kind, r, c, dev, op)
    sx, sw, sdy = s(T, fin, "act"), s(fout, fin, "w"), s(T, fout, "act")
    swt = s(fin, fout, "w")
    sdyt, sxt = s(fout, T, "act"), s(fin, T, "act")
    yield "forward", lambda: mm(x, w.t(), sx, sw.t() if kind != "tensor" else sw)
    yield "dgrad (W^T made before)", lambda: mm(dy, wt.t(), sdy, swt.t() if kind != "tensor" else swt)
    yield "dgrad (incl. W transpose)", lambda: mm(dy, w.t().contiguous().t(), sdy, swt.t() if kind != "tensor" else swt)
    yield "wgrad (dY^T, X^T made before)", lambda: mm(dyt, xt.t(), sdyt, sxt.t() if kind != "tensor" else sxt)
    yield "wgrad (incl. dY, X transposes)", lambda: mm(dy.t().contiguous(), x.t().contiguous().t(), sdyt, sxt.t() if kind != "tensor" else sxt)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=16384)
    ap.add_argument("--hidden", type=int, default=2048)
    ap.add_argument("--ffn", type=int, default=8192)
    ap.add_argument("--square", type=int, default=8192)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    a = ap.parse_args()
    dev = torch.device("cuda")
    g = torch.Generator(device=dev).manual_seed(0)
    print(f"# torch {torch.__version__}, {torch.cuda.get_device_name()}, cuBLASLt {torch.backends.cuda.preferred_blas_library()}\n")
    h, T = a.hidden, a.tokens
    shapes = [("qkv", T, h, 3 * h), ("proj", T, h, h), ("fc1", T, h, a.ffn), ("fc2", T, a.ffn, h)]
    if a.square:
        shapes.append(("square", a.square, a.square, a.square))
    print("| shape | T x in -> out | scales | product | ms | TFLOP/s |")
    print("|---|---|---|---|---|---|")
    for kind in ["tensor", "blocks"]:
        for name, t, fin, fout in shapes:
            flops = 2.0 * t * fin * fout
            for pname, fn in products(t, fin, fout, kind, dev, g):
                try:
                    ms = timed(fn, a.iters, a.warmup)
                    print(f"| {name} | {t}x{fin} -> {fout} | {kind} | {pname} | {ms:.3f} | {flops / ms / 1e9:.0f} |")
                except Exception as e:  # report, do not hide
                    msg = str(e).splitlines()[0][:160]
                    print(f"| {name} | {t}x{fin} -> {fout} | {kind} | {pname} | error: {msg} | |")
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
