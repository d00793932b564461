#!/bin/sh
# twonode.sh builds (here) and runs (on a 2-GPU machine) the two-node run of
# issue 20 in one device call: two `distopt run` invocations on one host,
# --nnodes 2 --node-rank 0/1, one GPU each (CUDA_VISIBLE_DEVICES), NCCL
# forced onto its network path (sockets over loopback).
#
#   scripts/gpu/twonode.sh build   # build machine: binaries into .gpu/twonode/
#   scripts/gpu/twonode.sh run     # GPU machine (carry .gpu/twonode); log to $OUT/run.log
#
# run, for each recipe of RECIPES (default "current block"):
#   1. examples/train on 2 in-process CPU ranks: the reference digests
#   2. the same on 2 GPUs under one launcher (NCCL, NVLink)
#   3. the same as two nodes of one GPU each (NCCL_P2P_DISABLE=1
#      NCCL_SHM_DISABLE=1 NCCL_SOCKET_IFNAME=lo), one launcher per node
# and demands that every rank's digest of its optimizer state (masters and
# moments, bit for bit) and of the gathered weights is the same in 1, 2 and
# 3. Then 5: examples/train -group-size 1 (hierarchical sharding, 2 groups
# x 1 GPU) as two nodes against the same on the CPU; and 4: node 1's launcher is killed mid-run; node 0 must fail, naming
# node 1, within its step deadline (STEP_TIMEOUT, default 30s).
set -u
cd "$(dirname "$0")/../.."
root=$(pwd)
bin=${BIN:-.gpu/twonode}

# The binaries travel compressed ($bin/bin.tgz, about half their size:
# the device call carries 64 MiB at most) and run unpacks them into $bin.
build() {
	set -e
	rm -rf $bin
	mkdir -p $bin/stage
	go build -ldflags="-s -w" -o $bin/stage/distopt ./cmd/distopt
	go build -ldflags="-s -w" -o $bin/stage/train ./examples/train
	export CGO_CFLAGS="${CGO_CFLAGS:-} -Wno-deprecated-declarations" # go-nvml's header
	go build -ldflags="-s -w" -o $bin/stage/multigpu ./examples/multigpu
	tar czf $bin/bin.tgz -C $bin/stage distopt train multigpu
	rm -rf $bin/stage
	{
		git rev-parse HEAD
		git status --porcelain --untracked-files=no | sed 's/^/modified: /'
		date -u +%Y-%m-%dT%H:%M:%SZ
	} >$bin/commit
	du -sh $bin
}

# digests prints the sorted digest lines of a log, without the launcher's prefixes.
digests() { grep -o 'state digest of rank .*' "$1" | sort; }

# node K LOG ARGS...: node K of the two-node job, one GPU, in the background.
node() {
	k=$1 log=$2
	shift 2
	CUDA_VISIBLE_DEVICES=$k NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_SOCKET_IFNAME=lo \
		$bin/distopt run --nnodes 2 --node-rank "$k" --nproc-per-node 1 \
		--master-addr 127.0.0.1 --master-port "$port" -- $bin/train -backend ${BACKEND:-gpu} "$@" >"$log" 2>&1 &
}

