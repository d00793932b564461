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
            (world x micro x batch sequences) accumulated on one device (under
            torchrun: DDP, see below);
            attention by F.scaled_dot_product_attention (--sdpa flash or
            cudnn forces that kernel), --compile for torch.compile,
            --profile FILE for the CUDA time per kernel of the last two steps. Prints one line
            per step (loss, tokens/s, MFU, memory) and writes the curve to
            --out (JSON, the layout of examples/gpt/curve: train and
            validation losses as [step, loss], the speed, and the validation
            sequences), after every evaluation and at the end.

  --precision fp32: the same run without autocast and without TF32 (float32
            throughout): how far the BF16 reference itself is from full
            precision, the scale against which the FP8 runs' gaps are read.
  --precision tf32: float32 weights and activations, matrix products in TF32
            (10-bit mantissa, float32 accumulation): another precision
            point, several times faster than fp32 at large batches.

  Under torchrun with more than one process: DDP, one GPU per process (the
            --init file must have been exported for that many ranks; with
            --shape, the batch is per rank). Tokens/s count every rank's
            tokens, MFU is per GPU, memory is rank 0's.

  Validation (every --eval-every steps): --eval-windows sequences rounded
            down to a multiple of the batch, evenly strided over the whole
            validation split (eval_windows, data.EvalWindows of
            examples/gpt: the same windows as its -eval-spread runs);
            --no-eval-spread: the first ones.

  --shape small|1.3b|tiny without --init: the preset's shape with PyTorch's
            own random initialisation (N(0, 0.02) matrices), for speed and
            memory only (the 1.3B weights are too large to export).

