#!/bin/sh
# gpt.sh builds (here) and runs (on a GPU machine) the GPU smoke test of
# issue 16 (examples/gpt).
#
#   scripts/gpu/gpt.sh build   # build machine: binaries and a small data set into .gpu-gpt/
#   scripts/gpu/gpt.sh run     # GPU machine (carry .gpu-gpt); log to $OUT/gpt.log
#
# run: every kernel of examples/gpt/kernels/gpt.cu against the float64
# reference of examples/gpt/model (TestGPU*, required to run: no skip),
# the whole model on the GPU (examples/gpt/gpumodel: loss and gradients
# against the float64 model on the same gathered weights, and 30 AdamW
# steps through the overlapped pipeline whose loss must halve),
# the generated-code checks of examples/gpt/kernels, and 30 steps of the tiny
# model with examples/gpt on the token files of GOROOT/src/go prepared
# here, twice: -backend cpu (2 in-process ranks, float64 reference compute)
# and -backend gpu (GPU 0); in each the mean loss of the last five steps
# must be at least 0.5 below that of the first five. Then the PyTorch reference
# (scripts/gpt/torch_gpt.py, the machine's torch venv): --check (float64
# on the CPU: the first batch's loss from the initial weights distopt
# exported must equal the Go reference's to 1e-9), and the same 30 steps
# in BF16 autocast on the GPU, printed for comparison (not asserted: 30
# tiny steps say little). About a minute.
set -u
cd "$(dirname "$0")/../.."
root=$(pwd)
bin=.gpu-gpt
flags="-preset tiny -ranks 2 -batch 4 -micro 1 -seed 1"
py=${PYTHON:-/opt/torch/.venv/bin/python}

build() {
	set -e
	rm -rf $bin
	mkdir -p $bin
	go test -c -ldflags="-s -w" -o $bin/gpt_model.test ./examples/gpt/model
	go test -c -ldflags="-s -w" -o $bin/gpt_kernels.test ./examples/gpt/kernels
	go test -c -ldflags="-s -w" -o $bin/gpt_gpumodel.test ./examples/gpt/gpumodel
	go build -ldflags="-s -w" -o $bin/gpt ./examples/gpt
	go run ./examples/gpt/prepare -root "$(go env GOROOT)/src/go" -out $bin/data
	$bin/gpt -data $bin/data $flags -export-init $bin/init.safetensors
	gzip -9 $bin/*.test $bin/gpt $bin/data/*.tok
	du -sh $bin
}

# falls LOG: the log's 30 training losses, the mean of the last five at
# least 0.5 below the mean of the first five.
falls() {
	awk '/^step +[0-9]+\/30 +loss/ { l[++n] = $4 }
		END { if (n != 30) { print "smoke: " n+0 " training steps, want 30"; exit 1 }
			for (i = 1; i <= 5; i++) { a += l[i]; b += l[n-5+i] }
			printf "smoke: first five steps average %.3f, last five %.3f\n", a/5, b/5
			exit !(b/5 < a/5 - 0.5) }' "$1"
}

run() {
	set +e
	export LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
	log=${OUT:-.}/gpt.log
	gunzip -f $bin/*.gz $bin/data/*.gz
	chmod +x $bin/*.test $bin/gpt
	status=0
	{
		(cd examples/gpt/model && DISTOPT_REQUIRE_GPU=1 "$root/$bin/gpt_model.test" -test.run GPU -test.v) || status=1
		(cd examples/gpt/gpumodel && DISTOPT_REQUIRE_GPU=1 "$root/$bin/gpt_gpumodel.test" -test.v) || status=1
		(cd examples/gpt/kernels && DISTOPT_REQUIRE_GPU=1 "$root/$bin/gpt_kernels.test" -test.run 'Library|Defined|TokenRows' ) || status=1
		$bin/gpt -data $bin/data $flags -steps 30 -eval-every 10 -sample 120 >$bin/train_cpu.log 2>&1 || status=1
		cat $bin/train_cpu.log
		falls $bin/train_cpu.log || status=1
		$bin/gpt -backend gpu -data $bin/data $flags -steps 30 -eval-every 10 >$bin/train_gpu.log 2>&1 || status=1
		cat $bin/train_gpu.log
		falls $bin/train_gpu.log || status=1
		"$py" scripts/gpt/torch_gpt.py --check --data $bin/data --init $bin/init.safetensors || status=1
		"$py" scripts/gpt/torch_gpt.py --data $bin/data --init $bin/init.safetensors --steps 30 --eval-every 10 --out ${OUT:-.}/torch_tiny.json || status=1
		echo "gpt smoke status: $status"
	} >"$log" 2>&1
	cat "$log"
	exit $status
}

case "${1:-}" in
build) build ;;
run) run ;;
*) echo "usage: $0 build|run" >&2; exit 2 ;;
esac
