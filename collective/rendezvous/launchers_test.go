package rendezvous

import (
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// envOf is a lookup over a map, as the environment.
func envOf(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

// TestFromEnvLaunchers checks the Config FromEnv reads under srun, mpirun
// and PMIx, written out by hand from each launcher's documented variables,
// and that torchrun's variables win where both are set.
func TestFromEnvLaunchers(t *testing.T) {
	secret := "s3cret"
	for _, tc := range []struct {
		name string
		env  map[string]string
		want Config
	}{
		{"srun, 3 nodes of 2 and one of 1, rank 5 on node 2", map[string]string{
			"SLURM_PROCID": "5", "SLURM_NTASKS": "7", "SLURM_LOCALID": "1", "SLURM_NODEID": "2",
			"SLURM_TASKS_PER_NODE": "2(x3),1", "SLURM_JOB_ID": "123456", "SLURM_JOB_NODELIST": "gpu[01-04]", EnvSecret: secret,
		}, Config{Rank: 5, WorldSize: 7, LocalRank: 1, LocalWorldSize: 2, MasterAddr: "gpu01", MasterPort: 10000 + 123456%50000, RunID: "slurm-123456", Secret: secret}},
		{"srun, last node of one task", map[string]string{
			"SLURM_PROCID": "6", "SLURM_NTASKS": "7", "SLURM_LOCALID": "0", "SLURM_NODEID": "3",
			"SLURM_TASKS_PER_NODE": "2(x3),1", "SLURM_JOB_ID": "77", "SLURM_JOB_NODELIST": "a9,gpu[01-03]", EnvSecret: secret,
		}, Config{Rank: 6, WorldSize: 7, LocalRank: 0, LocalWorldSize: 1, MasterAddr: "a9", MasterPort: 10077, RunID: "slurm-77", Secret: secret}},
		{"srun with --ntasks-per-node and MASTER_ADDR/MASTER_PORT", map[string]string{
			"SLURM_PROCID": "3", "SLURM_NTASKS": "4", "SLURM_LOCALID": "1", "SLURM_NTASKS_PER_NODE": "2",
			"SLURM_JOB_ID": "5", "SLURM_JOB_NODELIST": "n[1-2]", "MASTER_ADDR": "10.0.0.9", "MASTER_PORT": "2345", EnvSecret: secret,
		}, Config{Rank: 3, WorldSize: 4, LocalRank: 1, LocalWorldSize: 2, MasterAddr: "10.0.0.9", MasterPort: 2345, RunID: "slurm-5", Secret: secret}},
		{"mpirun on one host", map[string]string{
			"OMPI_COMM_WORLD_RANK": "2", "OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_RANK": "2", "OMPI_COMM_WORLD_LOCAL_SIZE": "4",
			"PMIX_RANK": "2", "MASTER_PORT": "3000",
		}, Config{Rank: 2, WorldSize: 4, LocalRank: 2, LocalWorldSize: 4, MasterAddr: "127.0.0.1", MasterPort: 3000}},
		{"mpirun inside a Slurm allocation: Open MPI's ranks, Slurm's nodelist", map[string]string{
			"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "8", "OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_LOCAL_SIZE": "4",
			"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_JOB_NODELIST": "c[3-4]", "MASTER_PORT": "4000", EnvSecret: secret,
		}, Config{Rank: 1, WorldSize: 8, LocalRank: 1, LocalWorldSize: 4, MasterAddr: "c3", MasterPort: 4000, Secret: secret}},
		{"torchrun's variables win", map[string]string{
			"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500",
			"SLURM_PROCID": "1", "SLURM_NTASKS": "4", "SLURM_LOCALID": "1", "SLURM_NTASKS_PER_NODE": "4", "SLURM_JOB_ID": "9", "SLURM_JOB_NODELIST": "x1",
		}, Config{Rank: 0, WorldSize: 2, LocalRank: 0, LocalWorldSize: 2, MasterAddr: "127.0.0.1", MasterPort: 29500, RunID: "slurm-9"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := fromLookup(envOf(tc.env))
			require.NoError(t, err)
			if tc.want.RunID == "" {
				tc.want.RunID = got.RunID // the namespace's, when mpirun sets one
			}
			assert.Equal(t, tc.want, got)
		})
	}
}

// TestFromEnvLauncherErrors: a launcher's bad value names the launcher's
// variable, and a missing one lists every variable that could give it.
func TestFromEnvLauncherErrors(t *testing.T) {
	_, err := fromLookup(envOf(map[string]string{"SLURM_PROCID": "x", "SLURM_NTASKS": "2", "SLURM_LOCALID": "0", "SLURM_NTASKS_PER_NODE": "2", "SLURM_JOB_ID": "1", "SLURM_JOB_NODELIST": "localhost"}))
	require.ErrorIs(t, err, ErrConfig)
	assert.Contains(t, err.Error(), `SLURM_PROCID (for RANK)="x" is not an integer`)
	_, err = fromLookup(envOf(map[string]string{"PMIX_RANK": "1"}))
	require.ErrorIs(t, err, ErrConfig)
	assert.Contains(t, err.Error(), "WORLD_SIZE is not set (nor OMPI_COMM_WORLD_SIZE, SLURM_NTASKS)")
	assert.NotContains(t, err.Error(), "variable RANK is not set")
	for _, line := range strings.Split(err.Error(), "\n") {
		assert.Equal(t, 1, strings.Count(line, "rendezvous:"), "%q names the package more than once", line)
	}
}

// TestSlurmPortRange: the port derived from any job id is a TCP port
// above the well-known ones, the same for every rank of the job.
func TestSlurmPortRange(t *testing.T) {
	for _, job := range []uint64{0, 1, 49999, 50000, 123456789, 1<<63 + 5} {
		d := slurmEnv(func(k string) string {
			return map[string]string{"SLURM_PROCID": "0", "SLURM_JOB_ID": strconv.FormatUint(job, 10)}[k]
		})
		p, err := strconv.Atoi(d[EnvMasterPort].value)
		require.NoError(t, err)
		assert.Equal(t, 10000+int(job%50000), p)
		assert.True(t, p >= 1024 && p <= 65535, "job %d: port %d", job, p)
	}
}
