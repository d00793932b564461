package main

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"time"

	"github.com/distopt/distopt/collective/hier"
	"github.com/distopt/distopt/collective/rendezvous"
)

func init() {
	commands["run"] = command{summary: "start the ranks of a job on this host (torchrun style)", run: runCommand}
}

// runOptions are the arguments of `distopt run`.
type runOptions struct {
	nproc, nnodes, nodeRank int
	masterAddr              string
	masterPort              int
	runID                   string
	grace                   time.Duration
	groupSize               int // hierarchical sharding's group size; 0: not set
	verbose                 bool
	program                 []string
	// torchrun's rendezvous flags, folded into the above by applyTorchrun.
	standalone                bool
	rdzvEndpoint, rdzvBackend string
}

// runCommand is `distopt run`.
func runCommand(args []string) int {
	o, err := parseRun(args, os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "distopt run: %v\n", err)
		return 2
	}
	cfgs, err := o.configs()
	if err == nil {
		err = limitOMPThreads(o.nproc, os.Stderr)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "distopt run: %v\n", err)
		return 2
	}
	l := &launcher{stdout: os.Stdout, stderr: os.Stderr, grace: o.grace, env: o.env(), verbose: o.verbose}
	return l.run(o.program, cfgs)
}

// runUsage is the first line of `distopt run -h`.
const runUsage = "usage: distopt run --nproc-per-node N [--nnodes M --node-rank K] [--master-addr A] [--master-port P] -- PROGRAM ARGS..."

// parseRun parses the arguments of `distopt run`. Every flag may be spelled
// with '_' for '-', as torchrun allows.
func parseRun(args []string, stderr io.Writer) (runOptions, error) {
	var o runOptions
	nproc, nnodes := nprocValue{}, nnodesValue(1)
	fs := flag.NewFlagSet("distopt run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Var(&nproc, "nproc-per-node", "`N` ranks to start on this host (required): a number, or gpu (one per GPU), cpu (one per CPU) or auto (gpu if there are GPUs, else cpu)")
	fs.Var(&nnodes, "nnodes", "`M` hosts (torchrun's MIN:MAX only as M:M)")
	fs.IntVar(&o.nodeRank, "node-rank", 0, "index `K` of this host, in [0, nnodes)")
	fs.StringVar(&o.masterAddr, "master-addr", "", "`address` of rank 0's host (default 127.0.0.1 on one host; required with several)")
	fs.IntVar(&o.masterPort, "master-port", 0, "`port` of rank 0's store (default a free port on one host; required with several)")
	fs.StringVar(&o.rdzvEndpoint, "rdzv-endpoint", "", "`HOST[:PORT]` of rank 0's store, as torchrun's (port default 29400): the same as --master-addr HOST --master-port PORT")
	fs.StringVar(&o.rdzvBackend, "rdzv-backend", "", "torchrun's rendezvous `backend`: c10d or static both mean rank 0's store at the endpoint")
	fs.BoolVar(&o.standalone, "standalone", false, "one host, rank 0's store on a free local port (the default on one host)")
	fs.StringVar(&o.runID, "run-id", "", "`name` of the run (default random on one host, derived from the master address with several)")
	fs.StringVar(&o.runID, "rdzv-id", "", "the same as --run-id (torchrun's `name`)")
	fs.IntVar(&o.groupSize, "group-size", 0, "hierarchical sharding in groups of `G` consecutive ranks (collective/hier; G = nproc-per-node: a group per host): sets "+hier.EnvGroupSize+" for every rank; G divides the world size")
	fs.DurationVar(&o.grace, "grace", 10*time.Second, "how long stopped ranks, and processes a rank left, get between SIGTERM and SIGKILL")
	fs.BoolVar(&o.verbose, "v", false, "debug output: the processes started, signalled and killed")
	aliases := underscoreAliases(fs)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), runUsage)
		printFlags(fs.Output(), fs, aliases)
	}
	if err := parseFlags(fs, args); err != nil {
		return o, err
	}
	o.nproc, o.nnodes = nproc.n, int(nnodes)
	if err := o.applyTorchrun(); err != nil {
		return o, err
	}
	o.program = fs.Args()
	switch {
	case len(o.program) == 0:
		return o, errors.New("no program to run (distopt run [flags] -- PROGRAM ARGS...)")
	case nproc.spec == "":
		return o, errors.New("--nproc-per-node is required: N ranks on this host, or gpu, cpu or auto")
	case o.nproc < 1:
		return o, fmt.Errorf("--nproc-per-node=%d, want >= 1", o.nproc)
	case o.nnodes < 1:
		return o, fmt.Errorf("--nnodes=%d, want >= 1", o.nnodes)
	case o.nproc > rendezvous.MaxWorldSize/o.nnodes:
		return o, fmt.Errorf("--nnodes %d x --nproc-per-node %d exceeds %d ranks (rendezvous.MaxWorldSize)", o.nnodes, o.nproc, rendezvous.MaxWorldSize)
	case o.masterPort < 0 || o.masterPort > 65535:
		return o, fmt.Errorf("--master-port=%d is not a TCP port", o.masterPort)
	case o.nodeRank < 0 || o.nodeRank >= o.nnodes:
		return o, fmt.Errorf("--node-rank=%d is not in [0, %d)", o.nodeRank, o.nnodes)
	case o.nnodes > 1 && (o.masterAddr == "" || o.masterPort == 0):
		return o, errors.New("with --nnodes > 1, --master-addr and --master-port are required (rank 0's host and a free port there)")
	case o.grace < 0:
		return o, fmt.Errorf("--grace=%v is negative", o.grace)
	case o.groupSize < 0 || o.groupSize > 0 && o.nnodes*o.nproc%o.groupSize != 0:
		return o, fmt.Errorf("--group-size=%d does not divide the world size %d (--nnodes %d x --nproc-per-node %d)", o.groupSize, o.nnodes*o.nproc, o.nnodes, o.nproc)
	}
	return o, nil
}

