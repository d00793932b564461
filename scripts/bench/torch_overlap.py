#!/usr/bin/env python3
"""torch_overlap.py: the PyTorch baseline of examples/multigpu -compute gemm.

One process per GPU, started by torchrun:

    torchrun --standalone --nproc-per-node 2 scripts/bench/torch_overlap.py --json torch_overlap.json

The model is torch_zero1.py's (the parameter set of examples/multigpu,
GPT13B by default) as a ZeRO-1 optimizer with BF16 parameters and gradients,
in buckets of parameters taken in order up to --bucket elements (a
parameter never split; each bucket padded to a multiple of d x 128
elements and sharded in d equal pieces), the FP32 master, fused AdamW
moments and the FP32 gradient shard sharded.

Compute is the same as examples/multigpu's: every linear layer (the 2-D
weights but the embeddings: QKV, attention output, MLP up and down, the
untied head) runs, per micro-batch of --tokens rows,

    forward   x (bf16, quantized per tensor to E4M3) x W^T, W the gathered
              BF16 weight cast per tensor to E4M3 (Transformer Engine's
              per-forward weight cast: the baseline gathers BF16, not FP8)
    backward  dy quantized per tensor to E5M2; dgrad dy x W (W transposed in
              FP8, made per use); wgrad dy^T x x written into the
              parameter's view of the flat BF16 gradient (out= when
              torch._scaled_mm takes it, else a copy, said in the JSON)

all with torch._scaled_mm (FP32 accumulation, bf16 out). Activations are
not chained: every layer reads one random input and output gradient (as
examples/multigpu). Gradients no GEMM makes (embeddings, norms, biases) are
a copy of their size.

Communication is overlapped with async collectives: each bucket's
reduce_scatter_tensor (AVG, bf16) starts, async_op=True, as soon as backward
has written the last of its gradients (buckets complete in reverse order);
the step waits for them on the stream (work.wait(): no host wait), widens
the shards into the FP32 gradient, all-reduces the squared norm (no .item():
nothing waits for the host), runs fused AdamW, casts the shards to bf16,
and starts one all_gather_into_tensor per bucket, async, in bucket order;
the next forward waits for a bucket's gather (work.wait()) before the
first layer that reads it.

Passes, each --steps iterations timed by CUDA events at the start of each
of --steps + 1 iterations on the current stream, after one untimed (the
host never waits inside a pass): compute (forward and backward, no collective), comm (the
step's collectives alone, started back to back: every reduce-scatter, the
norm all-reduce, every all-gather), step (the step alone, collectives included), overlapped (the
training iteration). optimizer = step - comm; exposed = overlapped -
compute - optimizer: the same accounting as examples/multigpu (medians,
slowest rank).
"""
import argparse
import json
import math
import os
import statistics

from torch_zero1 import gpt_params  # also sets NCCL_NVLS_ENABLE=0 and friends

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2
FMAX = {E4M3: 448.0, E5M2: 57344.0}
PASSES = ["compute", "comm", "step", "iteration"]


def quantize(x, dtype):
    """Per-tensor current scaling: (codes, scale_inv as a float32 scalar)."""
    amax = x.abs().amax().float()
    scale = torch.where(amax > 0, FMAX[dtype] / amax, torch.ones_like(amax))
    return (x * scale).clamp(-FMAX[dtype], FMAX[dtype]).to(dtype), scale.reciprocal()


