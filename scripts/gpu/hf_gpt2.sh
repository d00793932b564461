#!/bin/sh
# hf_gpt2.sh (run on the build machine) trains examples/gpt's tiny model
# (4 heads of 16) on the CPU for a few steps with a checkpoint, exports it
# with `distopt export -as gpt2` (FP32 masters as transformers' GPT-2) and
# writes the Go model's logits of validation windows and its greedy
# continuation of a prompt (scripts/gpu/hfgpt2ref), all into .gpu-hf2/.
# Carry .gpu-hf2 and scripts to the GPU machine and run there:
#   /opt/torch/.venv/bin/python3 scripts/gpu/hf_gpt2_check.py .gpu-hf2
set -eu
cd "$(dirname "$0")/../.."
rm -rf .gpu-hf2
mkdir -p .gpu-hf2
go build -o .gpu-hf2/distopt ./cmd/distopt
go build -o .gpu-hf2/gpt ./examples/gpt
go run ./examples/gpt/prepare -out .gpu-hf2/data
.gpu-hf2/gpt -data .gpu-hf2/data -preset tiny -heads 4 -steps 300 -eval-every 0 -sample 0 -ckpt .gpu-hf2/ckpt
.gpu-hf2/distopt export -dtype f32 .gpu-hf2/ckpt .gpu-hf2/f32
.gpu-hf2/distopt export -as gpt2 -heads 4 -dtype f32 .gpu-hf2/ckpt .gpu-hf2/gpt2
go run ./scripts/gpu/hfgpt2ref -weights .gpu-hf2/f32 -data .gpu-hf2/data -heads 4 -out .gpu-hf2/ref
rm -r .gpu-hf2/distopt .gpu-hf2/gpt .gpu-hf2/data .gpu-hf2/ckpt .gpu-hf2/f32
du -sh .gpu-hf2
