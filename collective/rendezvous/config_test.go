package rendezvous

import (
	"errors"
	"strings"
	"testing"
)

// goodEnv is a complete, valid environment.
func goodEnv() map[string]string {
	return map[string]string{
		EnvRank: "2", EnvWorldSize: "4", EnvLocalRank: "0", EnvLocalWorldSize: "2",
		EnvMasterAddr: "10.0.0.1", EnvMasterPort: "29500", EnvSecret: "s3cret",
	}
}

func lookupIn(env map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := env[k]; return v, ok }
}

func TestFromEnv(t *testing.T) {
	tests := []struct {
		name   string
		change map[string]string // "" deletes the variable
		want   []string          // substrings of the error; nil: no error
		runID  string
	}{
		{name: "valid", runID: DefaultRunID},
		{name: "run id", change: map[string]string{EnvRunID: "job7"}, runID: "job7"},
		{name: "torchrun run id", change: map[string]string{envTorchRunID: "te"}, runID: "te"},
		{name: "own run id first", change: map[string]string{envTorchRunID: "te", EnvRunID: "mine"}, runID: "mine"},
		{name: "missing rank", change: map[string]string{EnvRank: ""}, want: []string{"RANK is not set"}},
		{name: "missing two", change: map[string]string{EnvMasterAddr: "", EnvMasterPort: ""},
			want: []string{"MASTER_ADDR is not set", "MASTER_PORT is not set"}},
		{name: "not a number", change: map[string]string{EnvWorldSize: "four"}, want: []string{`WORLD_SIZE="four" is not an integer`}},
		{name: "rank too large", change: map[string]string{EnvRank: "4"}, want: []string{"RANK=4 is not below WORLD_SIZE=4"}},
		{name: "negative rank", change: map[string]string{EnvRank: "-1"}, want: []string{"RANK=-1, want >= 0"}},
		{name: "zero world", change: map[string]string{EnvWorldSize: "0", EnvLocalWorldSize: "1"}, want: []string{"WORLD_SIZE=0 is not in [1, 65536]"}},
		{name: "huge world", change: map[string]string{EnvWorldSize: "10000000"}, want: []string{"WORLD_SIZE=10000000 is not in [1, 65536]"}},
		{name: "no secret off loopback", change: map[string]string{EnvSecret: ""}, want: []string{"MASTER_ADDR=10.0.0.1 is not a loopback address and DISTOPT_JOB_SECRET is empty"}},
		{name: "local rank too large", change: map[string]string{EnvLocalRank: "2"}, want: []string{"LOCAL_RANK=2 is not below LOCAL_WORLD_SIZE=2"}},
		{name: "local world too large", change: map[string]string{EnvLocalWorldSize: "5"}, want: []string{"LOCAL_WORLD_SIZE=5 exceeds WORLD_SIZE=4"}},
		{name: "bad port", change: map[string]string{EnvMasterPort: "70000"}, want: []string{"MASTER_PORT=70000 is not a TCP port"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			env := goodEnv()
			for k, v := range tc.change {
				if v == "" {
					delete(env, k)
				} else {
					env[k] = v
				}
			}
			c, err := fromLookup(lookupIn(env))
			if tc.want == nil {
				if err != nil {
					t.Fatal(err)
				}
				want := Config{Rank: 2, WorldSize: 4, LocalRank: 0, LocalWorldSize: 2, MasterAddr: "10.0.0.1", MasterPort: 29500, RunID: tc.runID, Secret: "s3cret"}
				if tc.runID == DefaultRunID {
					want.RunID = ""
				}
				if c != want {
					t.Fatalf("got %+v, want %+v", c, want)
				}
				return
			}
			if !errors.Is(err, ErrConfig) {
				t.Fatalf("error %v does not wrap ErrConfig", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

func TestFromEnvProcess(t *testing.T) {
	for k, v := range goodEnv() {
		t.Setenv(k, v)
	}
	c, err := FromEnv()
	if err != nil || c.Rank != 2 || c.MasterPort != 29500 {
		t.Fatalf("FromEnv = %+v, %v", c, err)
	}
}

func TestValidateNamesFields(t *testing.T) {
	err := Config{Rank: 3, WorldSize: 2, LocalWorldSize: 1, MasterAddr: "h", MasterPort: 1}.Validate()
	if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "Config.Rank=3 is not below Config.WorldSize=2") {
		t.Fatalf("Validate = %v", err)
	}
}

// TestSecretNeededOffLoopback: a Config without a secret is valid only for
// a loopback MasterAddr.
func TestSecretNeededOffLoopback(t *testing.T) {
	for _, tc := range []struct {
		addr, secret string
		ok           bool
	}{
		{"127.0.0.1", "", true}, {"::1", "", true}, {"localhost", "", true},
		{"10.1.2.3", "", false}, {"node7", "", false}, {"10.1.2.3", "x", true}, {"node7", "x", true},
	} {
		err := Config{WorldSize: 1, LocalWorldSize: 1, MasterAddr: tc.addr, MasterPort: 1, Secret: tc.secret}.Validate()
		if (err == nil) != tc.ok || (err != nil && !strings.Contains(err.Error(), "needs a shared secret")) {
			t.Errorf("MasterAddr %q, secret %q: Validate = %v", tc.addr, tc.secret, err)
		}
	}
}

func TestEnvironRoundTrip(t *testing.T) {
	c := Config{Rank: 5, WorldSize: 8, LocalRank: 1, LocalWorldSize: 4, MasterAddr: "::1", MasterPort: 1234, RunID: "r", Secret: "k"}
	env := make(map[string]string)
	for _, kv := range c.Environ() {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	got, err := fromLookup(lookupIn(env))
	if err != nil || got != c {
		t.Fatalf("round trip: %+v, %v; want %+v", got, err, c)
	}
	if a := c.MasterAddress(); a != "[::1]:1234" {
		t.Fatalf("MasterAddress = %q", a)
	}
}