run() {
	if [ -f $bin/bin.tgz ] && [ ! -x $bin/distopt ]; then tar xzf $bin/bin.tgz -C $bin; fi
	export NCCL_NVLS_ENABLE=0 NCCL_DEBUG=${NCCL_DEBUG:-WARN}
	export LD_LIBRARY_PATH="/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
	export DISTOPT_JOB_SECRET=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
	echo "== date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
	echo "== built from:"; cat $bin/commit
	nvidia-smi --query-gpu=index,name,driver_version --format=csv || echo "no nvidia-smi (BACKEND=${BACKEND:-gpu})"
	status=0 tmp=$(mktemp -d) port=${PORT:-29517}
	common="-steps ${STEPS:-20} -state-digest -step-timeout ${STEP_TIMEOUT:-30s}"
	for recipe in ${RECIPES:-current block}; do
		echo "== recipe $recipe: 1. CPU, 2 in-process ranks"
		# shellcheck disable=SC2086
		$bin/train -ranks 2 -recipe "$recipe" $common >"$tmp/cpu" 2>&1 || status=1
		tail -3 "$tmp/cpu"
		cp "$tmp/cpu" "$tmp/cpu-$recipe"
		echo "== recipe $recipe: 2. 2 GPUs, one launcher"
		# shellcheck disable=SC2086
		timeout 120 $bin/distopt run --nproc-per-node 2 -- $bin/train -backend ${BACKEND:-gpu} -recipe "$recipe" $common >"$tmp/one" 2>&1 || status=1
		tail -3 "$tmp/one"
		echo "== recipe $recipe: 3. two nodes of one GPU, NCCL over sockets"
		start=$(date +%s.%N)
		# shellcheck disable=SC2086
		node 0 "$tmp/n0" -recipe "$recipe" $common; p0=$!
		# shellcheck disable=SC2086
		node 1 "$tmp/n1" -recipe "$recipe" $common; p1=$!
		wait $p0 || status=1
		wait $p1 || status=1
		echo "two nodes took $(awk "BEGIN{print $(date +%s.%N) - $start}") s"
		cat "$tmp/n0" "$tmp/n1" >"$tmp/two"
		grep -h 'digest\|NCCL\|error\|exited' "$tmp/n0" "$tmp/n1" | head -20
		for run in one two; do
			if [ -n "$(digests "$tmp/cpu")" ] && [ "$(digests "$tmp/cpu")" = "$(digests "$tmp/$run")" ]; then
				echo "[ok  ] $recipe: $run: digests equal the CPU run's"
			else
				echo "[FAIL] $recipe: $run: digests differ from the CPU run's"; digests "$tmp/cpu"; digests "$tmp/$run"; status=1
			fi
		done
	done

	echo "== 5. hierarchical, 2 groups x 1 GPU (-group-size 1), two nodes, against the CPU"
	# shellcheck disable=SC2086
	$bin/train -ranks 2 -group-size 1 -recipe current $common >"$tmp/hcpu" 2>&1 || status=1
	# shellcheck disable=SC2086
	node 0 "$tmp/h0" -group-size 1 -recipe current $common; p0=$!
	# shellcheck disable=SC2086
	node 1 "$tmp/h1" -group-size 1 -recipe current $common; p1=$!
	wait $p0 || status=1
	wait $p1 || status=1
	cat "$tmp/h0" "$tmp/h1" >"$tmp/htwo"
	if [ -n "$(digests "$tmp/hcpu")" ] && [ "$(digests "$tmp/hcpu")" = "$(digests "$tmp/htwo")" ]; then
		echo "[ok  ] hierarchical 2x1 on two GPU nodes: digests equal the CPU run's"
	else
		echo "[FAIL] hierarchical 2x1: digests differ"; digests "$tmp/hcpu"; digests "$tmp/htwo"; status=1
	fi
	# The gathered weights of 2x1 are those of flat d=2 (one addition, one halving).
	if [ "$(digests "$tmp/hcpu" | sed 's/.* weights //' | sort -u)" = "$(grep -h -o 'state digest of rank .*' "$tmp"/cpu-current | sed 's/.* weights //' | sort -u)" ]; then
		echo "[ok  ] hierarchical 2x1: gathered weights equal flat d=2's"
	else
		echo "[FAIL] hierarchical 2x1: gathered weights differ from flat d=2's"; status=1
	fi

	echo "== 4. kill node 1 mid-run"
	node 0 "$tmp/k0" -steps 100000 -step-delay 20ms -step-timeout "${STEP_TIMEOUT:-30s}"; p0=$!
	node 1 "$tmp/k1" -steps 100000 -step-delay 20ms -step-timeout "${STEP_TIMEOUT:-30s}"; p1=$!
	sleep "${KILL_AFTER:-15}"
	kill -9 $p1
	killed=$(date +%s.%N)
	if wait $p0; then
		echo "[FAIL] node 0 succeeded after node 1 was killed"; status=1
	else
		echo "node 0 failed $(awk "BEGIN{print $(date +%s.%N) - $killed}") s after node 1 was killed"
	fi
	tail -5 "$tmp/k0"
	if grep -q 'rank 1 ran on node 1' "$tmp/k0" && grep -q 'node 0 rank 0 exited' "$tmp/k0"; then
		echo "[ok  ] node 0 names the lost node 1 and its own failed rank"
	else
		echo "[FAIL] node 0's output does not name node 1 and its own rank"; status=1
	fi
	if [ "${REGIMES:-1}" = 1 ] && [ "${BACKEND:-gpu}" = gpu ]; then
		# The three regimes of the step-time model (distopt plan -steptime
		# calibration): examples/multigpu, 1.42B GPT, d = 2, phases per step.
		for regime in nvlink shm sockets; do
			case $regime in
			nvlink) env="" ;;
			shm) env="NCCL_P2P_DISABLE=1" ;;
			sockets) env="NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_SOCKET_IFNAME=lo" ;;
			esac
			echo "== 6. regime $regime ($env): examples/multigpu, 1.42B GPT, d = 2"
			# shellcheck disable=SC2086
			env $env timeout 240 $bin/distopt run --nproc-per-node 2 -- $bin/multigpu -steps ${REGIME_STEPS:-5} \
				-plain-steps 3 -warmup 1 -timeout 230s -out "$tmp/$regime" >"$tmp/$regime.log" 2>&1 || status=1
			grep -v '^\[rank 1\]' "$tmp/$regime.log" | tail -14
			cp "$tmp/$regime/summary.json" "$out/summary-$regime.json" 2>/dev/null
		done
	fi
	echo "== twonode.sh: $([ $status -eq 0 ] && echo all passed || echo FAILURES)"
	return $status
}

case "${1:-}" in
build) build ;;
run)
	out=${OUT:-$root/$bin/out}
	mkdir -p "$out"
	{ run; echo $? >/tmp/twonode.status; } 2>&1 | tee "$out/run.log"
	exit "$(cat /tmp/twonode.status)"
	;;
*) echo "usage: $0 build|run" >&2; exit 2 ;;
esac
