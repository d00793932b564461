#!/bin/sh
# hf_export.sh (run on the build machine) makes a checkpoint with
# scripts/gpu/hfckpt (a small Llama-style model whose matrices have whole
# and partial 128x128 blocks) and exports it with `distopt export` into
# .gpu-hf/:
# an f32 reference and bf16, fp8 (128x128 blocks, E4M3), fp8 per-tensor and
# fp8 E5M2 exports. Carry .gpu-hf and scripts to the GPU machine and run
# there, with the Python that has torch and safetensors:
#   python3 scripts/gpu/hf_export_check.py .gpu-hf/f32 .gpu-hf/bf16 .gpu-hf/fp8 .gpu-hf/fp8-tensor .gpu-hf/fp8-e5m2
set -eu
cd "$(dirname "$0")/../.."
rm -rf .gpu-hf
mkdir -p .gpu-hf
go build -o .gpu-hf/distopt ./cmd/distopt
go run ./scripts/gpu/hfckpt -dir .gpu-hf/ckpt
d=.gpu-hf/distopt
$d export -dtype f32 .gpu-hf/ckpt .gpu-hf/f32
$d export -dtype bf16 -shard-size 2MB .gpu-hf/ckpt .gpu-hf/bf16
$d export -dtype fp8 -shard-size 1MB -keep '^$' .gpu-hf/ckpt .gpu-hf/fp8
$d export -dtype fp8 -per-tensor -keep '^$' .gpu-hf/ckpt .gpu-hf/fp8-tensor
$d export -dtype fp8 -format e5m2 -keep '^$' .gpu-hf/ckpt .gpu-hf/fp8-e5m2
rm -r .gpu-hf/distopt .gpu-hf/ckpt
du -sh .gpu-hf
