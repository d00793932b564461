package rendezvous

import (
	"context"
	"fmt"
	"strconv"
	"strings"
)

// keyPrefix starts every key that the helpers of this file make; other
// callers should not use keys that start with it.
const keyPrefix = "rendezvous/"

// AllGatherValues stores value for this rank and returns the values of all
// ranks, indexed by rank, once every rank has called it with the same key.
// Calls with the same key are numbered (see Sequence), so a key may be used
// again. When ctx ends first, the error wraps ctx.Err() and names the ranks
// that have not contributed.
func (s *Store) AllGatherValues(ctx context.Context, key string, value []byte) ([][]byte, error) {
	checkKey(key)
	prefix := fmt.Sprintf("%sallgather/%s/%d/", keyPrefix, key, s.Sequence("allgather/"+key))
	if err := s.Set(ctx, prefix+strconv.Itoa(s.cfg.Rank), value); err != nil {
		return nil, err
	}
	keys := make([]string, s.cfg.WorldSize)
	for r := range keys {
		keys[r] = prefix + strconv.Itoa(r)
	}
	values, missing, err := s.wait(ctx, keys)
	if err != nil {
		return nil, s.fail(ctx, "all-gather "+strconv.Quote(key), err)
	}
	if missing != nil {
		ranks := make([]string, len(missing))
		for i, k := range missing {
			ranks[i] = strings.TrimPrefix(k, prefix)
		}
		return nil, fmt.Errorf("rendezvous: all-gather %q: ranks [%s] have not contributed: %w", key, strings.Join(ranks, " "), ctx.Err())
	}
	return values, nil
}

// Barrier returns once every rank has called Barrier with key (the same
// numbering as AllGatherValues applies).
func (s *Store) Barrier(ctx context.Context, key string) error {
	_, err := s.AllGatherValues(ctx, "barrier/"+key, nil)
	return err
}

// CheckAgreement exchanges value among all ranks (as AllGatherValues) and
// returns nil if every rank passed the same value. Otherwise it returns a
// *DisagreementError, on every rank, that names which ranks hold which
// values. Callers use it to refuse to run when layouts or configurations
// differ, e.g. CheckAgreement(ctx, "layout", fingerprint).
func (s *Store) CheckAgreement(ctx context.Context, key string, value string) error {
	raw, err := s.AllGatherValues(ctx, "agree/"+key, []byte(value))
	if err != nil {
		return err
	}
	values := make([]string, len(raw))
	for r, v := range raw {
		values[r] = string(v)
	}
	for _, v := range values {
		if v != values[0] {
			return &DisagreementError{Key: key, Values: values}
		}
	}
	return nil
}

// DisagreementError is the error of CheckAgreement when ranks differ.
type DisagreementError struct {
	Key    string   // the key given to CheckAgreement
	Values []string // the value of each rank, indexed by rank
}

// maxShown bounds how much of each value Error prints.
const maxShown = 96

// Error groups the ranks by value, in order of first appearance, e.g.
// `rendezvous: ranks disagree on "layout": ranks 0, 2 have "a1"; rank 1 has "b7"`.
func (e *DisagreementError) Error() string {
	var order []string
	groups := make(map[string][]string)
	for r, v := range e.Values {
		if _, ok := groups[v]; !ok {
			order = append(order, v)
		}
		groups[v] = append(groups[v], strconv.Itoa(r))
	}
	parts := make([]string, len(order))
	for i, v := range order {
		ranks := groups[v]
		shown := strconv.Quote(v)
		if len(v) > maxShown {
			shown = fmt.Sprintf("%q... (%d bytes)", v[:maxShown], len(v))
		}
		if len(ranks) == 1 {
			parts[i] = fmt.Sprintf("rank %s has %s", ranks[0], shown)
		} else {
			parts[i] = fmt.Sprintf("ranks %s have %s", strings.Join(ranks, ", "), shown)
		}
	}
	return fmt.Sprintf("rendezvous: ranks disagree on %q: %s", e.Key, strings.Join(parts, "; "))
}

// Unwrap returns ErrDisagree.
func (e *DisagreementError) Unwrap() error { return ErrDisagree }
