package nccl

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/distopt/distopt/internal/cudalink"
	"github.com/distopt/distopt/internal/nccl"
)

// ErrSubRanks marks an invalid list of members of a sub-communicator.
var ErrSubRanks = errors.New("collective/nccl: invalid sub-communicator ranks")

// NewSub makes this rank's communicator in a sub-communicator of cfg.Store's
// job, such as a group of hierarchical sharding (collective/hier). ranks
// lists the members by job rank, in their order in the new communicator, so
// this rank's new rank is its index in ranks. Every member calls NewSub with
// the same ranks; other ranks do not call it. Disjoint sub-communicators form
// at the same time. Failure reports and heartbeats go through the store,
// under a key that names the members. Otherwise NewSub is New. It has run on
// two GPUs, as one sub-communicator of both and as two groups of one
// (TestNCCLSub in tests/). See docs/DESIGN.md, "Note: sub-communicators".
//
// Errors: ErrSubRanks for ranks that are empty, repeat a rank, hold a rank
// outside the job, or lack this rank; those of New otherwise.
func NewSub(ctx context.Context, cfg Config, ranks []int) (*Comm, error) {
	if cfg.Store == nil || cfg.Device == nil {
		panic("collective/nccl: NewSub needs a Store and a Device")
	}
	me, err := subRank(cfg.Store.Rank(), cfg.Store.Size(), ranks)
	if err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	lib, err := nccl.Default()
	if err != nil {
		return nil, fmt.Errorf("collective/nccl: %w", err)
	}
	tag := membersTag(ranks)
	prefix := fmt.Sprintf("collective/nccl/sub-%s/%d/", tag, cfg.Store.Sequence("collective/nccl/sub/"+tag))
	return open(ctx, cfg, lib, me, len(ranks), prefix, " (sub-communicator "+prefix+")")
}

// open builds the communicator of rank of size ranks whose store keys
// start with prefix (New's and NewSub's); what, if not empty, follows the
// rank in its errors.
func open(ctx context.Context, cfg Config, lib *nccl.Library, rank, size int, prefix, what string) (*Comm, error) {
	c := &Comm{
		rank:    rank,
		size:    size,
		cfg:     cfg,
		dev:     cudalink.Device(cfg.Device),
		lib:     lib,
		prefix:  prefix,
		live:    make(map[*Work]struct{}),
		kick:    make(chan struct{}, 1),
		failedc: make(chan struct{}),
		stopc:   make(chan struct{}),
	}
	if err := c.setUp(ctx); err != nil {
		c.do(c.destroyNCCL)
		c.tearDown()
		return nil, fmt.Errorf("collective/nccl: rank %d of %d%s: %w", c.rank, c.size, what, err)
	}
	monCtx, cancel := context.WithCancel(context.Background())
	c.cancel = cancel
	c.wg.Add(3)
	go c.issuer()
	go c.watch(monCtx)
	go c.heartbeat(monCtx)
	return c, nil
}

// subRank checks the members of a sub-communicator of a job of size ranks
// and returns the index of rank among them.
func subRank(rank, size int, ranks []int) (int, error) {
	me := -1
	seen := make(map[int]bool, len(ranks))
	for i, r := range ranks {
		if r < 0 || r >= size || seen[r] {
			return 0, fmt.Errorf("collective/nccl: sub-communicator of ranks %v: rank %d twice or outside the job of %d ranks: %w", ranks, r, size, ErrSubRanks)
		}
		seen[r] = true
		if r == rank {
			me = i
		}
	}
	if me < 0 {
		return 0, fmt.Errorf("collective/nccl: sub-communicator of ranks %v does not hold this rank (%d): %w", ranks, rank, ErrSubRanks)
	}
	return me, nil
}

// membersTag names a list of members in store keys: the ranks joined by
// dots when short, else their count and a hash.
func membersTag(ranks []int) string {
	s := make([]string, len(ranks))
	for i, r := range ranks {
		s[i] = strconv.Itoa(r)
	}
	if tag := strings.Join(s, "."); len(tag) <= 64 {
		return tag
	}
	sum := sha256.Sum256([]byte(strings.Join(s, ".")))
	return fmt.Sprintf("%dranks-%s", len(ranks), hex.EncodeToString(sum[:8]))
}
