#!/usr/bin/env python3
"""torch_adamw.py: the PyTorch baseline of distopt-bench-update.

On one GPU, for a shard of N float32 parameters (default 2^28):
  1. torch.optim.AdamW(fused=True) step (float32 params, grads, moments;
     fused AdamW needs grads of the parameters' dtype);
  2. amax + scale + cast to torch.float8_e4m3fn, clamped to +-448 first
     (PyTorch's cast does not saturate): scale = 448 / amax (1 for amax 0);
  3. the two one after the other, as a training step would run them.
Times are CUDA-event means over --iters iterations after --warmup. Prints a
markdown table; bytes per element are those the sequence must move at the
least (AdamW: p, m, v read+write, fp32 grad read = 28; cast: read 4, write 1).
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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=1 << 28)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    a = ap.parse_args()
    dev = torch.device("cuda")
    g = torch.Generator(device=dev).manual_seed(0)
    p = torch.nn.Parameter(torch.randn(a.n, device=dev, generator=g) * 0.05)
    p.grad = torch.randn(a.n, device=dev, generator=g) * 0.01
    opt = torch.optim.AdamW([p], lr=1e-3, weight_decay=0.1, fused=True)
    fmax = torch.finfo(torch.float8_e4m3fn).max

    def cast():
        w = p.detach()
        amax = w.abs().max().float()
        scale = torch.where(amax > 0, fmax / amax, torch.ones_like(amax))
        q = (w * scale).clamp_(-fmax, fmax).to(torch.float8_e4m3fn)
        return q, scale.reciprocal()

    def both():
        opt.step()
        cast()

    src = torch.empty(a.n, device=dev)
    dst = torch.empty_like(src)
    t_copy = timed(lambda: dst.copy_(src), a.iters, a.warmup)
    t_adam = timed(opt.step, a.iters, a.warmup)
    t_cast = timed(cast, a.iters, a.warmup)
    t_both = timed(both, a.iters, a.warmup)
    n = a.n
    gbs = lambda b, t: b * n / (t * 1e-3) / 1e9
    print(f"# torch_adamw: {torch.cuda.get_device_name()}, torch {torch.__version__}, n = {n}, {a.iters} iterations\n")
    print(f"device-to-device copy: {t_copy:.3f} ms, {gbs(8, t_copy):.0f} GB/s (read + write)\n")
    print("| step | time | bytes/elem | GB/s |")
    print("|---|---|---|---|")
    print(f"| AdamW(fused=True) fp32 | {t_adam:.3f} ms | 28 | {gbs(28, t_adam):.0f} |")
    print(f"| amax + scale + clamp + cast to float8_e4m3fn | {t_cast:.3f} ms | 5 | {gbs(5, t_cast):.0f} |")
    print(f"| AdamW then cast | {t_both:.3f} ms | 33 | {gbs(33, t_both):.0f} |")


if __name__ == "__main__":
    main()
