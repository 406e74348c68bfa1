package main

import (
	"context"
	"log/slog"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/quorate/quorate/cluster"
	"github.com/quorate/quorate/policy"
	"github.com/quorate/quorate/telemetry/decisionlog"
)

// required are the flags without which no agent starts.
var required = []string{"--node-id", "n1", "--data", "/tmp/q/n1",
	"--tls-cert", "/c/n1.crt", "--tls-key", "/c/n1.key", "--tls-ca", "/c/ca.crt", "--gossip-keyring", "/c/keyring"}

// defaultSecurity is what required sets.
var defaultSecurity = cluster.SecurityConfig{TLSCert: "/c/n1.crt", TLSKey: "/c/n1.key", TLSCA: "/c/ca.crt", GossipKeyring: "/c/keyring"}

func TestAgentFlagsToConfig(t *testing.T) {
	defaults := cluster.Config{
		NodeID:               "n1",
		DataDir:              "/tmp/q/n1",
		RPCAddr:              "127.0.0.1:7401",
		PeerAddr:             "127.0.0.1:7601",
		HTTPAddr:             "127.0.0.1:7501",
		GossipAddr:           "127.0.0.1:7301",
		BootstrapExpect:      3,
		Shards:               0,
		Replicas:             3,
		CheckTimeout:         time.Second,
		StreamMaxInFlight:    1024,
		DenyCache:            cluster.DefaultDenyCache,
		BatchMax:             1024,
		BatchWait:            2 * time.Millisecond,
		BatchInflight:        4,
		RaftHeartbeatTimeout: 300 * time.Millisecond,
		LeaseTTL:             5 * time.Second,
		LeaseRenewInterval:   500 * time.Millisecond,
		LeaseAcquireWait:     250 * time.Millisecond,
		LogStore:             "wal",
		DeadNodeGrace:        5 * time.Minute,
		MaxMoves:             4,
		LeaveTimeout:         10 * time.Minute,
		Limits: cluster.Limits{
			MaxRecvMsgSize: 4 << 20, MaxConcurrentStreams: 1024, MaxRequestItems: 1000, MaxRequestCost: 1_000_000,
			BreakerFailures: 3, BreakerCooldown: 500 * time.Millisecond,
		},
		Security:    defaultSecurity,
		DecisionLog: decisionlog.Config{AllowFraction: 0.1, Buffer: 8192},
	}
	with := func(f func(*cluster.Config)) cluster.Config {
		c := defaults
		f(&c)
		return c
	}
	tests := []struct {
		name  string
		args  []string
		want  cluster.Config
		level slog.Level
	}{
		{name: "defaults", args: required, want: defaults, level: slog.LevelInfo},
		{
			name: "every flag",
			args: []string{
				"--node-id", "n2", "--data", "./data/n2",
				"--rpc", "10.0.0.2:8401", "--http", "0.0.0.0:8501", "--gossip", "10.0.0.2:8301",
				"--join", "10.0.0.1:8301,10.0.0.3:8301",
				"--bootstrap-expect", "5", "--shards", "64", "--replicas", "5",
				"--check-timeout", "250ms", "--stream-max-inflight", "16", "--deny-cache", "100", "--batch-max", "64", "--batch-wait", "3ms", "--batch-inflight", "2", "--raft-heartbeat-timeout", "1s", "--log-store", "bolt",
				"--log-level", "debug", "--debug-clock-offset", "-3s",
				"--lease-ttl", "10s", "--lease-renew-interval", "1s", "--lease-acquire-wait", "20ms",
				"--dead-node-grace", "90s", "--max-moves", "2", "--leave-on-terminate", "--leave-timeout", "3m",
				"--max-recv-msg-size", "65536", "--max-concurrent-streams", "8", "--max-request-items", "10",
				"--max-request-cost", "500", "--breaker-failures", "7", "--breaker-cooldown", "2s",
				"--peer", "10.0.0.2:8601", "--tls-cert", "n2.crt", "--tls-key", "n2.key", "--tls-ca", "ca.crt",
				"--tokens-file", "tokens", "--gossip-key", "a2V5MTIzNDU2Nzg5MDEyMw==", "--gossip-key", "b2xkMTIzNDU2Nzg5MDEyMw==", "--pprof",
				"--decision-log-allows", "0.25", "--decision-log-buffer", "100", "--tenant-tier-from", "request",
			},
			want: cluster.Config{
				NodeID:               "n2",
				DataDir:              "./data/n2",
				RPCAddr:              "10.0.0.2:8401",
				PeerAddr:             "10.0.0.2:8601",
				HTTPAddr:             "0.0.0.0:8501",
				GossipAddr:           "10.0.0.2:8301",
				Join:                 []string{"10.0.0.1:8301", "10.0.0.3:8301"},
				BootstrapExpect:      5,
				Shards:               64,
				Replicas:             5,
				CheckTimeout:         250 * time.Millisecond,
				StreamMaxInFlight:    16,
				DenyCache:            100,
				BatchMax:             64,
				BatchWait:            3 * time.Millisecond,
				BatchInflight:        2,
				RaftHeartbeatTimeout: time.Second,
				LogStore:             "bolt",
				ClockOffset:          -3 * time.Second,
				LeaseTTL:             10 * time.Second,
				LeaseRenewInterval:   time.Second,
				LeaseAcquireWait:     20 * time.Millisecond,
				DeadNodeGrace:        90 * time.Second,
				MaxMoves:             2,
				LeaveOnTerminate:     true,
				LeaveTimeout:         3 * time.Minute,
				TenantTier:           policy.TierFromRequest,
				Limits: cluster.Limits{
					MaxRecvMsgSize: 65536, MaxConcurrentStreams: 8, MaxRequestItems: 10, MaxRequestCost: 500,
					BreakerFailures: 7, BreakerCooldown: 2 * time.Second,
				},
				Security: cluster.SecurityConfig{TLSCert: "n2.crt", TLSKey: "n2.key", TLSCA: "ca.crt", TokensFile: "tokens",
					GossipKeys: []string{"a2V5MTIzNDU2Nzg5MDEyMw==", "b2xkMTIzNDU2Nzg5MDEyMw=="}, Pprof: true},
				DecisionLog: decisionlog.Config{AllowFraction: 0.25, Buffer: 100},
			},
			level: slog.LevelDebug,
		},
		{
			// --join repeated, with stray commas and spaces.
			name: "join repeated",
			args: append([]string{"--join", "a:1, ,b:2", "--join", "c:3,"}, required...),
			want: with(func(c *cluster.Config) { c.Join = []string{"a:1", "b:2", "c:3"} }),
		},
		{
			// 0 turns it off; cluster.Config's zero is the default.
			name: "deny cache off",
			args: append([]string{"--deny-cache", "0"}, required...),
			want: with(func(c *cluster.Config) { c.DenyCache = -1 }),
		},
		{
			name:  "log level in capitals",
			args:  append([]string{"--log-level", "WARN"}, required...),
			want:  defaults,
			level: slog.LevelWarn,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := runCLI(t, append([]string{"agent"}, tt.args...)...)
			if r.code != exitOK || len(r.configs) != 1 {
				t.Fatalf("exit %d, %d configs, stderr %q", r.code, len(r.configs), r.stderr)
			}
			got := r.configs[0]
			if got.Logger == nil {
				t.Fatal("Logger is nil")
			}
			ctx := context.Background()
			if !got.Logger.Enabled(ctx, tt.level) || got.Logger.Enabled(ctx, tt.level-1) {
				t.Errorf("logger is not at level %v", tt.level)
			}
			if got.Security.Reload == nil {
				t.Error("no SIGHUP channel for credential reloads")
			}
			if got.Security.Audit == nil || !got.Security.Audit.Enabled(ctx, slog.LevelInfo) {
				t.Error("the audit log is off")
			}
			if got.Frontend == nil {
				t.Error("no front end: the node would serve no API")
			}
			got.Logger, got.Security.Reload, got.Security.Audit, got.Frontend = nil, nil, nil, nil
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("config\n got %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func TestAgentBadFlags(t *testing.T) {
	tests := []struct {
		name string
		args []string
		// want is in the message, which must name the flag at fault.
		want string
	}{
		{"no node id", []string{"--data", "d"}, "--node-id is required"},
		{"no data", []string{"--node-id", "n1"}, "--data is required"},
		{"unknown flag", append([]string{"--nodes", "3"}, required...), "unknown flag: --nodes"},
		{"not a number", append([]string{"--shards", "many"}, required...), `"--shards"`},
		{"not a duration", append([]string{"--check-timeout", "5"}, required...), `"--check-timeout"`},
		{"negative shards", append([]string{"--shards", "-1"}, required...), "--shards -1: must be at least 0"},
		{"negative replicas", append([]string{"--replicas", "-1"}, required...), "--replicas -1"},
		{"zero bootstrap", append([]string{"--bootstrap-expect", "0"}, required...), "--bootstrap-expect 0"},
		{"zero stream in-flight", append([]string{"--stream-max-inflight", "0"}, required...), "--stream-max-inflight 0"},
		{"negative deny cache", append([]string{"--deny-cache", "-1"}, required...), "--deny-cache -1: must be at least 0"},
		{"zero batch max", append([]string{"--batch-max", "0"}, required...), "--batch-max 0"},
		{"tiny heartbeat", append([]string{"--raft-heartbeat-timeout", "10ms"}, required...), "--raft-heartbeat-timeout 10ms: must be at least 50ms"},
		{"zero batch in-flight", append([]string{"--batch-inflight", "0"}, required...), "--batch-inflight 0"},
		{"negative batch wait", append([]string{"--batch-wait", "-1ms"}, required...), "--batch-wait -1ms"},
		{"unknown log store", append([]string{"--log-store", "rocks"}, required...), `--log-store "rocks": want wal or bolt`},
		{"unknown tier source", append([]string{"--tenant-tier-from", "caller"}, required...), `--tenant-tier-from "caller": want assignment or request`},
		{"zero check timeout", append([]string{"--check-timeout", "0s"}, required...), "--check-timeout 0s"},
		{"bad level", append([]string{"--log-level", "loud"}, required...), `--log-level "loud"`},
		{"rpc without port", append([]string{"--rpc", "127.0.0.1"}, required...), `--rpc "127.0.0.1"`},
		{"rpc port zero", append([]string{"--rpc", "127.0.0.1:0"}, required...), "--rpc"},
		{"gossip unspecified", append([]string{"--gossip", "0.0.0.0:7301"}, required...), "--gossip"},
		{"stray argument", append([]string{"extra"}, required...), `unknown command "extra"`},
		{"zero message size", append([]string{"--max-recv-msg-size", "0"}, required...), "--max-recv-msg-size: must be positive"},
		{"tiny message size", append([]string{"--max-recv-msg-size", "100"}, required...), "--max-recv-msg-size 100"},
		{"huge message size", append([]string{"--max-recv-msg-size", "1000000000"}, required...), "--max-recv-msg-size 1000000000"},
		{"zero streams", append([]string{"--max-concurrent-streams", "0"}, required...), "--max-concurrent-streams: must be positive"},
		{"zero items", append([]string{"--max-request-items", "0"}, required...), "--max-request-items: must be positive"},
		{"too many items", append([]string{"--max-request-items", "1000000"}, required...), "--max-request-items 1000000"},
		{"negative cost", append([]string{"--max-request-cost", "-1"}, required...), "--max-request-cost: must be positive"},
		{"zero breaker failures", append([]string{"--breaker-failures", "0"}, required...), "--breaker-failures: must be positive"},
		{"zero cooldown", append([]string{"--breaker-cooldown", "0s"}, required...), "--breaker-cooldown: must be positive"},
		{"long cooldown", append([]string{"--breaker-cooldown", "1h"}, required...), "--breaker-cooldown 1h0m0s"},
		{"no tls material", []string{"--node-id", "n1", "--data", "d", "--gossip-keyring", "k"}, `--tls-cert, --tls-key and --tls-ca are required`},
		{"no tls key", append(append([]string{}, required...), "--tls-key", ""), `"quorate dev"`},
		{"no gossip key", append(append([]string{}, required...), "--gossip-keyring", ""), "--gossip-key or --gossip-keyring is required"},
		{"both gossip key forms", append([]string{"--gossip-key", "a2V5MTIzNDU2Nzg5MDEyMw=="}, required...), "not both"},
		{"peer unspecified", append([]string{"--peer", "0.0.0.0:7601"}, required...), "--peer"},
		{"trace sample above 1", append([]string{"--trace-sample", "2"}, required...), "--trace-sample 2: want a fraction"},
		{"decision log bad sink", append([]string{"--decision-log", "kafka://x"}, required...), "--decision-log: "},
		{"decision log allows above 1", append([]string{"--decision-log-allows", "1.5"}, required...), "--decision-log-allows 1.5"},
		{"decision log zero buffer", append([]string{"--decision-log-buffer", "0"}, required...), "--decision-log-buffer 0"},
		{"trace endpoint without scheme", append([]string{"--trace-endpoint", "collector:4318"}, required...), "--trace-endpoint"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := runCLI(t, append([]string{"agent"}, tt.args...)...)
			if r.code != exitUsage {
				t.Errorf("exit %d; want %d", r.code, exitUsage)
			}
			if len(r.configs) != 0 {
				t.Error("the node was started")
			}
			if !strings.Contains(r.stderr, tt.want) {
				t.Errorf("stderr %q does not contain %q", r.stderr, tt.want)
			}
			if !strings.Contains(r.stderr, "quorate agent --help") {
				t.Errorf("stderr %q does not point at --help", r.stderr)
			}
		})
	}
}

func TestAgentRunFailureExits1(t *testing.T) {
	var errOut syncBuffer
	a := &app{stdout: &errOut, stderr: &errOut, runNode: func(context.Context, cluster.Config) error {
		return context.DeadlineExceeded
	}}
	if code := a.run(context.Background(), append([]string{"agent"}, required...)); code != exitFailure {
		t.Errorf("exit %d; want %d", code, exitFailure)
	}
	if !strings.Contains(errOut.String(), "quorate: context deadline exceeded") {
		t.Errorf("stderr %q", errOut.String())
	}
}
