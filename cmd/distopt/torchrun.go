package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"

	"github.com/distopt/distopt/internal/cuda"
)

// defaultRdzvPort is the port torchrun's c10d rendezvous takes when
// --rdzv-endpoint names none.
const defaultRdzvPort = 29400

// nprocValue is --nproc-per-node: a number, or as in torchrun "gpu" (the
// GPUs the CUDA driver sees), "cpu" (the CPUs of the host) or "auto" (the
// GPUs if there are any, else the CPUs).
type nprocValue struct {
	n    int
	spec string
	gpus func() (int, error) // the GPU count; cuda.DeviceCount but in tests
}

func (v *nprocValue) String() string {
	if v == nil || v.spec == "" {
		return "0"
	}
	return v.spec
}

func (v *nprocValue) Set(s string) error {
	v.spec = s
	switch s {
	case "cpu":
		v.n = runtime.NumCPU()
		return nil
	case "gpu", "auto":
		count := v.gpus
		if count == nil {
			count = cuda.DeviceCount
		}
		n, err := count()
		switch {
		case err == nil && n > 0:
			v.n = n
		case s == "auto":
			v.n = runtime.NumCPU()
		case err != nil:
			return fmt.Errorf("no GPU to count: %w", err)
		default:
			return errors.New("the CUDA driver sees no GPU")
		}
		return nil
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		return errors.New("want a number, gpu, cpu or auto")
	}
	v.n = n
	return nil
}

// nnodesValue is --nnodes: N, or torchrun's MIN:MAX with MIN = MAX (distopt
// run does not grow or shrink a job).
type nnodesValue int

func (v *nnodesValue) String() string {
	if v == nil {
		return "1"
	}
	return strconv.Itoa(int(*v))
}

func (v *nnodesValue) Set(s string) error {
	lo, hi, ranged := strings.Cut(s, ":")
	n, err := strconv.Atoi(lo)
	if err != nil {
		return errors.New("want a number of hosts (or N:N)")
	}
	if ranged {
		m, err := strconv.Atoi(hi)
		if err != nil || m != n {
			return fmt.Errorf("%q is an elastic range: distopt run takes a fixed number of hosts (N or N:N)", s)
		}
	}
	*v = nnodesValue(n)
	return nil
}

// applyTorchrun folds torchrun's rendezvous flags into the master address,
// port and run id: --standalone (one host, a free port, a random run id)
// and --rdzv-endpoint HOST[:PORT] (the port defaults to 29400, torchrun's).
// --rdzv-id has already set o.runID.
func (o *runOptions) applyTorchrun() error {
	switch {
	case o.standalone && o.nnodes > 1:
		return fmt.Errorf("--standalone is one host, but --nnodes=%d", o.nnodes)
	case o.standalone && (o.rdzvEndpoint != "" || o.masterAddr != "" || o.masterPort != 0):
		return errors.New("--standalone picks its own address and port: leave out --rdzv-endpoint, --master-addr and --master-port")
	case o.rdzvEndpoint != "" && (o.masterAddr != "" || o.masterPort != 0):
		return errors.New("give either --rdzv-endpoint or --master-addr and --master-port, not both")
	case o.rdzvBackend != "" && o.rdzvBackend != "c10d" && o.rdzvBackend != "static":
		return fmt.Errorf("--rdzv-backend=%s: want c10d or static (rank 0 serves the rendezvous store at the endpoint)", o.rdzvBackend)
	}
	if o.rdzvEndpoint == "" {
		return nil
	}
	host, port := o.rdzvEndpoint, defaultRdzvPort
	if h, p, err := net.SplitHostPort(o.rdzvEndpoint); err == nil {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 65535 {
			return fmt.Errorf("--rdzv-endpoint=%s: %q is not a TCP port", o.rdzvEndpoint, p)
		}
		host, port = h, n
	}
	if host == "" {
		return fmt.Errorf("--rdzv-endpoint=%s: no host", o.rdzvEndpoint)
	}
	o.masterAddr, o.masterPort = host, port
	return nil
}

// ompNotice is what torchrun prints when it sets OMP_NUM_THREADS for the
// ranks.
const ompNotice = `*****************************************
Setting OMP_NUM_THREADS environment variable for each process to be 1 in default, to avoid your system being overloaded, please further tune the variable for optimal performance in your application as needed.
*****************************************`

// limitOMPThreads does what torchrun does before it starts more than one
// rank on a host: unless OMP_NUM_THREADS is set, it sets it to 1 for the
// ranks (in this process's environment, which they inherit) and prints
// ompNotice to w.
func limitOMPThreads(nproc int, w io.Writer) error {
	if _, set := os.LookupEnv("OMP_NUM_THREADS"); set || nproc < 2 {
		return nil
	}
	fmt.Fprintln(w, ompNotice)
	return os.Setenv("OMP_NUM_THREADS", "1")
}
