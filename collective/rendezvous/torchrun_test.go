package rendezvous

import (
	"strconv"
	"strings"
	"testing"
)

// Environ gives the variables of torchrun for every rank of a job of 3
// hosts with 4 ranks each: the host index and count, the role's rank and
// size, and the run id.
func TestEnvironTorchrunVariables(t *testing.T) {
	const hosts, perHost = 3, 4
	for host := range hosts {
		for local := range perHost {
			rank := host*perHost + local
			c := Config{Rank: rank, WorldSize: hosts * perHost, LocalRank: local, LocalWorldSize: perHost, MasterAddr: "h", MasterPort: 1, RunID: "job"}
			env := map[string]string{}
			for _, kv := range c.Environ() {
				k, v, _ := strings.Cut(kv, "=")
				if _, dup := env[k]; dup {
					t.Errorf("%s twice", k)
				}
				env[k] = v
			}
			want := map[string]string{
				"GROUP_RANK": strconv.Itoa(host), "GROUP_WORLD_SIZE": strconv.Itoa(hosts),
				"ROLE_RANK": strconv.Itoa(rank), "ROLE_WORLD_SIZE": strconv.Itoa(hosts * perHost), "ROLE_NAME": "default",
				"TORCHELASTIC_RUN_ID": "job", "DISTOPT_RUN_ID": "job",
			}
			for k, v := range want {
				if env[k] != v {
					t.Errorf("rank %d: %s=%q, want %q", rank, k, env[k], v)
				}
			}
		}
	}
}
