package optimizertest

import (
	"bytes"
	"encoding/gob"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"

	"github.com/distopt/distopt/collective/rendezvous"
)

// StartRanks runs the test binary again world times, running no test, as
// ranks 0 to world-1 of one job on this host. Each process gets the test's
// environment, then what a launcher sets (RANK, WORLD_SIZE, LOCAL_RANK,
// LOCAL_WORLD_SIZE, MASTER_ADDR=127.0.0.1, a free MASTER_PORT), then env,
// which wins. The test's TestMain finds a rank process by a variable in env,
// and runs it. The processes write to the test's standard error. StartRanks
// returns their exit errors by rank, nil for a clean exit, and fails t when
// one cannot start. Another process may take the port before rank 0 listens.
// When a rank reports rendezvous.ErrPortInUse, StartRanks stops every rank at
// once and starts them again on another port, three attempts in all.
func StartRanks(t testing.TB, world int, env ...string) []error {
	t.Helper()
	for attempt := 1; ; attempt++ {
		errs, portTaken := startRanks(t, world, env)
		if !portTaken || attempt == 3 {
			return errs
		}
		t.Logf("optimizertest: the store's port was taken (attempt %d); starting the ranks again on another port", attempt)
	}
}

// startRanks is one attempt of StartRanks; portTaken reports that a rank
// printed rendezvous.ErrPortInUse, and then every rank was killed.
func startRanks(t testing.TB, world int, env []string) (errs []error, portTaken bool) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	taken := make(chan struct{})
	var once sync.Once
	procs := make([]*exec.Cmd, world)
	for r := range world {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(),
			"RANK="+strconv.Itoa(r), "WORLD_SIZE="+strconv.Itoa(world), "LOCAL_RANK="+strconv.Itoa(r),
			"LOCAL_WORLD_SIZE="+strconv.Itoa(world), "MASTER_ADDR=127.0.0.1", "MASTER_PORT="+strconv.Itoa(port))
		cmd.Env = append(cmd.Env, env...)
		w := &watchWriter{w: os.Stderr, needle: []byte(rendezvous.ErrPortInUse.Error()), found: func() { once.Do(func() { close(taken) }) }}
		cmd.Stdout, cmd.Stderr = w, w
		if err := cmd.Start(); err != nil {
			for _, p := range procs[:r] {
				p.Process.Kill()
				p.Wait()
			}
			t.Fatal(err)
		}
		procs[r] = cmd
	}
	done := make(chan struct{})
	go func() {
		select {
		case <-taken:
			for _, p := range procs {
				p.Process.Kill()
			}
		case <-done:
		}
	}()
	errs = make([]error, world)
	for r, p := range procs {
		errs[r] = p.Wait()
	}
	close(done)
	select {
	case <-taken:
		return errs, true
	default:
		return errs, false
	}
}

// watchWriter passes what is written to w and calls found once the output
// contains needle (a needle cut by two writes is found too: the writer
// keeps the tail of the previous write).
type watchWriter struct {
	mu     sync.Mutex
	w      io.Writer
	needle []byte
	tail   []byte
	found  func()
}

func (x *watchWriter) Write(p []byte) (int, error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	buf := append(x.tail, p...)
	if bytes.Contains(buf, x.needle) {
		x.found()
	}
	keep := min(len(buf), len(x.needle)-1)
	x.tail = append(x.tail[:0:0], buf[len(buf)-keep:]...)
	return x.w.Write(p)
}

// resultPath is where rank's result lies in dir.
func resultPath(dir string, rank int) string {
	return filepath.Join(dir, fmt.Sprintf("rank-%d.gob", rank))
}

// WriteResult writes rank's result to the file rank-<rank>.gob in dir, gob
// encoded, for ReadResult in the test that started the rank.
func WriteResult(dir string, rank int, res Result) error {
	f, err := os.Create(resultPath(dir, rank))
	if err != nil {
		return err
	}
	if err := gob.NewEncoder(f).Encode(&res); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// ReadResult reads the result that WriteResult wrote for rank in dir.
// encoding/gob turns empty slices, such as a scalar's shape, into nil.
func ReadResult(dir string, rank int) (Result, error) {
	f, err := os.Open(resultPath(dir, rank))
	if err != nil {
		return Result{}, err
	}
	defer f.Close()
	var res Result
	if err := gob.NewDecoder(f).Decode(&res); err != nil {
		return Result{}, fmt.Errorf("optimizertest: result of rank %d: %w", rank, err)
	}
	return res, nil
}
