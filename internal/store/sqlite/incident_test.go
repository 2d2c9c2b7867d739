package sqlite

import (
	"context"
	"testing"

	"github.com/rootline/rootline/internal/store"
)

// TestIncidentsPersist: incidents survive closing and opening the store
// (the conformance suite tests the rest).
func TestIncidentsPersist(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	s, err := Open(Config{Dir: dir}, nil)
	if err != nil {
		t.Fatal(err)
	}
	in := store.Incident{ID: "a", Entry: "front GET /", EntryService: "front", Service: "cart", Start: 100, Updated: 7, Doc: []byte(`{"v":1}`)}
	if err := s.PutIncident(ctx, in); err != nil {
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
	if err != nil || got.Entry != in.Entry || got.Service != "cart" || got.Updated != 7 || string(got.Doc) != `{"v":1}` {
		t.Fatalf("after reopening: %+v, %v", got, err)
	}
}
