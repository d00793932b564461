# ncustep.awk summarises ncu's raw CSV (--csv --page raw --print-units base)
# of the kernels of a few optimizer steps, with the metrics
# gpu__time_duration.sum, dram__bytes_read.sum and dram__bytes_write.sum:
# the LAST step's kernels from its update on (the update, the scales and
# amaxes, the cast: issue 17's "update + amax + cast"), each with its time,
# DRAM bytes and bandwidth, their sum against the floor of their bytes at
# copy bandwidth (-v copy=GB/s), and the last statistics launch likewise.
#
#   awk -F'","' -v copy=4270 -f scripts/gpu/ncustep.awk ncu.csv
function num(s) { gsub(/[",]/, "", s); return s + 0 }
$1 ~ /^"ID$/ {
	for (i = 1; i <= NF; i++) {
		h = $i; gsub(/"/, "", h)
		col[h] = i
	}
	next
}
!("Kernel Name" in col) || $1 !~ /^"[0-9]+$/ { next }
{
	n++
	name[n] = $(col["Kernel Name"]); sub(/\(.*/, "", name[n])
	t[n] = num($(col["gpu__time_duration.sum"]))
	b[n] = num($(col["dram__bytes_read.sum"])) + num($(col["dram__bytes_write.sum"]))
	if (name[n] ~ /^update/) lastupd = n
	if (name[n] ~ /grad_stats/ && name[n] !~ /normalize/) laststats = n
}
END {
	if (!lastupd) { print "ncustep: no update kernel in the profile"; exit 1 }
	for (i = lastupd; i <= n; i++) {
		if (name[i] ~ /grad_stats/) continue
		printf "  %-40s %8.3f ms %7.2f GB %5.2f TB/s\n", name[i], t[i] / 1e6, b[i] / 1e9, b[i] / t[i] / 1e3
		st += t[i]; sb += b[i]
	}
	fl = sb / (copy * 1e9) * 1e3
	printf "  update + amax + cast: %.3f ms, %.2f GB; floor at %d GB/s %.3f ms: %.3fx\n", st / 1e6, sb / 1e9, copy, fl, st / 1e6 / fl
	if (laststats) {
		fl = b[laststats] / (copy * 1e9) * 1e3
		printf "  statistics (%s): %.3f ms, %.2f GB (%.2f TB/s); floor %.3f ms: %.3fx\n", name[laststats], t[laststats] / 1e6, b[laststats] / 1e9, b[laststats] / t[laststats] / 1e3, fl, t[laststats] / 1e6 / fl
	}
}
