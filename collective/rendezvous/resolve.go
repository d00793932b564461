package rendezvous

import (
	"context"
	"fmt"
	"net"
	"time"
)

// resolveTimeout bounds one DNS lookup of MASTER_ADDR.
const resolveTimeout = 10 * time.Second

// resolve returns the IP addresses of host: host itself if it is an IP
// address, else the answer of DNS. A name that does not resolve fails at
// once, with an error wrapping ErrConfig that says so, rather than after
// the caller's whole deadline of retries.
func resolve(ctx context.Context, host string) ([]string, error) {
	if net.ParseIP(host) != nil {
		return []string{host}, nil
	}
	ctx, cancel := context.WithTimeout(ctx, resolveTimeout)
	defer cancel()
	addrs, err := net.DefaultResolver.LookupHost(ctx, host)
	if err == nil && len(addrs) == 0 {
		err = fmt.Errorf("no address")
	}
	if err != nil {
		return nil, fmt.Errorf("rendezvous: MASTER_ADDR=%s cannot be resolved: DNS lookup failed: %v: %w", host, err, ErrConfig)
	}
	return addrs, nil
}
