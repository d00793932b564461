package rendezvous

import (
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
)

// This file lets FromEnv run under launchers other than torchrun: Slurm's
// srun and Open MPI's mpirun (or PMIx). Each variable FromEnv reads is
// taken from torchrun's name when set; otherwise it is derived from the
// launcher's variables, Open MPI's first, then Slurm's, then PMIx's.
//
//	RANK              OMPI_COMM_WORLD_RANK, SLURM_PROCID, PMIX_RANK
//	WORLD_SIZE        OMPI_COMM_WORLD_SIZE, SLURM_NTASKS
//	LOCAL_RANK        OMPI_COMM_WORLD_LOCAL_RANK, SLURM_LOCALID
//	LOCAL_WORLD_SIZE  OMPI_COMM_WORLD_LOCAL_SIZE, this node's entry of
//	                  SLURM_TASKS_PER_NODE (SLURM_NODEID), SLURM_NTASKS_PER_NODE
//	MASTER_ADDR       the first host of SLURM_JOB_NODELIST; 127.0.0.1 when
//	                  every rank is on this host
//	MASTER_PORT       slurmPortBase + SLURM_JOB_ID mod slurmPorts, or the
//	                  same of a hash of PMIX_NAMESPACE
//	DISTOPT_RUN_ID    slurm-JOBID or mpi-NAMESPACE
//
// The port derived from the job id is the same on every host, so that the
// ranks meet without exchanging it; two steps of one job running at once
// need MASTER_PORT set apart. A job on several hosts still needs
// DISTOPT_JOB_SECRET in every rank's environment (srun and mpirun -x pass
// the caller's).

// Port range of MASTER_PORT derived from a job id: [slurmPortBase,
// slurmPortBase+slurmPorts), above the well-known ports and below Linux's
// default ephemeral range's upper end.
const (
	slurmPortBase = 10000
	slurmPorts    = 50000
)

// launcherSources lists, for each variable FromEnv reads, the launchers'
// variables it is derived from, in order (for messages).
var launcherSources = map[string][]string{
	EnvRank:           {"OMPI_COMM_WORLD_RANK", "SLURM_PROCID", "PMIX_RANK"},
	EnvWorldSize:      {"OMPI_COMM_WORLD_SIZE", "SLURM_NTASKS"},
	EnvLocalRank:      {"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID"},
	EnvLocalWorldSize: {"OMPI_COMM_WORLD_LOCAL_SIZE", "SLURM_TASKS_PER_NODE", "SLURM_NTASKS_PER_NODE"},
	EnvMasterAddr:     {"SLURM_JOB_NODELIST"},
	EnvMasterPort:     {"SLURM_JOB_ID", "PMIX_NAMESPACE"},
}

// derived is one value a launcher's variables give: the value and the
// variable it comes from.
type derived struct{ value, from string }

// launcherLookup returns lookup with the variables FromEnv reads filled in
// from a launcher's when unset or empty, and a function naming, for
// messages, the variable a name's value was read from.
func launcherLookup(lookup func(string) (string, bool)) (func(string) (string, bool), func(string) string) {
	env := func(name string) string { v, _ := lookup(name); return v }
	d := mpiEnv(env)
	if d == nil {
		d = slurmEnv(env)
	}
	if d == nil {
		d = map[string]derived{}
		if r := env("PMIX_RANK"); r != "" {
			d[EnvRank] = derived{r, "PMIX_RANK"}
		}
	}
	if _, ok := d[EnvMasterAddr]; !ok {
		if host := firstHost(env); host != "" {
			d[EnvMasterAddr] = derived{host, "SLURM_JOB_NODELIST"}
		} else if ws, lws := d[EnvWorldSize], d[EnvLocalWorldSize]; ws.value != "" && ws.value == lws.value {
			d[EnvMasterAddr] = derived{"127.0.0.1", ws.from + " = " + lws.from}
		}
	}
	wrapped := func(name string) (string, bool) {
		if v, ok := lookup(name); ok && v != "" {
			return v, true
		}
		v, ok := d[name]
		return v.value, ok
	}
	from := func(name string) string {
		if v, ok := lookup(name); ok && v != "" {
			return name
		}
		if v, ok := d[name]; ok {
			return v.from + " (for " + name + ")"
		}
		return name
	}
	return wrapped, from
}

