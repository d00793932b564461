"""Compares distopt-ncclbench's results with torch_collectives.py's.

    python3 compare_collectives.py distopt.json torch.json

Prints a Markdown table (time, algorithm and bus bandwidth of both, and
distopt's bus bandwidth over PyTorch's) and checks the targets of issue 6:
distopt's bus bandwidth within 5% of PyTorch's for the same bytes, and the
FP8 all-gather at most 0.55x the time of the BF16 one. Exits 1 when a
target is missed.
"""

import json
import sys


def load(path):
    with open(path) as f:
        return {r["name"]: r for r in map(json.loads, filter(str.strip, f))}


def main():
    ours, torch = load(sys.argv[1]), load(sys.argv[2])
    ok = True
    print("| collective | bytes | distopt ms | distopt busbw GB/s | torch ms | torch busbw GB/s | busbw ratio |")
    print("|---|---|---|---|---|---|---|")
    for name, r in ours.items():
        t = torch.get(name)
        if t is None:
            print(f"| {name} | {r['bytes']} | {r['time_ms']:.3f} | {r['busbw_gbps']:.1f} | - | - | - |")
            continue
        ratio = r["busbw_gbps"] / t["busbw_gbps"]
        mark = "" if ratio >= 0.95 else " (below 0.95)"
        ok &= ratio >= 0.95
        print(f"| {name} | {r['bytes']} | {r['time_ms']:.3f} | {r['busbw_gbps']:.1f} | {t['time_ms']:.3f} | "
              f"{t['busbw_gbps']:.1f} | {ratio:.3f}{mark} |")
    fp8, bf16 = ours.get("allgather_fp8"), ours.get("allgather_bf16")
    if fp8 and bf16:
        q = fp8["time_ms"] / bf16["time_ms"]
        ok &= q <= 0.55
        print(f"\nFP8 / BF16 all-gather time (distopt): {q:.3f} (target <= 0.55)")
    tf, tb = torch.get("allgather_fp8"), torch.get("allgather_bf16")
    if tf and tb:
        print(f"FP8 / BF16 all-gather time (torch): {tf['time_ms'] / tb['time_ms']:.3f}")
    print("\ntargets:", "met" if ok else "MISSED")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