// configs returns the configuration of each rank of this host, picking the
// defaults left open. The job's secret (rendezvous.EnvSecret) comes from
// the launcher's environment; on one host, when it is unset, a random one
// is created for the job. Several hosts must share one, so there it is
// required.
func (o runOptions) configs() ([]rendezvous.Config, error) {
	addr, port, runID := o.masterAddr, o.masterPort, o.runID
	secret, err := jobSecret(o.nnodes)
	if err != nil {
		return nil, err
	}
	if addr == "" {
		addr = "127.0.0.1"
	}
	if port == 0 {
		var err error
		if port, err = freePort(); err != nil {
			return nil, fmt.Errorf("finding a free port: %w", err)
		}
	}
	if runID == "" {
		if o.nnodes > 1 {
			// Every host must derive the same id; outsiders, who do not
			// know the secret, cannot.
			sum := sha256.Sum256([]byte(secret + "\x00" + net.JoinHostPort(addr, strconv.Itoa(port))))
			runID = "distopt-" + hex.EncodeToString(sum[:8])
		} else {
			var b [8]byte
			_, _ = rand.Read(b[:])
			runID = "distopt-" + hex.EncodeToString(b[:])
		}
	}
	cfgs := make([]rendezvous.Config, o.nproc)
	for i := range cfgs {
		cfgs[i] = rendezvous.Config{
			Rank: o.nodeRank*o.nproc + i, WorldSize: o.nnodes * o.nproc,
			LocalRank: i, LocalWorldSize: o.nproc,
			MasterAddr: addr, MasterPort: port, RunID: runID, Secret: secret,
		}
		if err := cfgs[i].Validate(); err != nil {
			return nil, err
		}
	}
	return cfgs, nil
}

// env returns the variables of the job that every rank gets besides those
// of its rendezvous.Config.
func (o runOptions) env() []string {
	if o.groupSize == 0 {
		return nil
	}
	return []string{hier.EnvGroupSize + "=" + strconv.Itoa(o.groupSize)}
}

// jobSecret returns the job's secret: $DISTOPT_JOB_SECRET, or on one host
// (nnodes 1) a new random one when it is unset.
func jobSecret(nnodes int) (string, error) {
	if s := os.Getenv(rendezvous.EnvSecret); s != "" {
		return s, nil
	}
	if nnodes > 1 {
		return "", fmt.Errorf("with --nnodes > 1, set %s to the same secret on every host, e.g. export %s=$(openssl rand -hex 16)",
			rendezvous.EnvSecret, rendezvous.EnvSecret)
	}
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("creating the job's secret: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// freePort returns a TCP port that no process listened on a moment ago.
func freePort() (int, error) {
	lis, err := net.Listen("tcp", ":0")
	if err != nil {
		return 0, err
	}
	defer lis.Close()
	return lis.Addr().(*net.TCPAddr).Port, nil
}
