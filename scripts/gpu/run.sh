#!/bin/sh
# run.sh (run on the GPU machine, from the repository root, with .gpu/ from
# scripts/gpu/build.sh) runs the GPU suite: every test binary of
# .gpu/manifest in its package directory with -test.v and
# DISTOPT_REQUIRE_GPU=1 (no GPU test may skip), then its benchmarks.
#
# Logs go to $OUT (or .gpu/out): env.txt (machine, driver, commit),
# tests.log, bench.log. Extra arguments are passed to every test binary
# (e.g. -test.run Exhaustive). Environment:
#   ONLY=substring   run only the binaries whose name contains it
#   PART=k/m         run only the k-th of m parts of the manifest (its
#                    lines i with i % m == k-1, counted from 0), so that a
#                    suite split over m device calls loses one part at
#                    most when a machine stops answering
#   BENCH=0          skip the benchmarks; BENCHTIME (default 10x)
#   TIMEOUT          per binary (default 20m)
#   GPUS=1           a one-GPU machine: tests that need two GPUs skip
#                    (and are listed) instead of failing
#   SKIP=regexp      passed as -test.skip to every binary
# The exit status is non-zero if any binary failed; all of them run.
set -u
cd "$(dirname "$0")/../.."
root=$(pwd)
part=${PART:-1/1}
pk=${part%/*} pm=${part#*/}
case "$pk/$pm" in
*[!0-9/]* | /* | */) echo "run.sh: PART=$part: want k/m" >&2; exit 2 ;;
esac
[ "$pk" -ge 1 ] && [ "$pk" -le "$pm" ] || { echo "run.sh: PART=$part: want 1 <= k <= m" >&2; exit 2; }
out=${OUT:-$root/.gpu/out}
mkdir -p "$out"
export LD_LIBRARY_PATH="/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export DISTOPT_REQUIRE_GPU=1
[ "${GPUS:-}" = 1 ] && export DISTOPT_REQUIRE_GPU=0
for z in .gpu/*.gz .gpu/bin/*.gz; do [ -e "$z" ] && gunzip -f "$z"; done
chmod +x .gpu/*.test .gpu/bin/* 2>/dev/null

{
	echo "== date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
	echo "== built from:"; cat .gpu/commit 2>/dev/null
	echo "== host: $(uname -a)"
	echo "== cpus: $(nproc)"
	echo "== nvidia-smi"; nvidia-smi 2>&1
	nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv 2>&1
	echo "== libcuda:"; ldconfig -p 2>&1 | grep -E 'libcuda\.so|libnccl\.so'; ls -l /usr/local/nvidia/lib64/libcuda.so.1 2>&1
} >"$out/env.txt" 2>&1
cat "$out/env.txt"

status=0
line=-1
while read -r bin dir; do
	line=$((line + 1))
	[ $((line % pm)) -eq $((pk - 1)) ] || continue
	case "$bin" in *"${ONLY:-}"*) ;; *) continue ;; esac
	echo "=== $bin ($dir)" | tee -a "$out/tests.log"
	start=$(date +%s)
	(cd "$dir" && "$root/.gpu/$bin" -test.v -test.timeout "${TIMEOUT:-20m}" ${SKIP:+-test.skip "$SKIP"} "$@") >>"$out/tests.log" 2>&1
	rc=$?
	echo "=== $bin: exit $rc after $(($(date +%s) - start)) s" | tee -a "$out/tests.log"
	grep -E '^(--- FAIL|FAIL|panic)' "$out/tests.log" | tail -20
	[ $rc -eq 0 ] || status=1
	case "$bin" in *.race.test) continue ;; esac
	if [ "${BENCH:-1}" != 0 ]; then
		echo "=== bench $bin" >>"$out/bench.log"
		(cd "$dir" && "$root/.gpu/$bin" -test.run '^$' -test.bench . -test.benchtime "${BENCHTIME:-10x}" \
			-test.timeout "${TIMEOUT:-20m}") >>"$out/bench.log" 2>&1 || status=1
	fi
done <.gpu/manifest
# The fused update benchmark and its PyTorch baseline, in the same call.
if [ "${BENCH:-1}" != 0 ] && [ -x .gpu/bin/distopt-bench-update ]; then
	.gpu/bin/distopt-bench-update >"$out/bench-update.md" 2>&1 || status=1
	cat "$out/bench-update.md"
	py=python3
	for p in python3 /opt/venv/bin/python /usr/local/bin/python3; do
		if "$p" -c 'import torch' 2>/dev/null; then py=$p; break; fi
	done
	"$py" scripts/bench/torch_adamw.py >"$out/bench-torch.md" 2>&1 || status=1
	cat "$out/bench-torch.md"
fi
grep -E -- '--- SKIP' "$out/tests.log" | sort | uniq -c | head -30
grep -hE '^(ok|PASS|FAIL|--- FAIL|Benchmark)' "$out/tests.log" "$out/bench.log" 2>/dev/null | tail -60
echo "== run.sh: $( [ $status -eq 0 ] && echo all passed || echo FAILURES )"
exit $status
