#!/bin/sh
# gemm.sh: the FP8 GEMM checks of package gemm in one device call.
#
#   scripts/gpu/gemm.sh build   (build machine) compiles into .gpu/gemm/ the
#       test binaries of internal/cublaslt, internal/kernels and gemm, and
#       cmd/distopt-bench-gemm, gzipped (the device tool carries at most
#       64 MiB), plus scripts/bench/torch_scaled_mm.py.
#   scripts/gpu/gemm.sh run     (GPU machine, repository root, .gpu/gemm
#       carried) runs the tests with DISTOPT_REQUIRE_GPU=1, the benchmark
#       (with the 24-layer memory check) and the PyTorch baseline, and
#       writes cublaslt.log, kernels.log, gemm.log, bench.md, torch.md to
#       $OUT (or .gpu/gemm/out).
set -eu
cd "$(dirname "$0")/../.."
dir=.gpu/gemm
case "${1:-}" in
build)
	rm -rf "$dir" && mkdir -p "$dir"
	go test -c -ldflags="-s -w" -o "$dir/cublaslt.test" ./internal/cublaslt
	go test -c -ldflags="-s -w" -o "$dir/kernels.test" ./internal/kernels
	go test -c -ldflags="-s -w" -o "$dir/gemm.test" ./gemm
	go build -ldflags="-s -w" -o "$dir/distopt-bench-gemm" ./cmd/distopt-bench-gemm
	gzip -9 "$dir"/*.test "$dir/distopt-bench-gemm"
	cp scripts/bench/torch_scaled_mm.py "$dir/"
	git rev-parse HEAD >"$dir/commit"
	echo "gemm.sh: built $(du -sh "$dir" | cut -f1) into $dir"
	;;
run)
	out=${OUT:-$dir/out}
	mkdir -p "$out"
	export LD_LIBRARY_PATH="/usr/lib/x86_64-linux-gnu:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
	export DISTOPT_REQUIRE_GPU=1
	gunzip -f "$dir"/*.gz
	chmod +x "$dir"/*.test "$dir/distopt-bench-gemm"
	status=0
	(cd internal/cublaslt && "../../$dir/cublaslt.test" -test.v) >"$out/cublaslt.log" 2>&1 || status=1
	(cd internal/kernels && "../../$dir/kernels.test" -test.v \
		-test.run 'TestTransposeFP8|TestCopyScaleGrid|TestQuant|TestDequant|TestGEMMKernelEntries') >"$out/kernels.log" 2>&1 || status=1
	(cd gemm && "../$dir/gemm.test" -test.v) >"$out/gemm.log" 2>&1 || status=1
	grep -hE '^(--- |ok|FAIL|PASS)' "$out/cublaslt.log" "$out/kernels.log" "$out/gemm.log"
	"$dir/distopt-bench-gemm" -iters 20 -warmup 3 -layers 24 >"$out/bench.md" 2>&1 || status=1
	/opt/torch/.venv/bin/python "$dir/torch_scaled_mm.py" --iters 20 --warmup 3 >"$out/torch.md" 2>&1 || status=1
	echo "built from $(cat "$dir/commit")"
	cat "$out/bench.md" "$out/torch.md"
	exit $status
	;;
*)
	echo "usage: scripts/gpu/gemm.sh build|run" >&2
	exit 2
	;;
esac
