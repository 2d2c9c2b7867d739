package critpath

import "testing"

// TestStoredCache: the cache keeps documents within its byte bound, drops
// the least recently used first, keeps none larger than the bound, and a nil
// cache keeps nothing.
func TestStoredCache(t *testing.T) {
	c := NewStoredCache(100)
	docs := map[string]*Stored{"a": {Snapshot: "a"}, "b": {Snapshot: "b"}, "c": {Snapshot: "c"}, "big": {Snapshot: "big"}}
	c.Add("a", docs["a"], 40)
	c.Add("b", docs["b"], 40)
	if got, size, ok := c.Get("a"); !ok || got != docs["a"] || size != 40 {
		t.Fatalf("Get(a) = %v, %d, %v", got, size, ok)
	}
	c.Add("c", docs["c"], 40) // over the bound: b, the least recently used, goes
	c.Add("big", docs["big"], 101)
	for _, tc := range []struct {
		id   string
		kept bool
	}{{"a", true}, {"b", false}, {"c", true}, {"big", false}} {
		if got, _, ok := c.Get(tc.id); ok != tc.kept || (ok && got != docs[tc.id]) {
			t.Errorf("Get(%s): kept %v, want %v", tc.id, ok, tc.kept)
		}
	}
	if n, bytes, hits, misses := c.Stats(); n != 2 || bytes != 80 || hits != 3 || misses != 2 {
		t.Errorf("Stats() = %d docs, %d bytes, %d hits, %d misses; want 2, 80, 3, 2", n, bytes, hits, misses)
	}
	var none *StoredCache
	none.Add("a", docs["a"], 1)
	if _, _, ok := none.Get("a"); ok {
		t.Error("a nil cache kept a document")
	}
}