// mpiEnv derives FromEnv's variables from Open MPI's, nil when
// OMPI_COMM_WORLD_RANK is unset.
func mpiEnv(env func(string) string) map[string]derived {
	if env("OMPI_COMM_WORLD_RANK") == "" {
		return nil
	}
	d := map[string]derived{}
	for name, from := range map[string]string{
		EnvRank: "OMPI_COMM_WORLD_RANK", EnvWorldSize: "OMPI_COMM_WORLD_SIZE",
		EnvLocalRank: "OMPI_COMM_WORLD_LOCAL_RANK", EnvLocalWorldSize: "OMPI_COMM_WORLD_LOCAL_SIZE",
	} {
		if v := env(from); v != "" {
			d[name] = derived{v, from}
		}
	}
	if ns := env("PMIX_NAMESPACE"); ns != "" {
		h := fnv.New32a()
		h.Write([]byte(ns))
		d[EnvMasterPort] = derived{strconv.Itoa(slurmPortBase + int(h.Sum32()%slurmPorts)), "PMIX_NAMESPACE"}
		d[EnvRunID] = derived{"mpi-" + ns, "PMIX_NAMESPACE"}
	}
	return d
}

// slurmEnv derives FromEnv's variables from Slurm's, nil when SLURM_PROCID
// is unset (not a task started by srun).
func slurmEnv(env func(string) string) map[string]derived {
	if env("SLURM_PROCID") == "" {
		return nil
	}
	d := map[string]derived{EnvRank: {env("SLURM_PROCID"), "SLURM_PROCID"}}
	set := func(name, from string) {
		if v := env(from); v != "" {
			d[name] = derived{v, from}
		}
	}
	set(EnvWorldSize, "SLURM_NTASKS")
	set(EnvLocalRank, "SLURM_LOCALID")
	set(EnvLocalWorldSize, "SLURM_NTASKS_PER_NODE")
	if tasks, err := ExpandTasksPerNode(env("SLURM_TASKS_PER_NODE")); err == nil {
		if node, err := strconv.Atoi(env("SLURM_NODEID")); err == nil && node >= 0 && node < len(tasks) {
			d[EnvLocalWorldSize] = derived{strconv.Itoa(tasks[node]), "SLURM_TASKS_PER_NODE"}
		}
	}
	if job, err := strconv.ParseUint(env("SLURM_JOB_ID"), 10, 64); err == nil {
		d[EnvMasterPort] = derived{strconv.Itoa(slurmPortBase + int(job%slurmPorts)), "SLURM_JOB_ID"}
		d[EnvRunID] = derived{"slurm-" + env("SLURM_JOB_ID"), "SLURM_JOB_ID"}
	}
	return d
}

// firstHost is the first host of the job's Slurm nodelist, "" when there
// is none or it does not parse.
func firstHost(env func(string) string) string {
	for _, name := range []string{"SLURM_JOB_NODELIST", "SLURM_NODELIST"} {
		if hosts, err := ExpandHostlist(env(name)); err == nil && env(name) != "" {
			return hosts[0]
		}
	}
	return ""
}

// notSet is the error of a variable FromEnv needs that is unset, naming
// the launchers' variables that would have given it.
func notSet(name string) error {
	msg := "rendezvous: environment variable " + name + " is not set"
	if alt := launcherSources[name]; len(alt) > 0 {
		msg += " (nor " + strings.Join(alt, ", ") + ")"
	}
	return fmt.Errorf("%s: %w", msg, ErrConfig)
}
