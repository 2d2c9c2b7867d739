// Package web serves the built web UI embedded in the binary. The UI is built
// by `make web` (npm ci + vite build into web/dist) before `go build`; a binary
// built without it serves a short page saying so, and the API works as usual.
package web

import (
	"embed"
	"io/fs"
	"net/http"
	"strings"
)

// notBuilt is served when the binary was built without the UI.
const notBuilt = `<!doctype html><html lang="en"><head><meta charset="utf-8"><title>Rootline</title></head>
<body style="font-family: sans-serif; margin: 2em"><h1>Rootline</h1>
<p>This binary was built without the web UI (build it with <code>make build</code>, which runs
<code>make web</code>). The API is live: <a href="/api/services">/api/services</a>,
<a href="/api/v1/anomalies">/api/v1/anomalies</a>, <a href="/metrics">/metrics</a>; the Jaeger UI or
Grafana's Jaeger data source can read this address.</p></body></html>
`

//go:embed all:dist
var dist embed.FS

// Handler serves the UI: files from dist/, and index.html for client-side
// routes (any path without a file extension).
func Handler() http.Handler {
	sub, err := fs.Sub(dist, "dist")
	if err != nil {
		panic(err) // the embed pattern guarantees dist exists
	}
	files := http.FileServerFS(sub)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := strings.TrimPrefix(r.URL.Path, "/")
		if p != "" {
			if _, err := fs.Stat(sub, p); err == nil {
				files.ServeHTTP(w, r)
				return
			}
		}
		index, err := fs.ReadFile(sub, "index.html")
		if err != nil {
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			_, _ = w.Write([]byte(notBuilt))
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write(index)
	})
}
