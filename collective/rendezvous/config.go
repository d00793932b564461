package rendezvous

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"time"
)

// Names of the environment variables read by FromEnv and written by
// Config.Environ. They are those of torchrun, plus EnvRunID.
const (
	EnvRank           = "RANK"
	EnvWorldSize      = "WORLD_SIZE"
	EnvLocalRank      = "LOCAL_RANK"
	EnvLocalWorldSize = "LOCAL_WORLD_SIZE"
	EnvMasterAddr     = "MASTER_ADDR"
	EnvMasterPort     = "MASTER_PORT"
	// EnvRunID names the run; optional. When it is unset, FromEnv takes
	// TORCHELASTIC_RUN_ID (set by torchrun), and then DefaultRunID.
	EnvRunID = "DISTOPT_RUN_ID"
	// envTorchRunID is the run id torchrun sets.
	envTorchRunID = "TORCHELASTIC_RUN_ID"
)

// MaxWorldSize is the largest WorldSize a Config or the store accepts.
const MaxWorldSize = 1 << 16

// DefaultRunID is the run id of a Config whose RunID is empty.
const DefaultRunID = "default"

// DefaultCloseTimeout is how long rank 0's Store.Close waits for the other
// ranks to close theirs when Config.CloseTimeout is zero.
const DefaultCloseTimeout = 10 * time.Second

// Config places one process in a job.
type Config struct {
	Rank           int    // this process's rank, in [0, WorldSize)
	WorldSize      int    // number of ranks in the job, >= 1
	LocalRank      int    // rank among the processes of this host, in [0, LocalWorldSize)
	LocalWorldSize int    // number of ranks on this host, in [1, WorldSize]
	MasterAddr     string // host name or IP address of rank 0's store
	MasterPort     int    // TCP port of rank 0's store, in [1, 65535]
	// RunID names the run: keys of different runs never mix. Empty means
	// DefaultRunID.
	RunID string
	// Secret is the job's shared secret (EnvSecret): the store and the peer
	// endpoints refuse every call that does not prove it knows it. Empty
	// means no authentication, which Validate allows only when MasterAddr
	// is a loopback address (a job on one host).
	Secret string
	// CloseTimeout bounds how long rank 0's Store.Close waits for the other
	// ranks to close their stores before it stops the server. Zero means
	// DefaultCloseTimeout.
	CloseTimeout time.Duration
}

// FromEnv reads a Config from the environment (see the Env constants). Every
// variable but DISTOPT_RUN_ID is required; under srun or mpirun, those
// unset are derived from Slurm's or Open MPI's (see the package
// documentation). The error wraps ErrConfig and
// names every variable that is missing or invalid, and the inconsistencies
// between them (RANK >= WORLD_SIZE, LOCAL_RANK >= LOCAL_WORLD_SIZE,
// LOCAL_WORLD_SIZE > WORLD_SIZE).
func FromEnv() (Config, error) {
	return fromLookup(os.LookupEnv)
}

// fromLookup is FromEnv over an arbitrary lookup function.
func fromLookup(lookup func(string) (string, bool)) (Config, error) {
	lookup, from := launcherLookup(lookup) // Slurm's and MPI's variables (launchers.go)
	var errs []error
	integer := func(name string) int {
		s, ok := lookup(name)
		if !ok || s == "" {
			errs = append(errs, notSet(name))
			return -1
		}
		v, err := strconv.Atoi(s)
		if err != nil {
			errs = append(errs, fmt.Errorf("rendezvous: environment variable %s=%q is not an integer: %w", from(name), s, ErrConfig))
			return -1
		}
		return v
	}
	c := Config{
		Rank:           integer(EnvRank),
		WorldSize:      integer(EnvWorldSize),
		LocalRank:      integer(EnvLocalRank),
		LocalWorldSize: integer(EnvLocalWorldSize),
		MasterPort:     integer(EnvMasterPort),
	}
	if s, ok := lookup(EnvMasterAddr); ok && s != "" {
		c.MasterAddr = s
	} else {
		errs = append(errs, notSet(EnvMasterAddr))
	}
	if s, ok := lookup(EnvSecret); ok {
		c.Secret = s
	}
	if s, ok := lookup(EnvRunID); ok && s != "" {
		c.RunID = s
	} else if s, ok := lookup(envTorchRunID); ok && s != "" {
		c.RunID = s
	}
	if len(errs) > 0 {
		return Config{}, errors.Join(errs...)
	}
	if err := c.check(true); err != nil {
		return Config{}, err
	}
	return c, nil
}

