#!/usr/bin/env python3
"""torch_zero1.py: the PyTorch ZeRO-1 baseline of examples/multigpu.

One process per GPU, started by torchrun:

    torchrun --standalone --nproc-per-node 2 scripts/bench/torch_zero1.py --json torch.json

The model is the parameter set of examples/multigpu (plan.GPTConfig
Params: embeddings, Layers blocks, final norm, untied head; GPT13B by
default), every tensor a view of ONE flat buffer, padded to a multiple of
d x 128 elements so that it splits into d equal shards. Per rank it holds,
as a ZeRO-1 optimizer with BF16 parameters does (DeepSpeed's bf16 optimizer
keeps the same buffers):

    flat_param  bf16, all Npad parameters            2 bytes/param
    flat_grad   bf16, all Npad gradients             2 bytes/param
    master      fp32 shard (Npad/d)                  4/d
    exp_avg, exp_avg_sq  fp32 shard (fused AdamW)    8/d
    master.grad fp32 shard: fused AdamW wants the
                gradient in the parameter's dtype    4/d

that is 4 + 16/d bytes per parameter (predicted_bytes in the JSON). One step:

    reduce_scatter  dist.reduce_scatter_tensor(AVG) of flat_grad in place into
                    this rank's shard of it (bf16 on the wire)
    norm            the shard widened to fp32 into master.grad, its squared
                    norm, one all_reduce of that scalar, read on the host with
                    the non-finite check (what distopt's norm phase does)
    update          torch.optim.AdamW(fused=True).step() on the fp32 shard
    cast            the new master shard cast to bf16 into flat_param's shard
    all_gather      dist.all_gather_into_tensor of flat_param in place (bf16)

Gradients are written before each step, outside the timing, by normal_() on
each tensor's view of flat_grad with the standard deviation of
examples/multigpu's gradient model (fan-in scaling, per-block decay, norms
a tenth of biases); the token embedding is dense here (its sparsity does
not change the work of any phase).

Timing as examples/multigpu: every step starts with a barrier after the
gradients are written; --warmup steps, then --steps with
torch.cuda.synchronize() after each phase and a barrier after the update
and the cast (median per phase, slowest rank in phase_ms), then
--plain-steps without those waits (median wall time: plain_step_ms). Memory per rank: torch.cuda.max_memory_allocated and
max_memory_reserved, and NVML (pynvml) for this process: after CUDA
initialisation (context), after the process group and a warm-up of each
collective (NCCL), and the peak over the steps. NVML measures the process's
usedGpuMemory (nvmlDeviceGetComputeRunningProcesses), else the device's
used memory minus what was used before this process started its context.
NVLink multicast stays off (NCCL_NVLS_ENABLE=0).
"""
import argparse
import json
import math
import os
import statistics
import time

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
os.environ.setdefault("NVSHMEM_DISABLE_NVLS", "1")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

PHASES = ["reduce_scatter", "norm", "update", "cast", "all_gather"]


def gpt_params(layers, hidden, ffn, vocab, positions):
    """(name, shape, high_precision) in plan.GPTConfig.Params order."""
    h, f = hidden, ffn
    ps = [("embed.tokens", (vocab, h), False), ("embed.positions", (positions, h), False)]
    for l in range(layers):
        for name, shape, hp in [
            ("ln1.weight", (h,), True), ("ln1.bias", (h,), True),
            ("attn.qkv.weight", (3 * h, h), False), ("attn.qkv.bias", (3 * h,), True),
            ("attn.out.weight", (h, h), False), ("attn.out.bias", (h,), True),
            ("ln2.weight", (h,), True), ("ln2.bias", (h,), True),
            ("mlp.up.weight", (f, h), False), ("mlp.up.bias", (f,), True),
            ("mlp.down.weight", (h, f), False), ("mlp.down.bias", (h,), True),
        ]:
            ps.append((f"layer{l}.{name}", shape, hp))
    ps += [("final_ln.weight", (h,), True), ("final_ln.bias", (h,), True), ("head.weight", (vocab, h), False)]
    return ps


def grad_std(name, shape, hp, layers, hidden, scale, decay):
    """examples/multigpu's gradModel.std."""
    if name.startswith("layer"):
        layer = int(name[5:name.index(".")])
        f = decay ** (layers - 1 - layer)
    elif name.startswith("embed."):
        f = decay ** layers
    else:
        f = 1.0
    h = math.sqrt(hidden)
    if "ln" in name:
        return scale * f / h / 10
    if hp or name.startswith("embed."):
        return scale * f / h
    return scale * f / math.sqrt(shape[-1])


