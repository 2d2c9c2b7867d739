package sqlite

import (
	"context"
	"errors"
	"testing"

	"github.com/rootline/rootline/internal/store"
)

// TestIncidents: incidents are replaced by id, filtered by service and time,
// survive a reopen, and closed ones go with anomalous retention.
func TestIncidents(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	s, err := Open(Config{Dir: dir}, nil)
	if err != nil {
		t.Fatal(err)
	}
	open := store.Incident{ID: "a", Entry: "front GET /", EntryService: "front", Start: 100, Doc: []byte(`{"v":1}`)}
	closed := store.Incident{ID: "b", Entry: "front GET /", EntryService: "front", Service: "db", Start: 10, End: 50, Doc: []byte(`{}`)}
	for _, in := range []store.Incident{open, closed} {
		if err := s.PutIncident(ctx, in); err != nil {
			t.Fatal(err)
		}
	}
	open.Service, open.Doc = "cart", []byte(`{"v":2}`)
	if err := s.PutIncident(ctx, open); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if s, err = Open(Config{Dir: dir}, nil); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	got, err := s.GetIncident(ctx, "a")
	if err != nil || got.Service != "cart" || string(got.Doc) != `{"v":2}` {
		t.Fatalf("GetIncident(a) = %+v, %v; want the replaced one", got, err)
	}
	if _, err := s.GetIncident(ctx, "zz"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("GetIncident(zz) error = %v, want ErrNotFound", err)
	}
	for _, tc := range []struct {
		name string
		q    store.IncidentQuery
		want []string
	}{
		{"all newest first", store.IncidentQuery{}, []string{"a", "b"}},
		{"culprit", store.IncidentQuery{Service: "db"}, []string{"b"}},
		{"entry service", store.IncidentQuery{Service: "front"}, []string{"a", "b"}},
		{"after the closed one ended", store.IncidentQuery{From: 60}, []string{"a"}},
		{"before the open one started", store.IncidentQuery{To: 99}, []string{"b"}},
		{"limit", store.IncidentQuery{Limit: 1}, []string{"a"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			list, err := s.FindIncidents(ctx, tc.q)
			if err != nil {
				t.Fatal(err)
			}
			var ids []string
			for _, in := range list {
				ids = append(ids, in.ID)
			}
			if len(ids) != len(tc.want) || (len(ids) > 0 && ids[0] != tc.want[0]) || (len(ids) > 1 && ids[1] != tc.want[1]) {
				t.Fatalf("ids = %v, want %v", ids, tc.want)
			}
		})
	}
	if _, err := s.Purge(ctx, store.RetentionPolicy{Now: 1000, Anomalous: 500}); err != nil {
		t.Fatal(err)
	}
	list, err := s.FindIncidents(ctx, store.IncidentQuery{})
	if err != nil || len(list) != 1 || list[0].ID != "a" {
		t.Fatalf("after purge: %v, %v; want only the open incident", list, err)
	}
}
