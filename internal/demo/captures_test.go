package demo

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// TestFaultCaptures: the fault's service's captures created, asked for or
// ended from 40 s before the onset to the end of the fault, in ms after the onset, oldest
// first; other services' and older ones are left out, and a capture not
// requested yet has no request time.
func TestFaultCaptures(t *testing.T) {
	onset := time.Unix(10_000, 0).UTC()
	at := func(s float64) time.Time { return onset.Add(time.Duration(s * float64(time.Second))) }
	log := []map[string]any{
		{"pid": 7, "service": "e", "state": "complete", "start": at(-5).UnixNano(), "end": at(12).UnixNano(), "spanCount": 20,
			"suspect": true, "created": at(0.5), "requested": at(14.9), "finished": at(16.1)},
		{"pid": 7, "service": "e", "state": "complete", "start": at(-35).UnixNano(), "end": at(-28).UnixNano(), "spanCount": 2,
			"created": at(-29.5), "requested": at(-15), "finished": at(-14)},
		{"pid": 7, "service": "e", "state": "pending", "start": at(10).UnixNano(), "end": at(20).UnixNano(), "spanCount": 3, "created": at(16)},
		{"pid": 7, "service": "e", "state": "complete", "created": at(-50)},
		{"pid": 7, "service": "e", "state": "complete", "created": at(-52), "requested": at(-38), "finished": at(-37)},
		{"pid": 9, "service": "b", "state": "complete", "created": at(1)},
		{"pid": 7, "service": "e", "state": "pending", "created": at(31)},
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/v1/captures" || r.Header.Get("Authorization") != "Bearer tok" {
			http.Error(w, "no", http.StatusNotFound)
			return
		}
		_ = json.NewEncoder(w).Encode(log)
	}))
	defer srv.Close()
	got := faultCaptures(context.Background(), srv.URL, "tok", "e", onset, at(30))
	if len(got) != 4 {
		t.Fatalf("%d captures, want 4: %+v", len(got), got)
	}
	if got[0].CreatedMs != -52000 || got[0].RequestedMs == nil || *got[0].RequestedMs != -38000 {
		t.Errorf("the capture created before and asked for within 40 s of the onset: %+v", got[0])
	}
	got = got[1:]
	first, asked := got[1], got[0]
	if asked.CreatedMs != -29500 || first.CreatedMs != 500 || got[2].CreatedMs != 16000 {
		t.Errorf("created at %d, %d, %d ms; want -29500, 500, 16000 (oldest first)", asked.CreatedMs, first.CreatedMs, got[2].CreatedMs)
	}
	if first.RequestedMs == nil || *first.RequestedMs != 14900 || first.FinishedMs == nil || *first.FinishedMs != 16100 ||
		first.WindowFrom != -5000 || first.WindowTo != 12000 || !first.Suspect || first.Spans != 20 {
		t.Errorf("first capture after the onset: %+v", first)
	}
	if got[2].RequestedMs != nil || got[2].FinishedMs != nil {
		t.Errorf("a pending capture has times it never had: %+v", got[2])
	}
	if faultCaptures(context.Background(), srv.URL, "wrong", "e", onset, at(30)) != nil {
		t.Error("an unreadable log gave captures")
	}
}
