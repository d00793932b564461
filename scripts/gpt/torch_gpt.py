#!/usr/bin/env python3
"""PyTorch reference of examples/gpt (issue 16).

The same model (GPT-2 style decoder, pre-LayerNorm, tanh GELU, learned
positions, head tied to the token embedding), the same initial weights
(the safetensors file `gpt -export-init` writes), the same batches in the
same order (the loader formula of examples/gpt/data: sequence g of a step
starts at SplitMix64(seed + g * 0x9E3779B97F4A7C15) mod (tokens - seq)).

  --check   float64 on the CPU: the loss of the first batch (step 0, rank 0,
            micro-batch 0) must equal the Go CPU model's reference loss in the
            file's metadata to 1e-9 (relative). Proves model, init and loader
            agree.
  (default) train on the GPU in standard mixed precision: FP32 master
            weights, BF16 autocast, fused AdamW (betas 0.9, 0.95, eps 1e-8,
            decay on tensors of two dimensions), warmup-cosine schedule as
            optimizer.WarmupCosine, gradient clipping, the step's global batch
            (world x micro x batch sequences) accumulated on one device;
            prints one line per step and writes the curves to --out (JSON).

Needs torch and numpy (the GPU machine's /opt/torch/.venv).
"""
import argparse
import json
import math
import re
import struct
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

M64 = (1 << 64) - 1


def read_tokens(path):
    with open(path, "rb") as f:
        head = f.read(24)
    if head[:8] != b"DOGPTTK1":
        sys.exit(f"{path}: not a token file")
    vocab = struct.unpack("<I", head[8:12])[0]
    n = struct.unpack("<Q", head[16:24])[0]
    toks = np.fromfile(path, dtype="<u2", offset=24)
    if len(toks) != n:
        sys.exit(f"{path}: {len(toks)} tokens, header says {n}")
    return vocab, toks


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    meta = header.pop("__metadata__", {})
    tensors = {}
    for name, t in header.items():
        if t["dtype"] != "F32":
            sys.exit(f"{path}: {name} is {t['dtype']}, want F32")
        b, e = t["data_offsets"]
        arr = np.frombuffer(data[b:e], dtype="<f4").copy().reshape(t["shape"])
        tensors[name] = torch.from_numpy(arr)
    return meta, tensors


def splitmix64(x):
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & M64
    return x ^ (x >> 31)


class Loader:
    """data.Loader of examples/gpt/data."""

    def __init__(self, tokens, seq, batch, world, micro, seed):
        self.tokens, self.seq, self.batch = tokens, seq, batch
        self.world, self.micro, self.seed = world, micro, seed

    def global_batch(self):
        return self.world * self.micro * self.batch

    def offset(self, g):
        return splitmix64((self.seed + g * 0x9E3779B97F4A7C15) & M64) % (len(self.tokens) - self.seq)

    def micro_batch(self, step, rank, micro):
        rows = []
        for b in range(self.batch):
            g = step * self.global_batch() + (rank * self.micro + micro) * self.batch + b
            off = self.offset(g)
            rows.append(self.tokens[off:off + self.seq + 1].astype(np.int64))
        a = torch.from_numpy(np.stack(rows))
        return a[:, :-1], a[:, 1:]


class Attention(nn.Module):
    def __init__(self, h, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(h, 3 * h)
        self.proj = nn.Linear(h, h)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(b, t, c))


class MLP(nn.Module):
    def __init__(self, h, ffn):
        super().__init__()
        self.fc = nn.Linear(h, ffn)
        self.proj = nn.Linear(ffn, h)

    def forward(self, x):
        return self.proj(F.gelu(self.fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, h, heads, ffn):
        super().__init__()
        self.ln1, self.attn = nn.LayerNorm(h), Attention(h, heads)
        self.ln2, self.mlp = nn.LayerNorm(h), MLP(h, ffn)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, layers, h, heads, ffn, vocab, seq):
        super().__init__()
        self.embed = nn.ModuleDict({"tokens": nn.Embedding(vocab, h), "positions": nn.Embedding(seq, h)})
        self.layers = nn.ModuleList([Block(h, heads, ffn) for _ in range(layers)])
        self.final_ln = nn.LayerNorm(h)

    def forward(self, idx, targets):
        t = idx.shape[1]
        x = self.embed["tokens"](idx) + self.embed["positions"].weight[:t]
        for blk in self.layers:
            x = blk(x)
        logits = self.final_ln(x) @ self.embed["tokens"].weight.t()
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.reshape(-1))  # FP32 under autocast


def torch_name(go_name):
    """The PyTorch parameter name of a distopt parameter name."""
    if go_name.startswith("embed."):
        return go_name + ".weight"
    return re.sub(r"^layer(\d+)\.", r"layers.\1.", go_name)


