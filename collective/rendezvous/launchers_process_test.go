package rendezvous_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/distopt/distopt/collective/rendezvous"
)

// launchChildEnv marks a process of TestLaunchedRank started by
// TestLaunchers.
const launchChildEnv = "RENDEZVOUS_TEST_LAUNCHED"

// TestLaunchedRank is the main of a rank process: FromEnv, Connect, and
// an all-gather of every rank's view of its place, printed on one line.
func TestLaunchedRank(t *testing.T) {
	if os.Getenv(launchChildEnv) == "" {
		t.Skip("a rank process of TestLaunchers")
	}
	cfg, err := rendezvous.FromEnv()
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, err := rendezvous.Connect(ctx, cfg)
	require.NoError(t, err)
	defer s.Close()
	me := fmt.Sprintf("%d/%d local %d/%d at %s run %s", cfg.Rank, cfg.WorldSize, cfg.LocalRank, cfg.LocalWorldSize, cfg.MasterAddress(), cfg.RunID)
	all, err := s.AllGatherValues(ctx, "who", []byte(me))
	require.NoError(t, err)
	var lines []string
	for _, v := range all {
		lines = append(lines, string(v))
	}
	fmt.Printf("GATHERED %s\n", strings.Join(lines, "; "))
}

// freeJobPort returns a free loopback port that a Slurm job id can name
// (10000 + job mod 50000) and that job id.
func freeJobPort(t *testing.T) (port int, job int) {
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		port = l.Addr().(*net.TCPAddr).Port
		l.Close()
		if port >= 10000 && port < 60000 {
			return port, 1_000_000 + port - 10000 // 1e6 is a multiple of 50000
		}
	}
	t.Fatal("no free port in [10000, 60000)")
	return 0, 0
}

// TestLaunchers starts this test binary once per rank with only the
// variables srun or mpirun would set (no torchrun variable), on loopback,
// and checks every rank joined and saw the same places: rank r's own
// report, gathered by every rank, says rank r of the world, on the
// address the launcher's variables give.
func TestLaunchers(t *testing.T) {
	exe, err := os.Executable()
	require.NoError(t, err)
	port, job := freeJobPort(t)
	const n = 3
	for _, launcher := range []string{"srun", "mpirun"} {
		t.Run(launcher, func(t *testing.T) {
			env := func(r int) []string {
				if launcher == "srun" {
					return []string{"SLURM_PROCID=" + strconv.Itoa(r), "SLURM_NTASKS=3", "SLURM_LOCALID=" + strconv.Itoa(r), "SLURM_NODEID=0",
						"SLURM_TASKS_PER_NODE=3", "SLURM_JOB_ID=" + strconv.Itoa(job), "SLURM_JOB_NODELIST=localhost"}
				}
				return []string{"OMPI_COMM_WORLD_RANK=" + strconv.Itoa(r), "OMPI_COMM_WORLD_SIZE=3", "OMPI_COMM_WORLD_LOCAL_RANK=" + strconv.Itoa(r),
					"OMPI_COMM_WORLD_LOCAL_SIZE=3", "PMIX_RANK=" + strconv.Itoa(r), "MASTER_PORT=" + strconv.Itoa(port)}
			}
			outs := make([]string, n)
			errs := make([]error, n)
			var wg sync.WaitGroup
			for r := range n {
				wg.Go(func() {
					cmd := exec.Command(exe, "-test.run", "^TestLaunchedRank$", "-test.v")
					cmd.Env = append(env(r), launchChildEnv+"=1")
					b, err := cmd.CombinedOutput()
					outs[r], errs[r] = string(b), err
				})
			}
			wg.Wait()
			addr := "localhost:" + strconv.Itoa(port)
			run := "slurm-" + strconv.Itoa(job)
			if launcher == "mpirun" {
				addr, run = "127.0.0.1:"+strconv.Itoa(port), "" // no PMIX_NAMESPACE here
			}
			var want []string
			for r := range n {
				want = append(want, fmt.Sprintf("%d/3 local %d/3 at %s run %s", r, r, addr, run))
			}
			for r := range n {
				require.NoError(t, errs[r], "rank %d:\n%s", r, outs[r])
				assert.Contains(t, outs[r], "GATHERED "+strings.Join(want, "; ")+"\n", "rank %d", r)
			}
		})
	}
}
