package nccl

import (
	"testing"
	"time"
)

// TestConfigDefaults checks what withDefaults fills in: zero fields take
// their defaults, a negative heartbeat and launch spin stay (off).
func TestConfigDefaults(t *testing.T) {
	c := Config{}.withDefaults()
	if c.Heartbeat != DefaultHeartbeat || c.PeerTimeout != DefaultPeerTimeout || c.LaunchSpin != DefaultLaunchSpin {
		t.Errorf("defaults: heartbeat %v, peer timeout %v, launch spin %v", c.Heartbeat, c.PeerTimeout, c.LaunchSpin)
	}
	c = Config{Heartbeat: -1, LaunchSpin: -1, PeerTimeout: time.Second}.withDefaults()
	if c.Heartbeat != -1 || c.LaunchSpin != -1 || c.PeerTimeout != time.Second {
		t.Errorf("given: heartbeat %v, peer timeout %v, launch spin %v", c.Heartbeat, c.PeerTimeout, c.LaunchSpin)
	}
}
