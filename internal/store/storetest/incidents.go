package storetest

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/rootline/rootline/internal/store"
)

// testIncidents: incidents are replaced by id, found by id, and filtered by
// service (culprit or entry), entry point and time, newest first.
func testIncidents(t *testing.T, st IncidentStore) {
	ctx := context.Background()
	open := store.Incident{ID: "a", Entry: "front GET /", EntryService: "front", Start: 100, Doc: []byte(`{"v":1}`)}
	closed := store.Incident{ID: "b", Entry: "front POST /pay", EntryService: "front", Service: "db", Start: 10, End: 50, Doc: []byte(`{}`)}
	for _, in := range []store.Incident{open, closed} {
		if err := st.PutIncident(ctx, in); err != nil {
			t.Fatal(err)
		}
	}
	open.Service, open.Doc = "cart", []byte(`{"v":2}`)
	if err := st.PutIncident(ctx, open); err != nil {
		t.Fatal(err)
	}
	got, err := st.GetIncident(ctx, "a")
	if err != nil || got.Service != "cart" || string(got.Doc) != `{"v":2}` || got.Start != 100 || got.End != 0 {
		t.Fatalf("GetIncident(a) = %+v, %v; want the replaced one", got, err)
	}
	if _, err := st.GetIncident(ctx, "zz"); !errors.Is(err, store.ErrNotFound) {
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
		{"entry point", store.IncidentQuery{Entry: "front POST /pay"}, []string{"b"}},
		{"after the closed one ended", store.IncidentQuery{From: 60}, []string{"a"}},
		{"before the open one started", store.IncidentQuery{To: 99}, []string{"b"}},
		{"a moment inside the closed one", store.IncidentQuery{From: 20, To: 20}, []string{"b"}},
		{"limit", store.IncidentQuery{Limit: 1}, []string{"a"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			list, err := st.FindIncidents(ctx, tc.q)
			if err != nil {
				t.Fatal(err)
			}
			var ids []string
			for _, in := range list {
				ids = append(ids, in.ID)
			}
			if !slices.Equal(ids, tc.want) {
				t.Fatalf("ids = %v, want %v", ids, tc.want)
			}
		})
	}
}

// testPurgeIncidents: closed incidents go with anomalous retention; open
// ones stay.
func testPurgeIncidents(t *testing.T, st IncidentStore) {
	ctx := context.Background()
	for _, in := range []store.Incident{{ID: "open", Entry: "e", Start: 10, Doc: []byte(`{}`)}, {ID: "old", Entry: "e", Start: 10, End: 20, Doc: []byte(`{}`)},
		{ID: "recent", Entry: "e", Start: 10, End: 900, Doc: []byte(`{}`)}} {
		if err := st.PutIncident(ctx, in); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st.Purge(ctx, store.RetentionPolicy{Now: 1000, Anomalous: 500}); err != nil {
		t.Fatal(err)
	}
	list, err := st.FindIncidents(ctx, store.IncidentQuery{})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, in := range list {
		ids = append(ids, in.ID)
	}
	slices.Sort(ids)
	if !slices.Equal(ids, []string{"open", "recent"}) {
		t.Fatalf("after purge: %v, want open and recent", ids)
	}
}