def build(meta, tensors):
    m = GPT(*(int(meta[k]) for k in ("layers", "hidden", "heads", "ffn", "vocab", "seq")))
    own = dict(m.named_parameters())
    if len(own) != len(tensors):
        sys.exit(f"the file holds {len(tensors)} tensors, the model has {len(own)} parameters")
    with torch.no_grad():
        for name, value in tensors.items():
            p = own[torch_name(name)]
            if tuple(p.shape) != tuple(value.shape):
                sys.exit(f"{name}: shape {tuple(value.shape)}, model {tuple(p.shape)}")
            p.copy_(value)
    return m


def lr_at(t, peak, low, warmup, total):
    """optimizer.WarmupCosine.LR."""
    if t <= 0:
        return 0.0
    if t < warmup:
        return peak * t / warmup
    if t >= total:
        return low
    span = total - warmup
    if span <= 0:
        return peak
    return low + (peak - low) * 0.5 * (1 + math.cos(math.pi * (t - warmup) / span))


def check(args, meta, tensors, train):
    m = build(meta, tensors).double()
    loader = Loader(train, int(meta["seq"]), int(meta["batch"]), int(meta["world"]), int(meta["micro"]), int(meta["seed"]))
    x, y = loader.micro_batch(0, 0, 0)
    with torch.no_grad():
        loss = m(x, y).item()
    want = float(meta["reference_loss"])
    rel = abs(loss - want) / want
    print(f"check: PyTorch float64 loss {loss:.12f}, distopt CPU reference {want:.12f}, relative difference {rel:.2e}")
    return 0 if rel < 1e-9 else 1


def valid_loss(m, valid, seq, windows, dev):
    total = 0.0
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
        for k in range(windows):
            w = torch.from_numpy(valid[k * seq:k * seq + seq + 1].astype(np.int64)).to(dev)
            total += m(w[None, :-1], w[None, 1:]).item()
    return total / windows


def train_run(args, meta, tensors, train, valid):
    dev = torch.device("cuda")
    m = build(meta, tensors).to(dev)
    seq = int(meta["seq"])
    loader = Loader(train, seq, int(meta["batch"]), int(meta["world"]), int(meta["micro"]), int(meta["seed"]))
    decay = [p for p in m.parameters() if p.dim() >= 2]
    no_decay = [p for p in m.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.wd}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8, fused=True)
    min_lr = args.min_lr if args.min_lr > 0 else args.lr / 10
    warmup = args.warmup if args.warmup > 0 else max(1, args.steps // 20)
    fwd = torch.compile(m) if args.compile else m
    parts = loader.world * loader.micro
    out = {"train": [], "valid": []}
    for step in range(args.steps):
        t0 = time.time()
        for g in opt.param_groups:
            g["lr"] = lr_at(step + 1, args.lr, min_lr, warmup, args.steps)
        total = 0.0
        for r in range(loader.world):
            for k in range(loader.micro):
                x, y = (z.to(dev, non_blocking=True) for z in loader.micro_batch(step, r, k))
                with torch.autocast("cuda", dtype=torch.bfloat16):
                    loss = fwd(x, y)
                (loss / parts).backward()
                total += loss.item() / parts
        norm = torch.nn.utils.clip_grad_norm_(m.parameters(), args.clip) if args.clip > 0 else torch.tensor(0.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        dt = time.time() - t0
        tokens = loader.global_batch() * seq
        print(f"step {step + 1:5d}/{args.steps}  loss {total:.4f}  grad norm {norm.item():.3f}  {tokens / dt:8.0f} tokens/s", flush=True)
        out["train"].append(total)
        if (args.eval_every > 0 and (step + 1) % args.eval_every == 0) or step + 1 == args.steps:
            v = valid_loss(m, valid, seq, args.eval_windows, dev)
            print(f"step {step + 1:5d}  validation loss {v:.4f}", flush=True)
            out["valid"].append([step + 1, v])
    if args.out:
        with open(args.out, "w") as f:
            json.dump(out, f)
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True, help="directory of train.tok and valid.tok")
    ap.add_argument("--init", required=True, help="safetensors file of gpt -export-init")
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--min-lr", type=float, default=0.0)
    ap.add_argument("--warmup", type=int, default=0)
    ap.add_argument("--clip", type=float, default=1.0)
    ap.add_argument("--wd", type=float, default=0.1)
    ap.add_argument("--eval-every", type=int, default=10)
    ap.add_argument("--eval-windows", type=int, default=8)
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    meta, tensors = read_safetensors(args.init)
    _, train = read_tokens(f"{args.data}/train.tok")
    _, valid = read_tokens(f"{args.data}/valid.tok")
    sys.exit(check(args, meta, tensors, train) if args.check else train_run(args, meta, tensors, train, valid))


if __name__ == "__main__":
    main()
