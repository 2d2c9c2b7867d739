package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/rootline/rootline/internal/server"
	"github.com/rootline/rootline/internal/store/cassandra"
	"github.com/rootline/rootline/internal/store/factory"
	"github.com/rootline/rootline/internal/store/s3"
)

const storageUsage = `Usage: rootline storage init [server flags]

Creates what the configured storage backends need before servers use them, and
brings it up to date: for storage.spans.type cassandra the keyspace (with its
replication settings) and the tables of the current schema version, recorded in
the keyspace; for storage.artifacts.type s3 the bucket and a lifecycle rule that
aborts incomplete uploads. It is idempotent: run it on every upgrade, before the
new servers start; a keyspace already up to date is left as it is. The embedded
SQLite store and the fs blob store need nothing: they are created on first start.

It reads the same configuration as 'rootline server' (--config and the storage
flags), e.g.:

  rootline storage init --config rootline.yaml
  rootline storage init --storage.spans.type cassandra --storage.cassandra.servers db1:9042,db2:9042 \
      --storage.artifacts.type s3 --storage.s3.endpoint https://s3.eu-west-1.amazonaws.com --storage.s3.bucket traces

Flags (those of 'rootline server'; only the storage ones matter here):
`

func runStorage(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] != "init" {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
			fmt.Fprint(stdout, storageUsage)
			return 0
		}
		fmt.Fprint(stderr, storageUsage)
		return 2
	}
	cfg, err := server.Load(args[1:], func(fs *flag.FlagSet) {
		fmt.Fprint(fs.Output(), storageUsage)
		fs.PrintDefaults()
	})
	logger, code := startRole("storage init", err, cfg.LogLevel, cfg.LogFormat, stderr)
	if logger == nil {
		return code
	}
	st, err := cfg.StorageConfig()
	if err != nil {
		fmt.Fprintf(stderr, "rootline storage init: %v\n", err)
		return 2
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	var errs []error
	switch st.Spans.Type {
	case factory.TypeCassandra:
		c := *st.Spans.Cassandra
		fmt.Fprintf(stdout, "cassandra: keyspace %s at %v: ", c.Keyspace, c.Servers)
		res, err := cassandra.Init(ctx, c, logger)
		switch {
		case err != nil:
			fmt.Fprintln(stdout, "failed")
			errs = append(errs, err)
		case res.From == res.To:
			fmt.Fprintf(stdout, "schema version %d already, nothing to do\n", res.To)
		default:
			created := ""
			if res.CreatedKeyspace {
				created = "keyspace created, "
			}
			fmt.Fprintf(stdout, "%sschema version %d → %d\n", created, res.From, res.To)
		}
	default:
		fmt.Fprintf(stdout, "%s: nothing to create (created on first start)\n", st.Spans.Type)
	}
	switch st.Artifacts.Type {
	case factory.TypeS3:
		c := *st.Artifacts.S3
		fmt.Fprintf(stdout, "s3: bucket %s at %s: ", c.Bucket, c.Endpoint)
		created, err := s3.Init(ctx, c, logger)
		switch {
		case err != nil:
			fmt.Fprintln(stdout, "failed")
			errs = append(errs, err)
		case created:
			fmt.Fprintln(stdout, "created")
		default:
			fmt.Fprintln(stdout, "exists")
		}
	default:
		fmt.Fprintf(stdout, "%s: nothing to create (created on first start)\n", st.Artifacts.Type)
	}
	if err := errors.Join(errs...); err != nil {
		fmt.Fprintf(stderr, "rootline storage init: %v\n", err)
		return 1
	}
	return 0
}
