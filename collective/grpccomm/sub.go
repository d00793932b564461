package grpccomm

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"

	"github.com/distopt/distopt/collective/rendezvous"
)

// NewSub connects this rank to the other members of a sub-communicator of
// store's job, and returns its communicator. ranks lists the members by job
// rank, in their order in the new communicator, so this rank's new rank is
// its index in ranks. Every member calls NewSub with the same ranks and
// Config.Name; other ranks do not call it. Members make the sub-communicators
// of one ranks and name in the same order, as with New. The members meet
// through store alone, so disjoint sub-communicators form at the same time.
// Ranks in the new communicator's errors are its own ranks.
//
// Errors: ErrConfig for an invalid cfg, or for ranks that are empty, repeat a
// rank, hold a rank outside the job, or lack this rank; those of New
// otherwise; when ctx ends first, one that wraps ctx.Err() and names the
// members' keys still missing.
func NewSub(ctx context.Context, store *rendezvous.Store, ranks []int, cfg Config) (*Comm, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	me, err := subRank(store.Rank(), store.Size(), ranks)
	if err != nil {
		return nil, err
	}
	rc := store.Config()
	tag := membersTag(ranks)
	id := fmt.Sprintf("%s/%s/sub-%s/%d", rc.RunID, cfg.Name, tag, store.Sequence("grpccomm/sub/"+cfg.Name+"/"+tag))
	c := newComm(me, len(ranks), id, cfg, rc.Secret)
	exchange := func(ctx context.Context, addr string) ([][]byte, error) {
		key := func(r int) string { return "grpccomm/" + id + "/addr/" + strconv.Itoa(r) }
		if err := store.Set(ctx, key(store.Rank()), []byte(addr)); err != nil {
			return nil, err
		}
		keys := make([]string, len(ranks))
		for i, r := range ranks {
			keys[i] = key(r)
		}
		return store.Wait(ctx, keys...)
	}
	if err := c.connect(ctx, rc.MasterAddress(), exchange); err != nil {
		return nil, err
	}
	return c, nil
}

// subRank checks the members of a sub-communicator of a job of size ranks
// and returns the index of rank among them.
func subRank(rank, size int, ranks []int) (int, error) {
	if len(ranks) == 0 {
		return 0, fmt.Errorf("grpccomm: sub-communicator without ranks: %w", ErrConfig)
	}
	me := -1
	seen := make(map[int]bool, len(ranks))
	for i, r := range ranks {
		switch {
		case r < 0 || r >= size:
			return 0, fmt.Errorf("grpccomm: sub-communicator of ranks %v: rank %d outside the job of %d ranks: %w", ranks, r, size, ErrConfig)
		case seen[r]:
			return 0, fmt.Errorf("grpccomm: sub-communicator of ranks %v: rank %d appears twice: %w", ranks, r, ErrConfig)
		case r == rank:
			me = i
		}
		seen[r] = true
	}
	if me < 0 {
		return 0, fmt.Errorf("grpccomm: sub-communicator of ranks %v does not hold this rank (%d): %w", ranks, rank, ErrConfig)
	}
	return me, nil
}

// membersTag names a list of members in store keys and handshakes: the
// ranks joined by dots when short, else their count and a hash.
func membersTag(ranks []int) string {
	s := make([]string, len(ranks))
	for i, r := range ranks {
		s[i] = strconv.Itoa(r)
	}
	tag := strings.Join(s, ".")
	if len(tag) <= 64 {
		return tag
	}
	sum := sha256.Sum256([]byte(tag))
	return fmt.Sprintf("%dranks-%s", len(ranks), hex.EncodeToString(sum[:8]))
}
