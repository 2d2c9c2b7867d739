// Package engines gives tests the Kafka, Cassandra and S3-compatible servers
// that scripts/scaleout.sh started for the run (make test-scaleout): their
// addresses come from the environment it writes. Without them a test skips
// with the reason, unless ROOTLINE_REQUIRE_SCALEOUT=1 (set by make
// test-scaleout and CI), which turns the skip into a failure.
package engines

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// Environment variables written by scripts/scaleout.sh.
const (
	EnvKafka     = "ROOTLINE_KAFKA_BROKERS"
	EnvCassandra = "ROOTLINE_CASSANDRA_SERVERS"
	EnvS3        = "ROOTLINE_S3_ENDPOINT"
	EnvS3Region  = "ROOTLINE_S3_REGION"
	EnvDir       = "ROOTLINE_SCALEOUT_DIR"
	EnvCtl       = "ROOTLINE_SCALEOUT_CTL"
	EnvRequire   = "ROOTLINE_REQUIRE_SCALEOUT"
)

func need(t testing.TB, env, what string) string {
	t.Helper()
	v := os.Getenv(env)
	if v == "" {
		msg := fmt.Sprintf("no %s: %s is not set (run `make test-scaleout`, which starts the engines with scripts/scaleout.sh)", what, env)
		if os.Getenv(EnvRequire) == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return v
}

// Kafka returns the brokers' addresses.
func Kafka(t testing.TB) []string { return strings.Split(need(t, EnvKafka, "Kafka"), ",") }

// Cassandra returns the nodes' addresses.
func Cassandra(t testing.TB) []string { return strings.Split(need(t, EnvCassandra, "Cassandra"), ",") }

// S3 returns the S3 endpoint URL and its region; the credentials are in
// AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY.
func S3(t testing.TB) (endpoint, region string) {
	return need(t, EnvS3, "S3-compatible server"), os.Getenv(EnvS3Region)
}

// Stop stops an engine ("kafka", "cassandra" or "s3") of the run, keeping
// its data; Restart starts it again and waits until it answers.
func Stop(t testing.TB, engine string) { control(t, "stop", engine) }

// Restart starts a stopped engine again on its ports and data.
func Restart(t testing.TB, engine string) { control(t, "restart", engine) }

func control(t testing.TB, verb, engine string) {
	t.Helper()
	dir, ctl := need(t, EnvDir, "engine directory"), need(t, EnvCtl, "engine control script")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	start := time.Now()
	out, err := exec.CommandContext(ctx, ctl, verb, dir, engine).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", verb, engine, err, out)
	}
	t.Logf("%s %s took %v", verb, engine, time.Since(start).Round(time.Millisecond))
}
