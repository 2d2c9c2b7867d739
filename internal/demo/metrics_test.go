package demo

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestMetricValues reads unlabelled samples of the names asked for from one
// scrape; labelled samples and other names are left out.
func TestMetricValues(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, "# HELP x_seconds help\n# TYPE x_seconds histogram\nx_seconds_bucket{le=\"0.1\"} 3\nx_seconds_sum 0.75\nx_seconds_count 5\nother_total 9\nx_total{outcome=\"ok\"} 4\n")
	}))
	defer srv.Close()
	vals, err := metricValues(context.Background(), srv.URL, "x_seconds_sum", "x_seconds_count", "x_total", "absent")
	if err != nil {
		t.Fatal(err)
	}
	if len(vals) != 2 || vals["x_seconds_sum"] != 0.75 || vals["x_seconds_count"] != 5 {
		t.Errorf("values %v, want the histogram's sum and count only", vals)
	}
	if _, err := metricValue(context.Background(), srv.URL, "absent"); err == nil {
		t.Error("an absent metric read without an error")
	}
	if v, err := metricValue(context.Background(), srv.URL, "other_total"); err != nil || v != 9 {
		t.Errorf("other_total = %v, %v", v, err)
	}
}
