"""profile_classes.py: where a GPT training step's GPU time goes, by kernel class.

Reads the kernel times of one training step and prints a table of classes
(FP8 and BF16 GEMMs, attention forward and backward, LayerNorm, GELU,
quantize and transpose, residual and bias, embedding and head, optimizer,
other), in ms per step and as a share of the kernels' sum.

  profile_classes.py ncu.csv [--marker gpt_embed]  # examples/gpt under ncu
  profile_classes.py torch_profile.json            # torch_gpt.py --profile

An ncu CSV (`ncu --csv --metrics gpu__time_duration.sum`) holds every
launch of a run of several steps; the step taken is the one between the
last two launches of the marker kernel, the first kernel of each forward
pass. A torch profile already holds the time per step. Kernel times under
ncu are serialised (no overlap, no launch gaps): compare their sum with the
step time of an unprofiled run to see the host's and the gaps' share.
"""
import csv
import json
import re
import sys

# First match wins: the order puts specific names before general ones.
CLASSES = [
    ("attention backward", r"flash_bwd|fmha.*(bwd|dgrad)|attn.*grad|attention.*backward|cudnn.*bprop|_bwd_|cudnn::matmul_dq|compute_dot_do_o"),
    ("attention forward", r"flash|fmha|attn_|attention|sdpa|cudnn.*fprop"),
    ("LayerNorm", r"layernorm|layer_norm|gpt_ln_"),
    ("optimizer", r"update|adam|segcast|step_control|grad_stats|scales_from|delayed_scales|multi_tensor|fp8_cast_scaled|gradq|gradsum|clip"),
    ("FP8 and BF16 GEMMs", r"gemm|nvjet|cutlass|xmma|sm90_|sm80_|cublas|matmul"),
    ("GELU", r"gelu"),
    ("quantize and transpose", r"quant|transpose|fp8|amax|cast|bf16_from|round_bf16|copy|dequant"),
    ("residual and bias", r"bias|residual|gpt_add|add|column_sum|accumulate"),
    ("embedding and head", r"embed|cross_entropy|log_softmax|nll|head|gpt_linear_bf16"),
    ("fused by torch.compile (triton)", r"triton"),
]


def classify(name):
    n = name.lower()
    for cls, pat in CLASSES:
        if re.search(pat, n):
            return cls
    return "other"


def ncu_step(path, marker):
    rows = []
    with open(path, newline="") as f:
        lines = [l for l in f if l.startswith('"')]
    for r in csv.DictReader(lines):
        if r.get("Metric Name") != "gpu__time_duration.sum":
            continue
        ns = float(r["Metric Value"].replace(",", ""))
        unit = r.get("Metric Unit", "nsecond")
        ns *= {"nsecond": 1, "ns": 1, "usecond": 1e3, "us": 1e3, "msecond": 1e6, "ms": 1e6, "second": 1e9, "s": 1e9}.get(unit, 1)
        rows.append((r["Kernel Name"], ns / 1e3))
    marks = [i for i, (n, _) in enumerate(rows) if n.split("(")[0].strip() == marker]
    if len(marks) < 2:
        sys.exit(f"profile_classes: {path}: fewer than two launches of {marker}")
    step = rows[marks[-2]:marks[-1]]
    out = {}
    for n, us in step:
        c = out.setdefault(n, [0.0, 0])
        c[0] += us
        c[1] += 1
    return [{"name": n, "us": us, "count": k} for n, (us, k) in out.items()]


def table(kernels, title):
    by = {}
    for k in kernels:
        c = classify(k["name"])
        t = by.setdefault(c, [0.0, 0, []])
        t[0] += k["us"]
        t[1] += k["count"]
        t[2].append((k["us"], k["name"]))
    total = sum(v[0] for v in by.values())
    print(f"## {title}: {total / 1e3:.2f} ms of kernels per step")
    print("| class | ms per step | share | launches | largest kernel |")
    print("|---|---|---|---|---|")
    for c, (us, n, ks) in sorted(by.items(), key=lambda kv: -kv[1][0]):
        top = max(ks)[1]
        top = top if len(top) <= 60 else top[:57] + "..."
        print(f"| {c} | {us / 1e3:.3f} | {100 * us / total:.1f}% | {n:.0f} | `{top}` |")
    print()


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    path = sys.argv[1]
    marker = sys.argv[3] if len(sys.argv) > 3 and sys.argv[2] == "--marker" else "gpt_embed"
    if path.endswith(".json"):
        kernels = json.load(open(path))["kernels"]
    else:
        kernels = ncu_step(path, marker)
    table(kernels, path)


if __name__ == "__main__":
    main()
