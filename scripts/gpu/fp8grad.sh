#!/bin/sh
# fp8grad.sh builds (here) and runs (on a GPU machine) the GPU checks of
# issue 19 (FP8 gradient reduce-scatter, collective/fp8grad).
#
#   scripts/gpu/fp8grad.sh build   # build machine: test binaries into .gpu-fp8grad/
#   scripts/gpu/fp8grad.sh run     # GPU machine (carry .gpu-fp8grad); log to $OUT/fp8grad.log
#
# run: the GPU codec bit for bit against the CPU one (TestGPUCodec), a
# NewDevice Comm over NCCL against the host path (TestGPUComm, 1 or 2
# GPUs), the NCCL conformance suite (all-to-all included) and the NCCL
# binding's tests, then the codec benchmark on one GPU, and on two GPUs
# the reduce-scatter benchmark (bf16 against fp8) in the three regimes.
set -u
cd "$(dirname "$0")/../.."
root=$(pwd)
bin=.gpu-fp8grad

build() {
	set -e
	mkdir -p $bin
	for p in collective/fp8grad collective/nccl internal/nccl; do
		go test -c -o $bin/$(echo $p | tr / _).test ./$p
	done
}

# intest PKG BIN ARGS...: runs test binary BIN in package directory PKG.
intest() {
	pkg=$1 t=$2
	shift 2
	(cd "$pkg" && DISTOPT_REQUIRE_GPU=1 "$root/$bin/$t" "$@")
}

run() {
	export LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
	log=${OUT:-.}/fp8grad.log
	status=0
	{
		intest collective/fp8grad collective_fp8grad.test -test.run 'GPU' -test.v || status=1
		intest collective/nccl collective_nccl.test -test.run 'Conformance' || status=1
		intest internal/nccl internal_nccl.test || status=1
		intest collective/fp8grad collective_fp8grad.test -test.run XXX -test.bench GPUCodec -test.benchtime 20x
		gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
		if [ "$gpus" -ge 2 ]; then
			for regime in "" "NCCL_P2P_DISABLE=1" "NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_SOCKET_IFNAME=lo"; do
				echo "== regime: ${regime:-NVLink}"
				env NCCL_NVLS_ENABLE=0 $regime sh -c "cd collective/fp8grad && ../../$bin/collective_fp8grad.test -test.run XXX -test.bench GPUReduceScatter -test.benchtime 10x"
			done
		fi
	} >"$log" 2>&1
	cat "$log"
	exit $status
}

case "${1:-}" in
build) build ;;
run) run ;;
*) echo "usage: $0 build|run" >&2; exit 2 ;;
esac
