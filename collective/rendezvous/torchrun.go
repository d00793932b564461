package rendezvous

import "strconv"

// torchrunEnviron returns the variables torchrun sets beyond those FromEnv
// reads, for programs written for it: GROUP_RANK (the host's index),
// GROUP_WORLD_SIZE (the number of hosts), ROLE_RANK and ROLE_WORLD_SIZE
// (the rank and world size: one role), ROLE_NAME ("default") and
// TORCHELASTIC_RUN_ID (the run id). The host's index is Rank /
// LocalWorldSize: every host runs LocalWorldSize ranks, numbered host by
// host, as the distopt launcher and torchrun number them.
func (c Config) torchrunEnviron() []string {
	lws := max(1, c.LocalWorldSize)
	return []string{
		"GROUP_RANK=" + strconv.Itoa(c.Rank/lws),
		"GROUP_WORLD_SIZE=" + strconv.Itoa((c.WorldSize+lws-1)/lws),
		"ROLE_RANK=" + strconv.Itoa(c.Rank),
		"ROLE_WORLD_SIZE=" + strconv.Itoa(c.WorldSize),
		"ROLE_NAME=default",
		envTorchRunID + "=" + c.runID(),
	}
}
