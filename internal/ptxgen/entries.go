package ptxgen

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"regexp"
	"sort"
)

var entryRE = regexp.MustCompile(`(?m)^\.visible \.entry (\w+)\(`)

// Entries returns the kernel names a PTX text defines, in its order.
func Entries(ptx []byte) []string {
	var names []string
	for _, m := range entryRE.FindAllSubmatch(ptx, -1) {
		names = append(names, string(m[1]))
	}
	return names
}

// stoCUDAEntry marks a kernel in the other field of a cubin's symbol.
const stoCUDAEntry = 0x10

// CubinEntries returns the kernel names a cubin defines (its global
// function symbols marked as entries), sorted.
func CubinEntries(cubin []byte) ([]string, error) {
	if len(cubin) < 24 {
		return nil, fmt.Errorf("ptxgen: not a cubin: %d bytes", len(cubin))
	}
	// ptxas writes the CUDA ABI's version (such as 118) where ELF has
	// e_version, 1, which debug/elf insists on.
	b := bytes.Clone(cubin)
	binary.LittleEndian.PutUint32(b[20:], uint32(elf.EV_CURRENT))
	f, err := elf.NewFile(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("ptxgen: not a cubin: %w", err)
	}
	syms, err := f.Symbols()
	if err != nil {
		return nil, fmt.Errorf("ptxgen: cubin symbols: %w", err)
	}
	var names []string
	for _, s := range syms {
		if elf.ST_TYPE(s.Info) == elf.STT_FUNC && elf.ST_BIND(s.Info) == elf.STB_GLOBAL && s.Other&stoCUDAEntry != 0 {
			names = append(names, s.Name)
		}
	}
	sort.Strings(names)
	return names, nil
}
