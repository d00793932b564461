package nccl_test

import "strconv"

func itoa(i int) string     { return strconv.Itoa(i) }
func hex(b uint64) string   { return "0x" + strconv.FormatUint(b, 16) }
func ftoa(x float64) string { return strconv.FormatFloat(x, 'g', -1, 64) }