// Validate checks the fields of c. The error wraps ErrConfig and names each
// field that is out of range.
func (c Config) Validate() error { return c.check(false) }

// check validates c; env selects the names used in messages (environment
// variables or Go fields).
func (c Config) check(env bool) error {
	name := func(envName, field string) string {
		if env {
			return envName
		}
		return "Config." + field
	}
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("rendezvous: %s: %w", fmt.Sprintf(format, args...), ErrConfig))
	}
	rank, ws := name(EnvRank, "Rank"), name(EnvWorldSize, "WorldSize")
	lrank, lws := name(EnvLocalRank, "LocalRank"), name(EnvLocalWorldSize, "LocalWorldSize")
	if c.WorldSize < 1 || c.WorldSize > MaxWorldSize {
		bad("%s=%d is not in [1, %d]", ws, c.WorldSize, MaxWorldSize)
	}
	if c.Rank < 0 {
		bad("%s=%d, want >= 0", rank, c.Rank)
	} else if c.WorldSize >= 1 && c.Rank >= c.WorldSize {
		bad("%s=%d is not below %s=%d", rank, c.Rank, ws, c.WorldSize)
	}
	if c.LocalWorldSize < 1 {
		bad("%s=%d, want >= 1", lws, c.LocalWorldSize)
	} else if c.WorldSize >= 1 && c.LocalWorldSize > c.WorldSize {
		bad("%s=%d exceeds %s=%d", lws, c.LocalWorldSize, ws, c.WorldSize)
	}
	if c.LocalRank < 0 {
		bad("%s=%d, want >= 0", lrank, c.LocalRank)
	} else if c.LocalWorldSize >= 1 && c.LocalRank >= c.LocalWorldSize {
		bad("%s=%d is not below %s=%d", lrank, c.LocalRank, lws, c.LocalWorldSize)
	}
	if c.MasterAddr == "" {
		bad("%s is empty", name(EnvMasterAddr, "MasterAddr"))
	} else if c.Secret == "" && !isLoopback(c.MasterAddr) {
		bad("%s=%s is not a loopback address and %s is empty: a job on several hosts needs a shared secret (the same random value in %s on every host)",
			name(EnvMasterAddr, "MasterAddr"), c.MasterAddr, name(EnvSecret, "Secret"), EnvSecret)
	}
	if c.MasterPort < 1 || c.MasterPort > 65535 {
		bad("%s=%d is not a TCP port in [1, 65535]", name(EnvMasterPort, "MasterPort"), c.MasterPort)
	}
	if c.CloseTimeout < 0 {
		bad("Config.CloseTimeout=%v is negative", c.CloseTimeout)
	}
	return errors.Join(errs...)
}

// MasterAddress returns "MasterAddr:MasterPort", bracketing IPv6 addresses.
func (c Config) MasterAddress() string {
	return net.JoinHostPort(c.MasterAddr, strconv.Itoa(c.MasterPort))
}

// Environ returns c as "NAME=value" environment entries, the ones FromEnv
// reads, the secret included: FromEnv in a process started with them
// returns c, with RunID DefaultRunID if it was empty and without
// CloseTimeout (no variable). The other variables torchrun sets follow
// (GROUP_RANK, GROUP_WORLD_SIZE, ROLE_RANK, ROLE_WORLD_SIZE, ROLE_NAME,
// TORCHELASTIC_RUN_ID).
func (c Config) Environ() []string {
	return append([]string{
		EnvRank + "=" + strconv.Itoa(c.Rank),
		EnvWorldSize + "=" + strconv.Itoa(c.WorldSize),
		EnvLocalRank + "=" + strconv.Itoa(c.LocalRank),
		EnvLocalWorldSize + "=" + strconv.Itoa(c.LocalWorldSize),
		EnvMasterAddr + "=" + c.MasterAddr,
		EnvMasterPort + "=" + strconv.Itoa(c.MasterPort),
		EnvRunID + "=" + c.runID(),
		EnvSecret + "=" + c.Secret,
	}, c.torchrunEnviron()...)
}

// isLoopback reports whether host is "localhost" or a loopback IP address.
func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// runID returns c.RunID, or DefaultRunID when it is empty.
func (c Config) runID() string {
	if c.RunID == "" {
		return DefaultRunID
	}
	return c.RunID
}

// closeTimeout returns c.CloseTimeout, or DefaultCloseTimeout when it is zero.
func (c Config) closeTimeout() time.Duration {
	if c.CloseTimeout == 0 {
		return DefaultCloseTimeout
	}
	return c.CloseTimeout
}
