"""PyTorch baseline of distopt-ncclbench: the same collectives, timed the same way.

Run with torchrun, one process per GPU:

    torchrun --standalone --nproc-per-node 2 scripts/bench/torch_collectives.py --json torch.json

Measures dist.all_gather_into_tensor of 2^30 parameters as FP8 bytes (a
uint8 view, as FSDP2 gathers float8 weights) and as bfloat16, and
dist.reduce_scatter_tensor of 2^30 bfloat16 gradients with SUM and AVG.
Each measurement is the median over --trials of the time per operation,
each trial timing --iters operations launched back to back after a barrier
and a synchronize. Bandwidths as nccl-tests counts them: algbw = bytes of
the larger buffer / time, busbw = algbw * (n-1)/n, GB/s of 10^9 bytes.
NVLink multicast stays off (NCCL_NVLS_ENABLE=0), as in distopt's runs.
"""

import argparse
import json
import os
import statistics
import time

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402


def timed(fn, iters, warmup, trials):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    secs = []
    for _ in range(trials):
        dist.barrier()
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(iters):
            fn()
        torch.cuda.synchronize()
        secs.append((time.perf_counter() - start) / iters)
    return statistics.median(secs)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--elements", type=int, default=1 << 30)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--json", default="")
    args = ap.parse_args()

    local = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local)
    dev = torch.device("cuda", local)
    dist.init_process_group("nccl", device_id=dev)
    rank, n = dist.get_rank(), dist.get_world_size()
    shard = args.elements // n
    if rank == 0:
        print(f"# torch {torch.__version__}, NCCL {'.'.join(map(str, torch.cuda.nccl.version()))}, "
              f"{n} ranks, GPU {torch.cuda.get_device_name(dev)}, {args.elements} elements, "
              f"{args.trials} trials x {args.iters} ops", flush=True)

    results = []

    def record(name, op, dtype, nbytes, sec):
        algbw = nbytes / sec / 1e9
        r = dict(name=name, op=op, dtype=dtype, ranks=n, bytes=nbytes, time_ms=sec * 1e3,
                 algbw_gbps=algbw, busbw_gbps=algbw * (n - 1) / n, backend="torch")
        results.append(r)
        if rank == 0:
            print(f"{name:<30} {nbytes:12d} B {r['time_ms']:9.3f} ms  algbw {algbw:7.1f} GB/s  "
                  f"busbw {r['busbw_gbps']:7.1f} GB/s", flush=True)

    for name, dtype, label in [("allgather_fp8", torch.uint8, "fp8"), ("allgather_bf16", torch.bfloat16, "bf16")]:
        out = torch.zeros(args.elements, dtype=dtype, device=dev)
        inp = torch.zeros(shard, dtype=dtype, device=dev)
        sec = timed(lambda: dist.all_gather_into_tensor(out, inp), args.iters, args.warmup, args.trials)
        record(name, "all_gather", label, out.numel() * out.element_size(), sec)
        del out, inp

    for name, op, label in [("reducescatter_bf16_sum", dist.ReduceOp.SUM, "sum"),
                            ("reducescatter_bf16_avg", dist.ReduceOp.AVG, "avg")]:
        inp = torch.zeros(args.elements, dtype=torch.bfloat16, device=dev)
        out = torch.zeros(shard, dtype=torch.bfloat16, device=dev)
        sec = timed(lambda: dist.reduce_scatter_tensor(out, inp, op=op), args.iters, args.warmup, args.trials)
        record(name, "reduce_scatter_" + label, "bfloat16", inp.numel() * inp.element_size(), sec)
        del out, inp

    dist.barrier()
    if rank == 0 and args.json:
        with open(args.json, "w") as f:
            for r in results:
                f.write(json.dumps(r) + "\n")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
