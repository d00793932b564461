#!/usr/bin/env python3
"""Load `distopt export -as gpt2` with transformers' GPT2LMHeadModel and
compare it with examples/gpt's model (scripts/gpu/hfgpt2ref's output).

Usage: hf_gpt2_check.py DIR

DIR is what scripts/gpu/hf_gpt2.sh wrote: DIR/gpt2 (model.safetensors and
config.json of the export, FP32 masters of a checkpoint trained by
examples/gpt) and DIR/ref (logits.f32 and ref.json: the Go model's
next-token logits of validation windows, and its greedy continuation of a
prompt with each choice's margin over the runner-up). The script:

  - loads GPT2LMHeadModel.from_pretrained(DIR/gpt2) in float32 on the GPU
    (the CPU without one) and checks that no weight was left to its
    initialisation (transformers reports missing and unexpected keys);
  - runs the validation windows and compares the logits with the Go
    model's: every logit within BF16 rounding of the Go value (half a BF16
    step of the largest logit of its row, 2^-9 relative), and reports the
    largest difference;
  - continues the prompt greedily (argmax over the last position's logits,
    the context cut to the last n_positions tokens), in float64 and in
    float32, and compares the tokens with the Go model's; a float32
    difference is tolerated only at a step whose Go margin is below the
    logits' tolerance (a near tie).

It prints one line per check and "ok", or "FAIL: ..." and exits 1.
"""

import json
import os
import sys

import torch
from transformers import GPT2LMHeadModel


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def greedy(model, prompt, n, positions, device, dtype):
    ctx = list(prompt)
    out = []
    with torch.no_grad():
        for _ in range(n):
            win = torch.tensor([ctx[-positions:]], device=device)
            logits = model(win).logits[0, -1].to(dtype)
            t = int(torch.argmax(logits))
            out.append(t)
            ctx.append(t)
    return out


def main():
    if len(sys.argv) != 2:
        fail("usage: hf_gpt2_check.py DIR")
    d = sys.argv[1]
    with open(os.path.join(d, "ref", "ref.json")) as f:
        ref = json.load(f)
    w, s, v = ref["shape"]
    raw = open(os.path.join(d, "ref", "logits.f32"), "rb").read()
    want = torch.frombuffer(bytearray(raw), dtype=torch.float32).reshape(w, s, v)

    device = "cuda" if torch.cuda.is_available() else "cpu"
    model, info = GPT2LMHeadModel.from_pretrained(os.path.join(d, "gpt2"), dtype=torch.float32, output_loading_info=True)
    missing = [k for k in info.get("missing_keys", []) if not k.endswith("attn.bias") and k != "lm_head.weight"]
    if missing or info.get("unexpected_keys") or info.get("mismatched_keys"):
        fail("loading: %s" % info)
    if model.lm_head.weight.data_ptr() != model.transformer.wte.weight.data_ptr():
        fail("the head is not tied to wte")
    cfg = model.config
    print("loaded GPT2LMHeadModel: %d layers, %d heads, n_embd %d, n_inner %s, vocab %d, %d positions, %s, eps %g, on %s"
          % (cfg.n_layer, cfg.n_head, cfg.n_embd, cfg.n_inner, cfg.vocab_size, cfg.n_positions, cfg.activation_function, cfg.layer_norm_epsilon, device))
    model = model.to(device).eval()
    with torch.no_grad():
        got = model(torch.tensor(ref["inputs"], device=device)).logits.float().cpu()
    if tuple(got.shape) != (w, s, v):
        fail("logits of shape %s, want %s" % (tuple(got.shape), (w, s, v)))
    tol = want.abs().amax(dim=-1, keepdim=True) * 2.0 ** -9
    diff = (got - want).abs()
    worst = float((diff / tol).max())
    print("logits of %d validation windows x %d positions: largest |HF - Go| %.3g (%.3g of the BF16 tolerance); argmax agrees at %d of %d positions"
          % (w, s, float(diff.max()), worst, int((got.argmax(-1) == want.argmax(-1)).sum()), w * s))
    if worst > 1:
        fail("logits differ by more than BF16 rounding")

    n = len(ref["greedy"])
    g64 = greedy(model.double(), ref["prompt"], n, cfg.n_positions, device, torch.float64)
    if g64 != ref["greedy"]:
        k = next(i for i in range(n) if g64[i] != ref["greedy"][i])
        fail("float64 greedy continuation differs at token %d: %s, Go %s" % (k, g64, ref["greedy"]))
    g32 = greedy(model.float(), ref["prompt"], n, cfg.n_positions, device, torch.float32)
    text = bytes(ref["greedy"]).decode("utf-8", "backslashreplace")
    print("greedy continuation of %r, %d tokens: float64 equal to Go's: %r" % (bytes(ref["prompt"]).decode(), n, text))
    if g32 != ref["greedy"]:
        k = next(i for i in range(n) if g32[i] != ref["greedy"][i])
        if ref["margins"][k] > float(tol.max()):
            fail("float32 greedy continuation differs at token %d with a margin of %g: %s" % (k, ref["margins"][k], g32))
        print("float32 continuation departs at token %d, a near tie (margin %g)" % (k, ref["margins"][k]))
    else:
        print("float32 greedy continuation equal to Go's (smallest margin %.3g)" % min(ref["margins"]))
    print("ok")


if __name__ == "__main__":
    main()