class Model:
    """Parameters, buckets, buffers and the iteration of one rank."""

    def __init__(self, a, dev, rank, d):
        self.a, self.dev, self.rank, self.d = a, dev, rank, d
        self.params = gpt_params(a.layers, a.hidden, a.ffn, a.vocab, a.positions)
        self.gemm = [len(s) == 2 and not hp and not n.startswith("embed.") for n, s, hp in self.params]
        # buckets: consecutive parameters up to a.bucket elements
        self.buckets, self.bucket_of, cur, used = [], [], [], 0
        for i, (_, s, _) in enumerate(self.params):
            k = math.prod(s)
            if cur and used + k > a.bucket:
                self.buckets.append(cur)
                cur, used = [], 0
            cur.append(i)
            used += k
        self.buckets.append(cur)
        unit = d * 128
        self.offsets, sizes, off = [0] * len(self.params), [], 0
        for b in self.buckets:
            start, used = off, 0
            for i in b:
                self.offsets[i] = off + used
                used += math.prod(self.params[i][1])
            sizes.append((used + unit - 1) // unit * unit)
            off = start + sizes[-1]
        for b, _ in enumerate(self.buckets):
            self.bucket_of += [b] * len(self.buckets[b])
        self.npad = off
        self.flat_param = torch.zeros(off, dtype=torch.bfloat16, device=dev)
        self.flat_grad = torch.zeros(off, dtype=torch.bfloat16, device=dev)
        self.views = []  # per bucket: (param, grad, param shard, grad shard, master slice)
        mo, boff = 0, 0
        self.shard = sum(s // d for s in sizes)
        gen = torch.Generator(device=dev).manual_seed(1234)
        self.master = torch.empty(self.shard, dtype=torch.float32, device=dev).normal_(0, 0.02, generator=gen)
        self.master.grad = torch.zeros_like(self.master)
        for s in sizes:
            p, g, k = self.flat_param[boff:boff + s], self.flat_grad[boff:boff + s], s // d
            self.views.append((p, g, p[rank * k:(rank + 1) * k], g[rank * k:(rank + 1) * k], slice(mo, mo + k)))
            mo, boff = mo + k, boff + s
        self.opt = torch.optim.AdamW([self.master], lr=a.lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.1, fused=True)
        for (p, _, ps, _, ms) in self.views:
            ps.copy_(self.master[ms])
            dist.all_gather_into_tensor(p, ps)
        self.sq = torch.zeros((), dtype=torch.float32, device=dev)
        # activations: one random input and output gradient, sized for the widest layer
        t = a.tokens
        wide_in = max(s[1] for (_, s, _), g in zip(self.params, self.gemm) if g)
        wide_out = max(s[0] for (_, s, _), g in zip(self.params, self.gemm) if g)
        ag = torch.Generator(device=dev).manual_seed(7 + rank)
        self.x = torch.empty(t * wide_in, dtype=torch.bfloat16, device=dev).normal_(0, 1, generator=ag)
        self.dy = torch.empty(t * wide_out, dtype=torch.bfloat16, device=dev).normal_(0, 1 / 1024, generator=ag)
        self.kept = {}  # layer -> (x codes, x scale_inv, w codes, w scale_inv) from forward
        self.rs, self.ag = [None] * len(self.buckets), [None] * len(self.buckets)
        self.wgrad_out = self.probe_out()

    def probe_out(self):
        """Whether torch._scaled_mm writes into out= (else the wgrad is copied)."""
        a = torch.zeros(16, 32, device=self.dev).to(E4M3)
        b = torch.zeros(16, 32, device=self.dev).to(E4M3).t()
        one = torch.ones((), device=self.dev)
        out = torch.empty(16, 16, dtype=torch.bfloat16, device=self.dev)
        try:
            torch._scaled_mm(a, b, one, one, out_dtype=torch.bfloat16, out=out)
            return True
        except (TypeError, RuntimeError):
            return False

    def weight(self, i):
        n, s, _ = self.params[i]
        return self.flat_param[self.offsets[i]:self.offsets[i] + math.prod(s)].view(*s)

    def grad(self, i):
        n, s, _ = self.params[i]
        return self.flat_grad[self.offsets[i]:self.offsets[i] + math.prod(s)].view(*s)

    def wait_gather(self, b):
        if self.ag[b] is not None:
            self.ag[b].wait()
            self.ag[b] = None

    def forward(self):
        t = self.a.tokens
        for i, (_, s, _) in enumerate(self.params):
            self.wait_gather(self.bucket_of[i])
            if not self.gemm[i]:
                continue
            out, inn = s
            xq, xs = quantize(self.x[:t * inn].view(t, inn), E4M3)
            wq, ws = quantize(self.weight(i), E4M3)
            torch._scaled_mm(xq, wq.t(), xs, ws, out_dtype=torch.bfloat16)
            self.kept[i] = (xq, xs, wq, ws)

    def backward(self, ready, accumulate):
        t = self.a.tokens
        left = [len(b) for b in self.buckets]
        for i in reversed(range(len(self.params))):
            g = self.grad(i)
            if self.gemm[i]:
                out, inn = self.params[i][1]
                xq, xs, wq, ws = self.kept.pop(i)
                dyq, dys = quantize(self.dy[:t * out].view(t, out), E5M2)
                torch._scaled_mm(dyq, wq.t().contiguous().t(), dys, ws, out_dtype=torch.bfloat16)  # dgrad
                a, b = dyq.t().contiguous(), xq.t().contiguous().t()
                if self.wgrad_out and not accumulate:
                    torch._scaled_mm(a, b, dys, xs, out_dtype=torch.bfloat16, out=g)
                else:
                    dw = torch._scaled_mm(a, b, dys, xs, out_dtype=torch.bfloat16)
                    g.add_(dw) if accumulate else g.copy_(dw)
            else:
                n = g.numel()
                src = self.dy[:min(n, self.dy.numel())]
                flat = g.view(-1)
                for lo in range(0, n, src.numel()):
                    flat[lo:lo + src.numel()].copy_(src[:n - lo])
            b = self.bucket_of[i]
            left[b] -= 1
            if ready and left[b] == 0:
                self.start_rs(b)

    def start_rs(self, b):
        _, g, _, gs, _ = self.views[b]
        self.rs[b] = dist.reduce_scatter_tensor(gs, g, op=dist.ReduceOp.AVG, async_op=True)

    def step(self):
        for b, (_, _, _, gs, ms) in enumerate(self.views):
            if self.rs[b] is not None:
                self.rs[b].wait()
                self.rs[b] = None
            self.master.grad[ms].copy_(gs)
        torch.linalg.vector_norm(self.master.grad, out=self.sq)
        self.sq.square_()
        dist.all_reduce(self.sq)  # on the stream; nobody reads it on the host
        self.opt.step()
        for b, (p, _, ps, _, ms) in enumerate(self.views):
            ps.copy_(self.master[ms])
        for b, (p, _, ps, _, _) in enumerate(self.views):
            self.ag[b] = dist.all_gather_into_tensor(p, ps, async_op=True)

    def iteration(self, kind):
        if kind == "comm":  # every collective started, back to back, then waited for
            for b in reversed(range(len(self.buckets))):
                self.start_rs(b)
            norm = dist.all_reduce(self.sq, async_op=True)
            for b, (p, _, ps, _, _) in enumerate(self.views):
                self.ag[b] = dist.all_gather_into_tensor(p, ps, async_op=True)
            for b in reversed(range(len(self.buckets))):
                self.rs[b].wait()
                self.rs[b] = None
            norm.wait()
            for b in range(len(self.buckets)):
                self.wait_gather(b)
            return
        if kind == "step":
            for b in range(len(self.buckets)):
                self.wait_gather(b)
            for b in reversed(range(len(self.buckets))):
                self.start_rs(b)
            self.step()
            return
        for m in range(self.a.micro_batches):
            self.forward()
            last = m == self.a.micro_batches - 1
            self.backward(kind == "iteration" and last, m > 0)
        if kind == "iteration":
            self.step()

    def finish(self):
        for b in range(len(self.buckets)):
            self.wait_gather(b)
        torch.cuda.synchronize()


def run_pass(model, kind, n):
    events = [torch.cuda.Event(enable_timing=True) for _ in range(n + 1)]
    model.iteration(kind)  # untimed: leaves in flight what a timed iteration waits for
    for e in events:
        e.record()
        model.iteration(kind)
    model.finish()
    dist.barrier()
    return [events[k].elapsed_time(events[k + 1]) for k in range(n)]


def account(c, m, s, it):
    o = s - m
    return {"compute": c, "comm": m, "step": s, "iteration": it, "optimizer": o, "exposed": it - c - o}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=24)
    ap.add_argument("--hidden", type=int, default=2048)
    ap.add_argument("--ffn", type=int, default=8192)
    ap.add_argument("--vocab", type=int, default=50304)
    ap.add_argument("--positions", type=int, default=2048)
    ap.add_argument("--tokens", type=int, default=16384, help="rows of every GEMM per micro-batch")
    ap.add_argument("--micro-batches", type=int, default=1)
    ap.add_argument("--bucket", type=int, default=1 << 26, help="bucket size in elements")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--steps", type=int, default=10, help="timed iterations per pass")
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--json", default="")
    a = ap.parse_args()
    if a.tokens < 16 or a.tokens % 16:
        ap.error(f"--tokens {a.tokens}: want a positive multiple of 16")

    torch.set_grad_enabled(False)
    local = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local)
    dev = torch.device("cuda", local)
    dist.init_process_group("nccl", device_id=dev)
    rank, d = dist.get_rank(), dist.get_world_size()
    model = Model(a, dev, rank, d)
    n = sum(math.prod(s) for _, s, _ in model.params)
    if rank == 0:
        print(f"# torch {torch.__version__}, NCCL {'.'.join(map(str, torch.cuda.nccl.version()))}, {d} ranks, "
              f"{torch.cuda.get_device_name(dev)}; {n} parameters in {len(model.buckets)} buckets ({model.npad} padded); "
              f"{sum(model.gemm)} linear layers, {a.tokens} tokens x {a.micro_batches} micro-batches; "
              f"wgrad {'out=' if model.wgrad_out else 'copied'}", flush=True)
    for _ in range(a.warmup):
        model.iteration("iteration")
    model.finish()
    dist.barrier()
    times = {k: run_pass(model, k, a.steps) for k in PASSES}
    med = account(*(statistics.median(times[k]) for k in PASSES))
    if rank == 0:
        for k in range(a.steps):
            e = account(*(times[p][k] for p in PASSES))
            print(f"iteration {k + 1:3d}/{a.steps} compute {e['compute']:8.2f}  comm {e['comm']:7.2f}  step {e['step']:7.2f} "
                  f"(optimizer {e['optimizer']:6.2f})  overlapped {e['iteration']:8.2f} ms | exposed {e['exposed']:7.2f} ms", flush=True)
    ranks = [None] * d
    dist.all_gather_object(ranks, {"rank": rank, "medians": med, "times": times})
    if rank == 0:
        worst = account(*(max(r["medians"][k] for r in ranks) for k in ["compute", "comm", "step", "iteration"]))
        out = {
            "world": d, "params": n, "tokens": a.tokens, "micro_batches": a.micro_batches, "buckets": len(model.buckets),
            "medians": worst, "ranks": ranks, "wgrad_out": model.wgrad_out,
            "torch": torch.__version__, "nccl": ".".join(map(str, torch.cuda.nccl.version())),
            "gpu": torch.cuda.get_device_name(dev),
        }
        frac = worst["exposed"] / worst["comm"] if worst["comm"] > 0 else 0.0
        over = worst["iteration"] / (worst["compute"] + worst["optimizer"]) - 1
        print(f"\n== PyTorch overlapped ZeRO-1 (BF16 gather, torch._scaled_mm): {n} parameters on {d} ranks")
        print("medians (ms, slowest rank): " + "  ".join(f"{k} {v:.3f}" for k, v in worst.items()) +
              f"; exposed {100 * frac:.1f}% of comm, iteration {100 * over:+.1f}% of compute + optimizer", flush=True)
        if a.json:
            with open(a.json, "w") as f:
                json.dump(out, f, indent=2)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