class GPUMemory:
    """This process's device memory as NVML reports it (see the module doc)."""

    def __init__(self, index):
        """index is the CUDA ordinal; call before CUDA is initialised (since
        CUDA 12, set_device creates the context). NVML numbers GPUs in PCI
        order, as CUDA does for identical GPUs; CUDA_VISIBLE_DEVICES is
        followed when it lists ordinals."""
        self.nvml = None
        visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
        if visible and all(v.strip().isdigit() for v in visible.split(",")):
            index = int(visible.split(",")[index])
        try:
            import pynvml
            pynvml.nvmlInit()
            self.nvml = pynvml
            self.dev = pynvml.nvmlDeviceGetHandleByIndex(index)
            self.idle = pynvml.nvmlDeviceGetMemoryInfo(self.dev).used
        except Exception as e:  # noqa: BLE001
            print(f"# NVML unavailable: {e}", flush=True)
            self.nvml = None
        self.measure = ""

    def used(self):
        if self.nvml is None:
            return 0
        try:
            for p in self.nvml.nvmlDeviceGetComputeRunningProcesses(self.dev):
                if p.pid == os.getpid() and p.usedGpuMemory:
                    self.measure = "process"
                    return int(p.usedGpuMemory)
        except Exception:  # noqa: BLE001
            pass
        self.measure = "device"
        return int(self.nvml.nvmlDeviceGetMemoryInfo(self.dev).used) - int(self.idle)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=24)
    ap.add_argument("--hidden", type=int, default=2048)
    ap.add_argument("--ffn", type=int, default=8192)
    ap.add_argument("--vocab", type=int, default=50304)
    ap.add_argument("--positions", type=int, default=2048)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--plain-steps", type=int, default=10)
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--grad-scale", type=float, default=1e-3)
    ap.add_argument("--grad-decay", type=float, default=0.97)
    ap.add_argument("--align", type=int, default=128)
    ap.add_argument("--json", default="")
    a = ap.parse_args()

    torch.set_grad_enabled(False)
    local = int(os.environ["LOCAL_RANK"])
    mem = GPUMemory(local)
    torch.cuda.set_device(local)
    dev = torch.device("cuda", local)
    torch.zeros(1, device=dev)  # the CUDA context
    torch.cuda.synchronize()
    context = mem.used()

    dist.init_process_group("nccl", device_id=dev)
    rank, d = dist.get_rank(), dist.get_world_size()
    warm = [torch.zeros(256 * d, dtype=torch.uint8, device=dev), torch.zeros(256, dtype=torch.uint8, device=dev),
            torch.zeros(256 * d, dtype=torch.bfloat16, device=dev), torch.zeros(256, dtype=torch.bfloat16, device=dev),
            torch.zeros(1, device=dev)]
    dist.all_gather_into_tensor(warm[0], warm[1])
    dist.reduce_scatter_tensor(warm[3], warm[2], op=dist.ReduceOp.AVG)
    dist.all_reduce(warm[4])
    torch.cuda.synchronize()
    del warm
    nccl = mem.used() - context
    torch.cuda.reset_peak_memory_stats(dev)

    params = gpt_params(a.layers, a.hidden, a.ffn, a.vocab, a.positions)
    n = sum(math.prod(s) for _, s, _ in params)
    unit = d * a.align
    npad = (n + unit - 1) // unit * unit
    shard = npad // d
    lo, hi = rank * shard, (rank + 1) * shard
    if rank == 0:
        print(f"# torch {torch.__version__}, NCCL {'.'.join(map(str, torch.cuda.nccl.version()))}, {d} ranks, "
              f"{torch.cuda.get_device_name(dev)}; {n} parameters ({npad} padded, shard {shard}); "
              f"context {context / 2**30:.3f} GiB, NCCL {nccl / 2**30:.3f} GiB (NVML {mem.measure})", flush=True)

    flat_param = torch.zeros(npad, dtype=torch.bfloat16, device=dev)
    flat_grad = torch.zeros(npad, dtype=torch.bfloat16, device=dev)
    gen = torch.Generator(device=dev).manual_seed(1234)  # the same initial values on every rank
    master = torch.empty(shard, dtype=torch.float32, device=dev).normal_(0, 0.02, generator=gen)
    master.grad = torch.empty_like(master)
    opt = torch.optim.AdamW([master], lr=a.lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.1, fused=True)
    pshard, gshard = flat_param[lo:hi], flat_grad[lo:hi]
    pshard.copy_(master)
    dist.all_gather_into_tensor(flat_param, pshard)

    views, off = [], 0
    for name, shape, hp in params:
        k = math.prod(shape)
        views.append((flat_grad[off:off + k], grad_std(name, shape, hp, a.layers, a.hidden, a.grad_scale, a.grad_decay)))
        off += k
    ggen = torch.Generator(device=dev).manual_seed(1 + rank)  # each rank its own micro-batch

    def make_grads():
        for v, std in views:
            v.normal_(0, std, generator=ggen)

    def step(sync):
        marks = [time.perf_counter()]

        def mark(barrier=False):
            if sync:
                torch.cuda.synchronize()
                if barrier:  # as examples/multigpu's phaseSync after its kernels
                    dist.barrier()
            marks.append(time.perf_counter())

        dist.reduce_scatter_tensor(gshard, flat_grad, op=dist.ReduceOp.AVG)
        mark()
        master.grad.copy_(gshard)
        sq = torch.linalg.vector_norm(master.grad).square()
        dist.all_reduce(sq)
        norm2 = sq.item()
        if not math.isfinite(norm2):
            raise RuntimeError("non-finite gradients")
        mark()
        opt.step()
        mark(barrier=True)
        pshard.copy_(master)
        mark(barrier=True)
        dist.all_gather_into_tensor(flat_param, pshard)
        torch.cuda.synchronize()
        marks.append(time.perf_counter())
        if not sync:
            marks = [marks[0], marks[-1]]
        return [(marks[i + 1] - marks[i]) * 1e3 for i in range(len(marks) - 1)], math.sqrt(norm2)

    barrier_ms = []
    for _ in range(20):
        t = time.perf_counter()
        dist.barrier()
        barrier_ms.append((time.perf_counter() - t) * 1e3)

    timed, plain, peak = [], [], 0
    total = a.warmup + a.steps + a.plain_steps
    for s in range(total):
        make_grads()
        torch.cuda.synchronize()
        dist.barrier()
        synced = s < a.warmup + a.steps
        ms, norm = step(synced)
        peak = max(peak, mem.used())
        kind = "warm-up" if s < a.warmup else ("timed" if synced else "plain")
        if s >= a.warmup:
            (timed if synced else plain).append(ms if synced else ms[0])
        if rank == 0:
            parts = "  ".join(f"{p} {v:6.2f}" for p, v in zip(PHASES, ms)) if synced else f"wall {ms[0]:7.2f}"
            print(f"step {s + 1:3d}/{total} {kind:<7} {parts} ms | grad norm {norm:.4g}", flush=True)

    me = {
        "rank": rank,
        "phase_ms": {p: statistics.median(t[i] for t in timed) for i, p in enumerate(PHASES)},
        "step_ms": statistics.median(sum(t) for t in timed),
        "plain_step_ms": statistics.median(plain) if plain else 0.0,
        "max_allocated": torch.cuda.max_memory_allocated(dev),
        "max_reserved": torch.cuda.max_memory_reserved(dev),
        "nvml_context": context,
        "nvml_nccl": nccl,
        "nvml_peak": peak,
        "nvml_measure": mem.measure,
    }
    ranks = [None] * d
    dist.all_gather_object(ranks, me)
    if rank == 0:
        out = {
            "world": d,
            "params": n,
            "padded_params": npad,
            "phase_ms": {p: max(r["phase_ms"][p] for r in ranks) for p in PHASES},
            "step_ms": max(r["step_ms"] for r in ranks),
            "plain_step_ms": max(r["plain_step_ms"] for r in ranks),
            "predicted_bytes": 2 * npad + 2 * npad + 16 * shard,
            "barrier_ms": statistics.median(barrier_ms),
            "torch": torch.__version__,
            "nccl": ".".join(map(str, torch.cuda.nccl.version())),
            "gpu": torch.cuda.get_device_name(dev),
            "ranks": ranks,
        }
        g = 2 ** 30
        print(f"\n== PyTorch ZeRO-1 BF16: {n} parameters on {d} ranks", flush=True)
        print("median phase times (ms, slowest rank): " + "  ".join(f"{p} {out['phase_ms'][p]:.3f}" for p in PHASES))
        print(f"step {out['step_ms']:.3f} ms (phases waited for), {out['plain_step_ms']:.3f} ms without waits")
        print(f"predicted buffers {out['predicted_bytes'] / g:.3f} GiB per rank (4 + 16/d = {4 + 16 / d:.2f} bytes/param)")
        for r in ranks:
            print(f"rank {r['rank']}: max allocated {r['max_allocated'] / g:.3f} GiB, reserved {r['max_reserved'] / g:.3f}, "
                  f"NVML peak {r['nvml_peak'] / g:.3f} (context {r['nvml_context'] / g:.3f}, NCCL {r['nvml_nccl'] / g:.3f}, "
                  f"{r['nvml_measure']})")
        if a.json:
            with open(a.json, "w") as f:
                json.dump(out, f, indent=2)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
