# lib.sh: what recheck.sh, shards.sh and lanes.sh share (binaries built here, run
# in one call on a one-GPU machine), sourced (not run) once they have set
# root (the repository, their working directory) and bin (the folder of
# their binaries, relative to root or absolute).

# tests PKG...: a stripped test binary of each package into $bin, named
# after its path (internal/kernels: internal_kernels.test).
tests() {
	for p; do
		go test -c -ldflags="-s -w" -o "$bin/$(echo "$p" | tr / _).test" "./$p" || return
	done
}

# build_at COMMIT PKG OUT: the command PKG as of COMMIT (from a temporary
# git worktree), built stripped into $root/$bin/OUT: an old binary timed
# against the new one in the same call.
build_at() {
	wt=$(mktemp -d)
	git worktree add -q --detach "$wt" "$1" &&
		(cd "$wt" && go build -ldflags="-s -w" -o "$root/$bin/$3" "./$2")
	rc=$?
	git worktree remove --force "$wt"
	return $rc
}

# pack FILE...: the files FILE... of $bin (names relative to it) into one
# solid archive, $bin/bins.tar.xz, which unpack opens: binaries built from
# one tree share most of their bytes (the Go runtime, the packages), and a
# dictionary as large as all of them finds the repeats. Six test and
# benchmark binaries took 10.5 MB against 24 MB packed one by one; the
# working tree (about 51 MB) and the carry together must stay under 64 MiB.
pack() {
	(cd "$bin" && tar cf - "$@" | xz -T1 --lzma2=preset=9,dict=192MiB >bins.tar.xz && rm -f "$@")
}

# stamp LINE...: $bin/commit, which unpack prints there: the commit the
# binaries are built from, the tracked files modified, then each LINE;
# then the size of $bin.
stamp() {
	{
		git rev-parse HEAD
		git status --porcelain --untracked-files=no | sed 's/^/modified: /'
		for l; do echo "$l"; done
	} >"$bin/commit"
	du -sh "$bin"
}

# unpack prepares a run on the GPU machine: $OUT (by default $root/$bin/out)
# made, the CUDA libraries on the loader's path, NCCL's NVLink multicast off,
# the tests that need two GPUs told to skip, the binaries in $bin (pack's
# archive, or xz packed one by one) unpacked and made executable; it prints the commit they were built from
# and the GPU.
unpack() {
	OUT=${OUT:-$root/$bin/out}
	mkdir -p "$OUT"
	export LD_LIBRARY_PATH="/usr/lib/x86_64-linux-gnu:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
	export NCCL_NVLS_ENABLE=0
	export DISTOPT_REQUIRE_GPU=0 # the two-GPU tests skip on one GPU (listed in the logs)
	if [ -e "$bin/bins.tar.xz" ]; then # pack's archive (else unpacked by an earlier run)
		xz -dc -T0 "$bin/bins.tar.xz" | tar x -C "$bin" && rm -f "$bin/bins.tar.xz"
	fi
	set -- "$bin"/*.xz
	if [ -e "$1" ]; then # files packed one by one
		xz -d -f -T0 "$@"
		for f; do chmod +x "${f%.xz}"; done
	fi
	cat "$bin/commit"
	nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
}

# t NAME DIR TIMEOUT BINARY ARGS...: one test binary of $bin in its package
# directory DIR, its log in $OUT/NAME.log and a summary in
# $OUT/NAME.summary (its last line counts the tests, subtests included,
# that passed, failed and skipped); it returns the binary's exit status.
# A binary that ignores timeout's SIGTERM is killed 10 s later.
t() {
	name=$1 dir=$2 limit=$3 exe=$4
	shift 4
	start=$(date +%s)
	case $bin in /*) exe="$bin/$exe" ;; *) exe="$root/$bin/$exe" ;; esac
	(cd "$dir" && timeout -k 10 "$limit" "$exe" -test.v "$@") >"$OUT/$name.log" 2>&1
	rc=$?
	{
		echo "== $name: exit $rc after $(($(date +%s) - start)) s"
		grep -E '^(--- FAIL|FAIL|panic|ok|PASS)' "$OUT/$name.log" | head -20
		grep -E -A6 '^\s*--- FAIL' "$OUT/$name.log" | head -40
		echo "   $(grep -c -- '--- PASS' "$OUT/$name.log") passed, $(grep -c -- '--- FAIL' "$OUT/$name.log") failed, $(grep -c -- '--- SKIP' "$OUT/$name.log") skipped"
	} >"$OUT/$name.summary"
	return $rc
}

# cudnn_env puts cuDNN where cudnn.Default looks for it after CUDNN_LIBRARY
# and libcudnn.so.9: the directories of PyTorch's cuDNN and NVRTC wheels
# (in /opt/torch/.venv, where present) are appended to LD_LIBRARY_PATH,
# NVRTC's so that cuDNN's runtime-compiled engines find it; it exports
# and prints the path.
cudnn_env() {
	for d in /opt/torch/.venv/lib/python3*/site-packages/nvidia/cudnn/lib \
		/opt/torch/.venv/lib/python3*/site-packages/nvidia/cuda_nvrtc/lib; do
		if [ -d "$d" ]; then LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$d"; fi
	done
	export LD_LIBRARY_PATH
	echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
}

# cudnn_log_tail LOG...: the end of each of cuDNN's debug logs (written
# with CUDNN_LOGLEVEL_DBG=2 to CUDNN_LOGDEST_DBG): the last 40 lines that
# open a record of an error or a warning (E! or W!) or name an error, a
# refusal or a failure, or its last 20 lines if none does.
cudnn_log_tail() {
	for f; do
		[ -f "$f" ] || continue
		echo "-- end of $f"
		if grep -qiE '^[ew]! |error|not supported|refus|fail' "$f"; then
			grep -iE '^[ew]! |error|not supported|refus|fail' "$f" | tail -40
		else
			tail -20 "$f"
		fi
	done
}

# kernels_run is internal/kernels' -test.run pattern for the update and
# cast kernels and what goes with them (entries, PTX, tiles, moments, the
# control block, scales, statistics' bands, shard tables, accumulation).
kernels_run='TestEntries|TestPTX|TestTile|TestMoment|TestStepControl|TestScales|TestBand|TestPackShards|TestStaticPart|TestAccumulateGrad'
