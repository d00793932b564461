package rendezvous

import (
	"fmt"
	"strconv"
	"strings"
)

// maxHosts bounds the hosts a hostlist may expand to: a typo such as
// "n[0-99999999]" is refused rather than expanded.
const maxHosts = 1 << 20

// ExpandHostlist expands a Slurm hostlist (SLURM_JOB_NODELIST) without
// calling scontrol: comma-separated names, each with any number of
// bracketed ranges, "gpu[01-04,07],cpu9" or "rack[1-2]-n[1-3]". A range
// keeps the zero padding of its lower bound ("01-04": 01, 02, 03, 04).
// The error wraps ErrConfig and quotes the list.
func ExpandHostlist(list string) ([]string, error) {
	var hosts []string
	for _, name := range splitTop(list) {
		if name == "" {
			continue
		}
		exp, err := expandName(name)
		if err != nil {
			return nil, fmt.Errorf("rendezvous: hostlist %q: %v: %w", list, err, ErrConfig)
		}
		if hosts = append(hosts, exp...); len(hosts) > maxHosts {
			return nil, fmt.Errorf("rendezvous: hostlist %q has more than %d hosts: %w", list, maxHosts, ErrConfig)
		}
	}
	if len(hosts) == 0 {
		return nil, fmt.Errorf("rendezvous: hostlist %q names no host: %w", list, ErrConfig)
	}
	return hosts, nil
}

// splitTop splits s at the commas outside brackets.
func splitTop(s string) []string {
	var parts []string
	depth, start := 0, 0
	for i, c := range s {
		switch {
		case c == '[':
			depth++
		case c == ']':
			depth--
		case c == ',' && depth == 0:
			parts = append(parts, strings.TrimSpace(s[start:i]))
			start = i + 1
		}
	}
	return append(parts, strings.TrimSpace(s[start:]))
}

// expandName expands one name of a hostlist: its first bracket's ranges,
// each followed by the expansion of the rest of the name.
func expandName(name string) ([]string, error) {
	open := strings.IndexByte(name, '[')
	if open < 0 {
		if strings.ContainsAny(name, "],") {
			return nil, fmt.Errorf("stray %q", name)
		}
		return []string{name}, nil
	}
	end := strings.IndexByte(name[open:], ']')
	if end < 0 {
		return nil, fmt.Errorf("unclosed bracket in %q", name)
	}
	prefix, ranges, rest := name[:open], name[open+1:open+end], name[open+end+1:]
	if strings.ContainsAny(prefix, "]") || strings.Contains(ranges, "[") {
		return nil, fmt.Errorf("stray bracket in %q", name)
	}
	tails, err := expandName(rest)
	if err != nil {
		return nil, err
	}
	var out []string
	for r := range strings.SplitSeq(ranges, ",") {
		nums, err := expandRange(r)
		if err != nil {
			return nil, err
		}
		if len(nums)*len(tails) > maxHosts {
			return nil, fmt.Errorf("more than %d hosts", maxHosts)
		}
		for _, n := range nums {
			for _, t := range tails {
				out = append(out, prefix+n+t)
			}
		}
		if len(out) > maxHosts {
			return nil, fmt.Errorf("more than %d hosts", maxHosts)
		}
	}
	return out, nil
}

// expandRange expands "7" or "01-04" into its numbers, zero-padded to the
// width of the lower bound.
func expandRange(r string) ([]string, error) {
	lo, hi, isRange := strings.Cut(r, "-")
	if !isRange {
		hi = lo
	}
	a, errA := strconv.Atoi(lo)
	b, errB := strconv.Atoi(hi)
	if errA != nil || errB != nil || a < 0 || b < a || lo == "" || lo[0] == '+' || hi[0] == '+' {
		return nil, fmt.Errorf("bad range %q", r)
	}
	if b-a >= maxHosts {
		return nil, fmt.Errorf("range %q has more than %d hosts", r, maxHosts)
	}
	nums := make([]string, 0, b-a+1)
	for n := a; n <= b; n++ {
		nums = append(nums, fmt.Sprintf("%0*d", len(lo), n))
	}
	return nums, nil
}

// ExpandTasksPerNode expands Slurm's SLURM_TASKS_PER_NODE, "2(x3),1", into
// the tasks of each node in node order: [2 2 2 1]. The error wraps
// ErrConfig.
func ExpandTasksPerNode(s string) ([]int, error) {
	var out []int
	for part := range strings.SplitSeq(s, ",") {
		count, rep := part, "1"
		if i := strings.IndexByte(part, '('); i >= 0 {
			if !strings.HasPrefix(part[i:], "(x") || !strings.HasSuffix(part, ")") {
				return nil, fmt.Errorf("rendezvous: tasks per node %q: bad %q: %w", s, part, ErrConfig)
			}
			count, rep = part[:i], part[i+2:len(part)-1]
		}
		n, errN := strconv.Atoi(count)
		k, errK := strconv.Atoi(rep)
		if errN != nil || errK != nil || n < 1 || k < 1 || len(out)+k > maxHosts {
			return nil, fmt.Errorf("rendezvous: tasks per node %q: bad %q: %w", s, part, ErrConfig)
		}
		for range k {
			out = append(out, n)
		}
	}
	return out, nil
}
