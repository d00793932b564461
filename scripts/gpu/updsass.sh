#!/bin/sh
# updsass.sh counts the SASS instructions of the update kernels
# (internal/kernels/update.cu) of build variants, with no GPU: nvcc, ptxas
# and cuobjdump of the toolkit that generates the PTX (gen.sh), sm_90:
#
#   sh scripts/gpu/updsass.sh [NAME=FLAGS...]      # default: base=
#
# e.g. base= o1="-DUPDATE_QFIXED_OUTER=1" (the flags of updvariants.sh). For
# each variant and kernel (KERNELS overrides the list) it prints:
#   size  the kernel's SASS instructions
#   regs  its registers
#   hot   the instructions of the path the moments table of
#         distopt-bench-update executes, per element: the kernel built with
#         -DUPDATE_PROBE (update.cu: that case's run-time values as
#         constants, whole chunks), the instructions of its chunk loop (the
#         longest backward branch) less the calls of the slow paths of
#         division and square root (a predicated branch over at most 8
#         instructions holding a CALL), divided by the 16 elements a thread
#         takes per chunk. Uniform branches the probe removes (the mode's,
#         the gradient type's) add a few per pass on the GPU.
set -eu
cd "$(dirname "$0")/../../internal/kernels"
KERNELS=${KERNELS:-"update_adamw_q_fp8_fp8_e4m3 update_adamw_q_fp8_bf16_e4m3 update_adamw_mf32_gbf16_e4m3 update_adamw_mbf16_gbf16_e4m3 update_adamw_q_e4m3 update_sgd_q_fp8_e4m3"}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
[ $# -gt 0 ] || set -- base=

# count CUBIN FUNC: "size hot" of FUNC (hot: loop instructions, not per element)
count() {
	cuobjdump -sass -fun "$2" "$1" | awk '
	function hex(h,   v, i) {
		v = 0; h = tolower(h); sub(/^0x/, "", h)
		for (i = 1; i <= length(h); i++) v = v * 16 + index("0123456789abcdef", substr(h, i, 1)) - 1
		return v
	}
	match($0, /\/\*[0-9a-f]+\*\/ +[^;]*;/) {
		s = substr($0, RSTART, RLENGTH)
		a = s; sub(/^\/\*/, "", a); sub(/\*\/.*/, "", a)
		t = s; sub(/^\/\*[0-9a-f]+\*\/ +/, "", t); sub(/ *;$/, "", t)
		n++; addr[n] = hex(a); txt[n] = t; at[addr[n]] = n
	}
	END {
		lo = 0; hi = 0
		for (k = 1; k <= n; k++)
			if (match(txt[k], /BRA 0x[0-9a-f]+/)) {
				tg = hex(substr(txt[k], RSTART + 4, RLENGTH - 4))
				if (tg < addr[k] && addr[k] - tg > hi - lo) { lo = tg; hi = addr[k] }
			}
		if (hi == 0) { print n, 0; exit }
		body = 0
		for (k = at[lo]; k <= at[hi]; k++) {
			body++
			if (txt[k] ~ /^@!?U?P[0-9] +BRA 0x/ && match(txt[k], /0x[0-9a-f]+/)) {
				j = at[hex(substr(txt[k], RSTART, RLENGTH))]
				if (j > k && j - k <= 9) {
					call = 0
					for (m = k + 1; m < j; m++) if (txt[m] ~ /CALL/) call = 1
					if (call) k = j - 1
				}
			}
		}
		print n, body
	}'
}

printf '%-10s %-34s %6s %5s %7s\n' variant kernel size regs hot/el
for v in "$@"; do
	name=${v%%=*} flags=${v#*=}
	for probe in "" -DUPDATE_PROBE; do
		# shellcheck disable=SC2086
		nvcc -ptx -arch=compute_90 -std=c++14 --fmad=false $flags $probe -I. -o "$tmp/u$probe.ptx" update.cu
		ptxas -arch=sm_90 -v "$tmp/u$probe.ptx" -o "$tmp/u$probe.cubin" 2>"$tmp/v$probe.log"
	done
	for k in $KERNELS; do
		set -- $(count "$tmp/u.cubin" "$k") $(count "$tmp/u-DUPDATE_PROBE.cubin" "$k")
		regs=$(awk -v k="'$k'" '$0 ~ "entry function " k {f = 1} f && /Used/ {print $5; exit}' "$tmp/v.log")
		printf '%-10s %-34s %6d %5s %7.1f\n' "$name" "$k" "$1" "$regs" "$(echo "$4 / 16" | bc -l)"
	done
done
