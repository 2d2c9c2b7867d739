// Command rootline-image builds Rootline's OCI image from a rootline binary,
// without Docker (see internal/image): `make image` runs it.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/rootline/rootline/internal/image"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("rootline-image", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: rootline-image --binary bin/rootline [--oci-layout DIR] [--tarball FILE] [--push REF]

Builds the Rootline OCI image (one layer: /rootline, /etc/passwd, /tmp,
/var/lib/rootline; ENTRYPOINT /rootline; user 65532) from a statically linked
binary, reproducibly: file and image times come from SOURCE_DATE_EPOCH (else
the Unix epoch), so the same binary gives the same digest. Prints the digest.

Flags:
`)
		fs.PrintDefaults()
	}
	binary := fs.String("binary", "bin/rootline", "the rootline binary (CGO_ENABLED=0)")
	version := fs.String("version", "dev", "image version label")
	tag := fs.String("tag", "", "name of the image in the layout and the tarball (default rootline:<version>)")
	layoutDir := fs.String("oci-layout", "", "write an OCI image layout to this folder (replaced)")
	tarPath := fs.String("tarball", "", "write a `docker load` tarball to this file")
	push := fs.String("push", "", "push to this registry reference (credentials from $DOCKER_CONFIG/config.json)")
	arch := fs.String("arch", runtime.GOARCH, "platform architecture of the binary")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if *layoutDir == "" && *tarPath == "" && *push == "" {
		fmt.Fprintln(stderr, "rootline-image: nothing to do: give --oci-layout, --tarball or --push")
		return 2
	}
	if *tag == "" {
		*tag = "rootline:" + *version
	}
	created := time.Unix(0, 0)
	if s := os.Getenv("SOURCE_DATE_EPOCH"); s != "" {
		sec, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			fmt.Fprintf(stderr, "rootline-image: SOURCE_DATE_EPOCH=%q is not a number of seconds\n", s)
			return 2
		}
		created = time.Unix(sec, 0)
	}
	img, err := image.Build(image.Options{Binary: *binary, Version: *version, Created: created, Architecture: *arch})
	if err != nil {
		fmt.Fprintf(stderr, "rootline-image: %v\n", err)
		return 1
	}
	digest, err := img.Digest()
	if err != nil {
		fmt.Fprintf(stderr, "rootline-image: %v\n", err)
		return 1
	}
	if *layoutDir != "" {
		if err := image.WriteLayout(img, *layoutDir, *tag); err != nil {
			fmt.Fprintf(stderr, "rootline-image: %v\n", err)
			return 1
		}
		fmt.Fprintf(stderr, "rootline-image: OCI layout %s (%s)\n", *layoutDir, *tag)
	}
	if *tarPath != "" {
		if err := image.WriteTarball(img, *tarPath, *tag); err != nil {
			fmt.Fprintf(stderr, "rootline-image: %v\n", err)
			return 1
		}
		fmt.Fprintf(stderr, "rootline-image: tarball %s (%s)\n", *tarPath, *tag)
	}
	if *push != "" {
		ref, err := name.ParseReference(*push)
		if err == nil {
			err = remote.Write(ref, img, remote.WithAuthFromKeychain(authn.DefaultKeychain))
		}
		if err != nil {
			fmt.Fprintf(stderr, "rootline-image: push %s: %v\n", *push, err)
			return 1
		}
		fmt.Fprintf(stderr, "rootline-image: pushed %s\n", *push)
	}
	fmt.Fprintln(stdout, digest)
	return 0
}
