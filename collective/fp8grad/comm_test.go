package fp8grad_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/distopt/distopt/bf16"
	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/collective/fp8grad"
	"github.com/distopt/distopt/collective/grpccomm"
	"github.com/distopt/distopt/collective/hier"
	"github.com/distopt/distopt/collective/inproc"
	"github.com/distopt/distopt/collective/rendezvous"
	"github.com/distopt/distopt/fp8"
)

// wrap wraps every communicator of a world.
func wrap(t testing.TB, comms []collective.Communicator, cfg fp8grad.Config) []*fp8grad.Comm {
	out := make([]*fp8grad.Comm, len(comms))
	for r, c := range comms {
		w, err := fp8grad.New(c, cfg)
		if err != nil {
			t.Fatal(err)
		}
		out[r] = w
	}
	t.Cleanup(func() {
		for _, c := range out {
			c.Close()
		}
	})
	return out
}

// onAll runs f on every rank at once and returns the errors.
func onAll[C any](comms []C, f func(r int, c C) error) error {
	errs := make([]error, len(comms))
	var wg sync.WaitGroup
	for r, c := range comms {
		wg.Go(func() { errs[r] = f(r, c) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// input returns rank r's gradient bucket of total elements: random values
// spanning the FP8 range with blocks of zeros.
func input(seed uint64, r, total, block int) []float32 {
	rng := rand.New(rand.NewPCG(seed, uint64(r)))
	x := make([]float32, total)
	for lo := 0; lo < total; lo += block {
		if rng.IntN(6) == 0 {
			continue
		}
		mag := math.Ldexp(1, rng.IntN(50)-30)
		for i := lo; i < min(lo+block, total); i++ {
			x[i] = float32(rng.NormFloat64() * mag)
		}
	}
	return x
}

// encode returns x as a buffer of dt (BFloat16: rounded) and the values
// the buffer holds.
func encode(x []float32, dt buffer.DType) (buffer.HostBuffer, []float32) {
	if dt == buffer.Float32 {
		return collective.ToBytes(x), x
	}
	h := make([]uint16, len(x))
	v := make([]float32, len(x))
	for i, e := range x {
		h[i] = bf16.FromFloat32(e)
		v[i] = bf16.ToFloat32(h[i])
	}
	return collective.ToBytes(h), v
}

// reference computes shard p of the FP8 reduce-scatter of the ranks'
// values with the codec alone (no exchange).
func reference(vals [][]float32, p, n int, cfg fp8grad.Config, red collective.ReduceOp, dt buffer.DType) []byte {
	pieces := make([][]byte, len(vals))
	for s, v := range vals {
		pieces[s] = make([]byte, fp8grad.PieceBytes(n, cfg.Block))
		fp8grad.Quantize(pieces[s], v[p*n:(p+1)*n], nil, cfg.Block, cfg.Format)
	}
	sum := make([]float32, n)
	div := float32(1)
	if red == collective.Avg {
		div = float32(len(vals))
	}
	fp8grad.DequantSum(sum, pieces, cfg.Block, cfg.Format, div)
	b, _ := encode(sum, dt)
	return b
}

type rsCase struct {
	n   int
	cfg fp8grad.Config
	dt  buffer.DType
	red collective.ReduceOp
}

// configs are the encodings the tests run: the default, and E5M2 with a
// block that no shard size is a multiple of.
var configs = []fp8grad.Config{{}, {Format: fp8.E5M2, Block: 7}}

func rsCases(cfg fp8grad.Config) []rsCase {
	var cs []rsCase
	for _, dt := range []buffer.DType{buffer.Float32, buffer.BFloat16} {
		for _, red := range []collective.ReduceOp{collective.Sum, collective.Avg} {
			for _, n := range []int{1, 129, 256, 300} {
				cs = append(cs, rsCase{n, cfg, dt, red})
			}
		}
	}
	return cs
}

// runRS reduce-scatters every case on comms (in place and out of place
// alternately, with an all-gather in the same group) and checks each
// rank's shard against reference, bit for bit, and against the exact sum
// within the FP8 error bound.
func runRS(t *testing.T, comms []*fp8grad.Comm) {
	d := len(comms)
	for i, tc := range rsCases(comms[0].Config()) {
		t.Run(fmt.Sprintf("%v/block=%d/%s/%s/n=%d", tc.cfg.Format, tc.cfg.Block, tc.dt, tc.red, tc.n), func(t *testing.T) {
			vals := make([][]float32, d)
			bufs := make([]buffer.HostBuffer, d)
			for r := range d {
				bufs[r], vals[r] = encode(input(uint64(i), r, d*tc.n, tc.cfg.Block), tc.dt)
			}
			inPlace := i%2 == 0
			gathered := make([]buffer.HostBuffer, d)
			err := onAll(comms, func(r int, c *fp8grad.Comm) error {
				es := tc.dt.Size()
				dst := buffer.HostBuffer(make([]byte, tc.n*es))
				if inPlace {
					dst = bufs[r][r*tc.n*es : (r+1)*tc.n*es]
				}
				gathered[r] = make(buffer.HostBuffer, d)
				ops := []collective.Op{
					{Kind: collective.OpReduceScatter, Dst: dst, Src: bufs[r], DType: tc.dt, Reduce: tc.red},
					{Kind: collective.OpAllGather, Dst: gathered[r], Src: buffer.HostBuffer{byte(r + 1)}},
				}
				if err := c.Start(ops...).Wait(context.Background()); err != nil {
					return err
				}
				want := reference(vals, r, tc.n, c.Config(), tc.red, tc.dt)
				if string(dst) != string(want) {
					return fmt.Errorf("rank %d: shard differs from the reference", r)
				}
				return checkBound(vals, r, tc, dst, d)
			})
			if err != nil {
				t.Fatal(err)
			}
			for r := range d {
				for s := range d {
					if gathered[r][s] != byte(s+1) {
						t.Fatalf("rank %d: the all-gather of the same group gave %v", r, gathered[r])
					}
				}
			}
		})
	}
}

// checkBound checks shard r against the float64 sum: each of the d terms
// is off by at most 2^-mbits of its block's amax, plus the float32 (and
// bfloat16) rounding of the result.
func checkBound(vals [][]float32, r int, tc rsCase, got []byte, d int) error {
	mb := 3
	if tc.cfg.Format == fp8.E5M2 {
		mb = 2
	}
	g := make([]float64, tc.n)
	for i := range tc.n {
		bits := collective.ElementBits(got, tc.dt, i)
		if tc.dt == buffer.Float32 {
			g[i] = float64(math.Float32frombits(uint32(bits)))
		} else {
			g[i] = float64(bf16.ToFloat32(uint16(bits)))
		}
	}
	for i := range tc.n {
		var exact, tol, mag float64
		k := i / tc.cfg.Block
		for _, v := range vals {
			piece := v[r*tc.n : (r+1)*tc.n]
			var amax float64
			for _, e := range piece[k*tc.cfg.Block : min((k+1)*tc.cfg.Block, tc.n)] {
				amax = max(amax, math.Abs(float64(e)))
			}
			exact += float64(piece[i])
			tol += math.Ldexp(amax, -mb)
			mag += math.Abs(float64(piece[i])) + math.Ldexp(amax, -mb)
		}
		if tc.red == collective.Avg {
			exact, tol, mag = exact/float64(d), tol/float64(d), mag/float64(d)
		}
		tol += mag * 0x1p-8 // float32 sums and the bfloat16 rounding
		if math.Abs(g[i]-exact) > tol {
			return fmt.Errorf("rank %d element %d: %g, exact %g (tolerance %g)", r, i, g[i], exact, tol)
		}
	}
	return nil
}

// TestReduceScatterInProcess: d in {2, 3, 4} in-process ranks.
func TestReduceScatterInProcess(t *testing.T) {
	for _, d := range []int{2, 3, 4} {
		for _, cfg := range configs {
			t.Run(fmt.Sprintf("d=%d", d), func(t *testing.T) {
				runRS(t, wrap(t, inproc.Communicators(d), cfg))
			})
		}
	}
}

// TestReduceScatterGRPC: the same checks over gRPC (3 ranks on loopback).
func TestReduceScatterGRPC(t *testing.T) {
	for _, cfg := range configs {
		runRS(t, wrap(t, grpcWorld(t, 3), cfg))
	}
}

// TestPassThrough: a Max reduce-scatter and an all-reduce are not encoded:
// their results are exact.
func TestPassThrough(t *testing.T) {
	const d, n = 3, 5
	comms := wrap(t, inproc.Communicators(d), fp8grad.Config{})
	err := onAll(comms, func(r int, c *fp8grad.Comm) error {
		src := make([]float32, d*n)
		for i := range src {
			src[i] = 0.1 * float32(i*(r+1))
		}
		dst := make(buffer.HostBuffer, 4*n)
		sum := collective.ToBytes([]float32{0.1 * float32(r)})
		err := c.Start(
			collective.Op{Kind: collective.OpReduceScatter, Dst: dst, Src: collective.ToBytes(src), DType: buffer.Float32, Reduce: collective.Max},
			collective.Op{Kind: collective.OpAllReduce, Dst: sum, Src: sum, DType: buffer.Float32, Reduce: collective.Sum},
		).Wait(context.Background())
		if err != nil {
			return err
		}
		for i, v := range collective.FromBytes[float32](dst) {
			if want := 0.1 * float32((r*n+i)*d); v != want {
				return fmt.Errorf("rank %d: max element %d = %g, want %g", r, i, v, want)
			}
		}
		if got, want := collective.FromBytes[float32](sum)[0], float32(float32(0+0.1)+0.2); got != want {
			return fmt.Errorf("rank %d: all-reduce %g, want %g", r, got, want)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestNonFinite: a NaN or an infinity in one rank's gradient makes the
// owner's shard NaN at exactly that element, and nowhere else.
func TestNonFinite(t *testing.T) {
	const d, n, block = 3, 300, 128
	for _, bad := range []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1))} {
		comms := wrap(t, inproc.Communicators(d), fp8grad.Config{Block: block})
		const owner = 2
		const at = owner*n + 130 // block 1 of shard 2
		err := onAll(comms, func(r int, c *fp8grad.Comm) error {
			x := input(7, r, d*n, block)
			if r == 1 {
				x[at] = bad
			}
			dst := make(buffer.HostBuffer, 4*n)
			if err := collective.ReduceScatter(context.Background(), c, dst, collective.ToBytes(x), buffer.Float32, collective.Avg); err != nil {
				return err
			}
			for i, v := range collective.FromBytes[float32](dst) {
				want := r == owner && i == at-owner*n
				if math.IsNaN(float64(v)) != want || math.IsInf(float64(v), 0) {
					return fmt.Errorf("rank %d element %d = %g (%g injected)", r, i, v, bad)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

// TestConfigErrors: bad configurations and device communicators are
// refused with ErrConfig.
func TestConfigErrors(t *testing.T) {
	host := inproc.Communicators(1)[0]
	defer host.Close()
	hierComm, err := hier.InProcess(2, 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range hierComm {
		defer c.Close()
	}
	for _, tc := range []struct {
		name string
		c    collective.Communicator
		cfg  fp8grad.Config
	}{
		{"nil communicator", nil, fp8grad.Config{}},
		{"format", host, fp8grad.Config{Format: 9}},
		{"block", host, fp8grad.Config{Block: -1}},
		{"device memory", deviceComm{host}, fp8grad.Config{}},
		{"hierarchical", hierComm[0], fp8grad.Config{}},
	} {
		if _, err := fp8grad.New(tc.c, tc.cfg); !errors.Is(err, fp8grad.ErrConfig) {
			t.Errorf("%s: got %v, want ErrConfig", tc.name, err)
		}
	}
}

type deviceComm struct{ collective.Communicator }

func (deviceComm) Memory() buffer.MemoryKind { return buffer.Device }

// grpcWorld connects n gRPC ranks on loopback.
func grpcWorld(t *testing.T, n int) []collective.Communicator {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := rendezvous.Serve(lis)
	port := lis.Addr().(*net.TCPAddr).Port
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stores := make([]*rendezvous.Store, n)
	comms := make([]collective.Communicator, n)
	err = onAll(comms, func(r int, _ collective.Communicator) error {
		rc := rendezvous.Config{Rank: r, WorldSize: n, LocalRank: r, LocalWorldSize: n,
			MasterAddr: "127.0.0.1", MasterPort: port, RunID: t.Name(), CloseTimeout: time.Second}
		var err error
		if stores[r], err = rendezvous.Dial(ctx, rc); err != nil {
			return err
		}
		comms[r], err = grpccomm.New(ctx, stores[r], grpccomm.Config{})
		return err
	})
	t.Cleanup(func() {
		for _, s := range stores {
			if s != nil {
				s.Close()
			}
		}
		srv.Close()
	})
	if err != nil {
		t.Fatal(err)
	}
	return comms
}

// TestPredictMemory: the residual a Comm holds after reduce-scattering a
// bucket is what PredictMemory says, with and without error feedback.
func TestPredictMemory(t *testing.T) {
	const d, n = 2, 300
	for _, ef := range []bool{false, true} {
		cfg := fp8grad.Config{ErrorFeedback: ef}
		comms := wrap(t, inproc.Communicators(d), cfg)
		err := onAll(comms, func(r int, c *fp8grad.Comm) error {
			src := collective.ToBytes(input(1, r, d*n, 128))
			return collective.ReduceScatter(context.Background(), c, make(buffer.HostBuffer, 4*n), src, buffer.Float32, collective.Sum)
		})
		if err != nil {
			t.Fatal(err)
		}
		m, err := fp8grad.PredictMemory(d*n, d, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if got := int64(comms[0].ResidualBytes()); got != m.Residual {
			t.Errorf("error feedback %t: residual %d bytes, predicted %d", ef, got, m.Residual)
		}
		if want := int64(2 * d * (4*3 + 300)); m.Staging != want {
			t.Errorf("staging %d bytes, want %d", m.Staging, want)
		}
	}
	if _, err := fp8grad.NewDevice(deviceComm{inproc.Communicators(1)[0]}, fp8grad.Config{}, nil); !errors.Is(err, fp8grad.ErrConfig) {
		t.Errorf("NewDevice without a stream: %v", err)
	}
	if _, err := fp8grad.PredictMemory(7, 2, fp8grad.Config{}); !errors.Is(err, fp8grad.ErrConfig) {
		t.Errorf("odd bucket: %v", err)
	}
}