Speed is counted as examples/gpt counts it: tokens/s over all steps but the
first three (evaluations left out); MFU = tokens/s x flops_per_token /
989e12 (the dense BF16 peak of an H100/H200 SXM, gpu.go's peakBF16) with
flops_per_token = model.Config.FlopsPerToken: 6 x (layers x (4h^2 + 2hf) +
vocab x h) + 12 x layers x h x seq. Memory: torch.cuda.max_memory_allocated
(peak_alloc_bytes) and the most the driver reported in use on the device
(torch.cuda.mem_get_info, every process included: peak_used_bytes).

Needs torch and numpy (the GPU machine's /opt/torch/.venv).
"""
import argparse
import contextlib
import json
import math
import os
import re
import struct
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

M64 = (1 << 64) - 1
PEAK_BF16 = 989e12  # examples/gpt/gpu.go peakBF16
UNTIMED_STEPS = 3  # examples/gpt/record.go untimedSteps
PROFILED_STEPS = 2  # --profile: the last two steps
AUTOCAST = True  # --precision bf16 (main sets it)
PRESETS = {  # model.Presets: layers, hidden, heads, ffn, vocab, seq
    "tiny": (2, 64, 1, 256, 256, 64),
    "small": (12, 768, 12, 3072, 256, 1024),
    "1.3b": (24, 2048, 16, 8192, 256, 2048),
}


def flops_per_token(layers, h, ffn, vocab, seq):
    """model.Config.FlopsPerToken."""
    return 6 * (layers * (4 * h * h + 2 * h * ffn) + vocab * h) + 12 * layers * h * seq


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


def eval_windows(count, total, spread):
    """data.EvalWindows: the validation windows (window k covers
    valid[k*seq : k*seq+seq+1]) an evaluation of count sequences reads out
    of total: with spread, floor(j*total/count) for j < count, evenly
    strided over the whole split; without, the first count."""
    if count < 1 or count > total:
        sys.exit(f"{count} evaluation windows out of {total}: want between 1 and {total}")
    return [j * total // count if spread else j for j in range(count)]


def valid_loss(m, valid, seq, windows, batch, dev, spread):
    """The mean loss over windows validation sequences rounded down to a
    multiple of batch (those of eval_windows for that count), batch at a
    time, as examples/gpt."""
    groups = windows // batch
    if groups < 1:
        sys.exit("--eval-windows must be at least the batch")
    ks = eval_windows(groups * batch, (len(valid) - 1) // seq if len(valid) > seq else 0, spread)
    total = 0.0
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=AUTOCAST):
        for g in range(groups):
            rows = [valid[k * seq:k * seq + seq + 1].astype(np.int64) for k in ks[g * batch:(g + 1) * batch]]
            w = torch.from_numpy(np.stack(rows)).to(dev)
            total += m(w[:, :-1], w[:, 1:]).item()
    return total / groups


def random_init(shape, dev):
    """The preset's shape with PyTorch's initialisation, made on dev
    (speed runs)."""
    layers, h, heads, ffn, vocab, seq = shape
    with torch.device(dev):
        m = GPT(layers, h, heads, ffn, vocab, seq)
        for p in m.parameters():
            if p.dim() >= 2:
                nn.init.normal_(p, std=0.02)
    meta = dict(zip(("layers", "hidden", "heads", "ffn", "vocab", "seq"), map(str, shape)))
    return m, meta


class Memory:
    """Peak device memory: allocated by PyTorch, and in use on the device."""

    def __init__(self):
        self.peak_used = 0

    def sample(self):
        free, total = torch.cuda.mem_get_info()
        self.peak_used = max(self.peak_used, total - free)
        return torch.cuda.max_memory_allocated(), total - free


def write_curve(path, out, timed_tokens, timed_s, fpt, mem, world=1):
    if not path:
        return
    if timed_s > 0:
        tps = timed_tokens / timed_s
        out["speed"] = {"tokens_per_s": tps, "mfu": tps * fpt / PEAK_BF16 / world,
                        "peak_alloc_bytes": torch.cuda.max_memory_allocated(), "peak_used_bytes": mem.peak_used}
    with open(path + ".tmp", "w") as f:
        json.dump(finite_json(out), f, allow_nan=False)
    os.replace(path + ".tmp", path)


def finite_json(v):
    """v with every non-finite float written as the string examples/gpt/curve
    reads ("NaN", "+Inf", "-Inf"): JSON has no NaN."""
    if isinstance(v, float) and not math.isfinite(v):
        return "NaN" if math.isnan(v) else ("+Inf" if v > 0 else "-Inf")
    if isinstance(v, dict):
        return {k: finite_json(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [finite_json(x) for x in v]
    return v


def train_run(args, meta, tensors, train, valid):
    # Under torchrun with WORLD_SIZE > 1: one process per GPU, DDP (each
    # rank reads its own micro-batches; the FP32 gradients all-reduced in
    # buckets during backward, the buckets being views of the gradients so
    # that DDP holds no second copy); otherwise one GPU computes the whole
    # global batch.
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    dev = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    torch.cuda.set_device(dev)
    if world > 1:
        torch.distributed.init_process_group("nccl", device_id=dev)
    if tensors is None:
        m, meta = random_init(PRESETS[args.shape], dev)
        meta.update(batch=str(args.batch or 4), micro=str(args.micro or 1), world=str(world), seed=str(args.seed))
    else:
        m = build(meta, tensors)
        if world > 1 and int(meta["world"]) != world:
            sys.exit(f"{args.init} was exported for {meta['world']} ranks; torchrun started {world}")
    m = m.to(dev)
    seq = int(meta["seq"])
    batch = args.batch or int(meta["batch"])
    micro = args.micro or int(meta["micro"])
    loader = Loader(train, seq, batch, int(meta["world"]), micro, int(meta["seed"]))
    ranks = [rank] if world > 1 else range(loader.world)  # the loader ranks this process computes
    ddp = torch.nn.parallel.DistributedDataParallel(m, device_ids=[dev.index], gradient_as_bucket_view=True) if world > 1 else None
    decay = [p for p in m.parameters() if p.dim() >= 2]
    no_decay = [p for p in m.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.wd}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8, fused=True)
    min_lr = args.min_lr if args.min_lr > 0 else args.lr / 10
    warmup = args.warmup if args.warmup > 0 else max(1, args.steps // 20)
    fwd = ddp if ddp is not None else m
    fwd = torch.compile(fwd) if args.compile else fwd
    parts = loader.world * loader.micro
    fpt = flops_per_token(*(int(meta[k]) for k in ("layers", "hidden", "ffn", "vocab", "seq")))
    nparams = sum(p.numel() for p in m.parameters())
    if rank != 0:
        sys.stdout = open(os.devnull, "w")
        args.out = ""
    print(f"torch on {world} x {torch.cuda.get_device_name()}: {nparams} parameters, {loader.global_batch()} sequences of {seq} per step, "
          f"compile {args.compile}, attention {args.sdpa}{', DDP' if ddp is not None else ''}", flush=True)
    # the validation sequences, recorded as examples/gpt records its own
    # (curve.Eval): curves refuses to compare runs validated on others
    out = {"name": args.name, "train": [], "valid": [],
           "eval": {"windows": args.eval_windows // batch * batch, "spread": args.eval_spread}}
    mem = Memory()
    timed_tokens, timed_s = 0, 0.0
    prof = None
    with sdpa_context(args.sdpa):
        for step in range(args.steps):
            prof = profiler_for(args, step) or prof
            t0 = time.time()
            for g in opt.param_groups:
                g["lr"] = lr_at(step + 1, args.lr, min_lr, warmup, args.steps)
            total = torch.zeros((), device=dev, dtype=torch.float64)  # summed in double, as the float losses were
            for r in ranks:
                for k in range(loader.micro):
                    x, y = (z.to(dev, non_blocking=True) for z in loader.micro_batch(step, r, k))
                    sync = ddp is None or k == loader.micro - 1
                    with (contextlib.nullcontext() if sync else ddp.no_sync()):
                        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=AUTOCAST):
                            loss = fwd(x, y)
                        # DDP averages over the ranks: each rank's part is
                        # 1/micro of its loss, the sum over ranks /world.
                        (loss / (loader.micro if ddp is not None else parts)).backward()
                    total += loss.detach().double() / parts
            if ddp is not None:
                torch.distributed.all_reduce(total)
            total = total.item()
            norm = torch.nn.utils.clip_grad_norm_(m.parameters(), args.clip) if args.clip > 0 else torch.tensor(0.0)
            opt.step()
            opt.zero_grad(set_to_none=True)
            torch.cuda.synchronize()
            dt = time.time() - t0
            tokens = loader.global_batch() * seq
            if step >= UNTIMED_STEPS:
                timed_tokens, timed_s = timed_tokens + tokens, timed_s + dt
            alloc, used = mem.sample()
            print(f"step {step + 1:5d}/{args.steps}  loss {total:.4f}  grad norm {norm.item():.3f}  {tokens / dt:8.0f} tokens/s  "
                  f"MFU {100 * tokens * fpt / dt / PEAK_BF16 / world:.1f}%  {1000 * dt:.1f} ms  "
                  f"memory {alloc / 2**30:.2f} GiB peak allocated, {used / 2**30:.2f} GiB in use on the device", flush=True)
            out["train"].append([step + 1, total])
            if (args.eval_every > 0 and (step + 1) % args.eval_every == 0) or step + 1 == args.steps:
                v = valid_loss(m, valid, seq, args.eval_windows, batch, dev, args.eval_spread)
                print(f"step {step + 1:5d}  validation loss {v:.4f} ({v / math.log(2):.3f} bits per byte)", flush=True)
                out["valid"].append([step + 1, v])
                write_curve(args.out, out, timed_tokens, timed_s, fpt, mem, world)
    write_curve(args.out, out, timed_tokens, timed_s, fpt, mem, world)
    if prof is not None:
        write_profile(args, prof)
    if ddp is not None:
        torch.distributed.destroy_process_group()
    if timed_s > 0:
        tps = timed_tokens / timed_s
        print(f"speed: {tps:.0f} tokens/s, MFU {100 * tps * fpt / PEAK_BF16 / world:.1f}%; peak memory "
              f"{torch.cuda.max_memory_allocated() / 2**30:.2f} GiB allocated, {mem.peak_used / 2**30:.2f} GiB in use on the device", flush=True)
    return 0


def sdpa_context(which):
    """The attention kernels F.scaled_dot_product_attention may use."""
    if which in ("flash", "cudnn"):
        from torch.nn.attention import SDPBackend, sdpa_kernel
        return sdpa_kernel(SDPBackend.FLASH_ATTENTION if which == "flash" else SDPBackend.CUDNN_ATTENTION)
    return contextlib.nullcontext()


def profiler_for(args, step):
    """A torch.profiler over the steps --profile names (the last two), or None."""
    if not args.profile or step != args.steps - PROFILED_STEPS:
        return None
    from torch.profiler import ProfilerActivity, profile
    prof = profile(activities=[ProfilerActivity.CUDA])
    prof.__enter__()
    return prof


def write_profile(args, prof):
    """Writes the CUDA kernels' time per step, by kernel name, as JSON."""
    torch.cuda.synchronize()
    prof.__exit__(None, None, None)
    rows = [{"name": e.key, "us": e.device_time_total / PROFILED_STEPS, "count": e.count / PROFILED_STEPS}
            for e in prof.key_averages() if e.device_time_total > 0]
    with open(args.profile, "w") as f:
        json.dump({"steps": PROFILED_STEPS, "kernels": rows}, f, indent=1)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True, help="directory of train.tok and valid.tok")
    ap.add_argument("--init", default="", help="safetensors file of gpt -export-init")
    ap.add_argument("--shape", choices=sorted(PRESETS), default="", help="without --init: this preset, randomly initialised (speed only)")
    ap.add_argument("--batch", type=int, default=0, help="sequences per micro-batch (0: the file's)")
    ap.add_argument("--micro", type=int, default=0, help="micro-batches per step (0: the file's)")
    ap.add_argument("--seed", type=int, default=1, help="batch order seed without --init")
    ap.add_argument("--sdpa", choices=["auto", "flash", "cudnn"], default="auto",
                    help="attention kernels of scaled_dot_product_attention (flash or cudnn force that backend)")
    ap.add_argument("--profile", default="", help="write the CUDA time per kernel of the last two steps (torch.profiler) to this JSON file")
    ap.add_argument("--name", default="torch", help="the run's name in the curve")
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--min-lr", type=float, default=0.0)
    ap.add_argument("--warmup", type=int, default=0)
    ap.add_argument("--clip", type=float, default=1.0)
    ap.add_argument("--wd", type=float, default=0.1)
    ap.add_argument("--eval-every", type=int, default=10)
    ap.add_argument("--eval-windows", type=int, default=8)
    ap.add_argument("--eval-spread", action=argparse.BooleanOptionalAction, default=True,
                    help="validation sequences evenly strided over the whole split, as examples/gpt -eval-spread (the default); "
                         "--no-eval-spread: the first --eval-windows, as runs before it")
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--precision", choices=["bf16", "fp32", "tf32"], default="bf16",
                    help="bf16: BF16 autocast (the reference); fp32: no autocast and no TF32 (how far BF16 itself is from full precision); tf32: no autocast, TF32 matrix products")
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    global AUTOCAST
    AUTOCAST = args.precision == "bf16"
    if not AUTOCAST:
        tf32 = args.precision == "tf32"
        torch.backends.cuda.matmul.allow_tf32 = tf32
        torch.backends.cudnn.allow_tf32 = tf32
    if bool(args.init) == bool(args.shape):
        sys.exit("give --init FILE or --shape PRESET (not both)")
    meta, tensors = read_safetensors(args.init) if args.init else ({}, None)
    _, train = read_tokens(f"{args.data}/train.tok")
    _, valid = read_tokens(f"{args.data}/valid.tok")
    if args.check:
        if "reference_loss" not in meta:
            sys.exit(f"--check: {args.init or args.shape} has no reference loss (exported with -export-check=false?)")
        sys.exit(check(args, meta, tensors, train))
    sys.exit(train_run(args, meta, tensors, train, valid))


if __name__ == "__main__":
    main()
