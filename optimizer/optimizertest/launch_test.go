package optimizertest

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/distopt/distopt/collective/rendezvous"
)

// Environment of the rank processes of TestStartRanksPortTaken.
const (
	envLaunchRank = "OPTIMIZERTEST_LAUNCH_RANK" // set: this process is a rank
	envLaunchDir  = "OPTIMIZERTEST_LAUNCH_DIR"  // where the ranks count their starts
)

func TestMain(m *testing.M) {
	if os.Getenv(envLaunchRank) != "" {
		os.Exit(launchRank())
	}
	os.Exit(m.Run())
}

// launchRank is a rank of TestStartRanksPortTaken: it appends its rank and
// port to the file starts. On the first start, rank 0 reports the port
// taken as the rendezvous would and fails, and rank 1 waits far longer
// than the test may take (StartRanks must kill it); later starts succeed.
// Go's test timeout is what fails the test if the kill does not come.
func launchRank() int {
	dir := os.Getenv(envLaunchDir)
	rank, port := os.Getenv("RANK"), os.Getenv("MASTER_PORT")
	f, err := os.OpenFile(filepath.Join(dir, "starts"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	fmt.Fprintf(f, "%s %s\n", rank, port)
	f.Close()
	first := filepath.Join(dir, "first")
	if rank == "0" {
		if _, err := os.Stat(first); os.IsNotExist(err) {
			os.WriteFile(first, nil, 0o644)
			// Fail only once rank 1 has started (and so waits).
			for i := 0; i < 1000 && !strings.Contains("\n"+string(must(os.ReadFile(filepath.Join(dir, "starts")))), "\n1 "); i++ {
				time.Sleep(10 * time.Millisecond)
			}
			fmt.Fprintf(os.Stderr, "rank 0 cannot serve the store on port %s: %v\n", port, rendezvous.ErrPortInUse)
			return 1
		}
		return 0
	}
	// Rank 1's first start (its only line in starts so far) waits.
	if strings.Count("\n"+string(must(os.ReadFile(filepath.Join(dir, "starts")))), "\n1 ") == 1 {
		time.Sleep(time.Hour)
	}
	return 0
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}

func TestStartRanksPortTaken(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	dir := t.TempDir()
	errs := StartRanks(t, 2, envLaunchRank+"=1", envLaunchDir+"="+dir)
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
	starts := strings.Fields(string(must(os.ReadFile(filepath.Join(dir, "starts")))))
	if len(starts) != 8 {
		t.Fatalf("the ranks started %d times, want 4 (two attempts of two ranks): %q", len(starts)/2, starts)
	}
}
