package hier_test

import (
	"context"
	"errors"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/collective/grpccomm"
	"github.com/distopt/distopt/collective/hier"
	"github.com/distopt/distopt/collective/rendezvous"
)

// grpcWorld returns the d ranks of a hierarchical world of groups of g
// over gRPC, by global rank: one store on loopback, every rank a goroutine
// that calls hier.GRPC. Everything is closed at the end of t.
func grpcWorld(t testing.TB, d, g int) ([]*hier.Comm, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := rendezvous.Serve(lis)
	port := lis.Addr().(*net.TCPAddr).Port
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	stores := make([]*rendezvous.Store, d)
	comms := make([]*hier.Comm, d)
	errs := make([]error, d)
	var wg sync.WaitGroup
	for r := range d {
		wg.Go(func() {
			rc := rendezvous.Config{Rank: r, WorldSize: d, LocalRank: r % g, LocalWorldSize: g,
				MasterAddr: "127.0.0.1", MasterPort: port, RunID: t.Name(), CloseTimeout: time.Second}
			if stores[r], errs[r] = rendezvous.Dial(ctx, rc); errs[r] == nil {
				comms[r], errs[r] = hier.GRPC(ctx, stores[r], g, grpccomm.Config{ChunkBytes: 64})
			}
		})
	}
	wg.Wait()
	t.Cleanup(func() {
		var wg sync.WaitGroup
		for r := range d {
			wg.Go(func() {
				if comms[r] != nil {
					comms[r].Close()
				}
				if stores[r] != nil {
					stores[r].Close()
				}
			})
		}
		wg.Wait()
		srv.Close()
	})
	return comms, errors.Join(errs...)
}

// worlds are the two ways to make a hierarchical world that every test of
// the package runs on: in-process and over gRPC sub-communicators.
var worlds = []struct {
	name string
	make func(t testing.TB, d, g int) ([]*hier.Comm, error)
}{
	{"inproc", func(_ testing.TB, d, g int) ([]*hier.Comm, error) { return hier.InProcess(d, g) }},
	{"grpc", grpcWorld},
}

// A lost rank is named by its global rank on every survivor, whichever
// communicator (group or cross-group) saw it: rank 3 of 2 groups x 2
// closes; ranks 1 (its cross-group peer) and 2 (its group peer) name 3;
// rank 2 then gives up (closes, as its process would exit), and rank 0,
// waiting across the groups for rank 2, names 2.
func TestGRPCLostRankNamedGlobally(t *testing.T) {
	comms, err := grpcWorld(t, 4, 2)
	if err != nil {
		t.Fatal(err)
	}
	comms[3].Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	errs := make([]error, 3)
	var wg sync.WaitGroup
	for r, c := range comms[:3] {
		wg.Go(func() {
			buf := f32([]float32{1, 2})
			i := c.Rank()
			errs[r] = collective.ReduceScatter(ctx, c, buf.Slice(4*i, 4*i+4), buf, buffer.Float32, collective.Sum)
			if errs[r] != nil {
				c.Close()
			}
		})
	}
	wg.Wait()
	for r, want := range []int{2, 3, 3} {
		t.Logf("rank %d: %v", r, errs[r])
		var re *collective.RankError
		if !errors.As(errs[r], &re) || re.Rank != want || !errors.Is(errs[r], collective.ErrPeerLost) {
			t.Errorf("rank %d: %v, want a RankError naming global rank %d, wrapping ErrPeerLost", r, errs[r], want)
		}
	}
	if ctx.Err() != nil {
		t.Errorf("the survivors failed only at the deadline")
	}
}

// Layout against its definition: every rank is in exactly one group and
// one cross-group, which meet in that rank only, at the positions Rank and
// Cross().Rank() of the in-process world give.
func TestLayout(t *testing.T) {
	for _, tc := range []struct{ d, g int }{{6, 3}, {6, 2}, {6, 1}, {6, 6}, {8, 4}, {1, 1}} {
		comms, err := hier.InProcess(tc.d, tc.g)
		if err != nil {
			t.Fatal(err)
		}
		for r, c := range comms {
			group, cross, err := hier.Layout(tc.d, tc.g, r)
			if err != nil {
				t.Fatal(err)
			}
			if len(group) != tc.g || len(cross) != tc.d/tc.g || group[c.Rank()] != r || cross[c.Cross().Rank()] != r {
				t.Errorf("d=%d g=%d rank %d: group %v cross %v; in-process rank %d, cross rank %d", tc.d, tc.g, r, group, cross, c.Rank(), c.Cross().Rank())
			}
			for _, q := range group {
				if q != r && slices.Contains(cross, q) {
					t.Errorf("d=%d g=%d rank %d: %d in both %v and %v", tc.d, tc.g, r, q, group, cross)
				}
				if q/tc.g != r/tc.g {
					t.Errorf("d=%d g=%d rank %d: group %v is not consecutive ranks", tc.d, tc.g, r, group)
				}
			}
		}
	}
	for _, tc := range []struct{ d, g, r int }{{6, 4, 0}, {6, 0, 0}, {6, 3, 6}, {6, 3, -1}} {
		if _, _, err := hier.Layout(tc.d, tc.g, tc.r); !errors.Is(err, hier.ErrConfig) {
			t.Errorf("Layout(%d, %d, %d): %v, want ErrConfig", tc.d, tc.g, tc.r, err)
		}
	}
}

// GroupSizeFromEnv: unset or empty is flat (0); a divisor is taken; other
// values are refused naming the variable.
func TestGroupSizeFromEnv(t *testing.T) {
	for _, tc := range []struct {
		v    string
		want int
		ok   bool
	}{{"", 0, true}, {"3", 3, true}, {"6", 6, true}, {"1", 1, true}, {"4", 0, false}, {"0", 0, false}, {"-2", 0, false}, {"two", 0, false}} {
		t.Setenv(hier.EnvGroupSize, tc.v)
		g, err := hier.GroupSizeFromEnv(6)
		if tc.ok && (err != nil || g != tc.want) || !tc.ok && (!errors.Is(err, hier.ErrConfig) || !strings.Contains(err.Error(), hier.EnvGroupSize)) {
			t.Errorf("%s=%q: %d, %v", hier.EnvGroupSize, tc.v, g, err)
		}
	}
}
