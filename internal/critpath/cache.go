package critpath

import (
	"container/list"
	"sync"
)

// StoredCache keeps decoded "critical-path" documents by artifact id, least
// recently used first out, within a byte bound (the inflated JSON each was
// decoded from). An artifact's content never changes once stored, so an id
// names one document for good: the verdicts, computed again and again over
// the same captures, read and inflate each document once. It is safe for
// concurrent use; a nil *StoredCache keeps nothing.
//
// The documents it returns are shared: callers MUST NOT modify them.
type StoredCache struct {
	mu       sync.Mutex
	maxBytes int64
	bytes    int64
	order    *list.List // of *cached, most recently used at the front
	byID     map[string]*list.Element
	hits     int64
	misses   int64
}

type cached struct {
	id   string
	doc  *Stored
	size int64
}

// DefaultStoredCacheBytes is the bound the server gives its cache: the
// documents of a few hundred captures.
const DefaultStoredCacheBytes = 64 << 20

// NewStoredCache returns a cache holding at most maxBytes of documents (as
// inflated JSON). A document larger than maxBytes is not kept.
func NewStoredCache(maxBytes int64) *StoredCache {
	return &StoredCache{maxBytes: maxBytes, order: list.New(), byID: map[string]*list.Element{}}
}

// Get returns the document of artifact id and the size of the JSON it was
// decoded from, if the cache holds it.
func (c *StoredCache) Get(id string) (*Stored, int64, bool) {
	if c == nil {
		return nil, 0, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.byID[id]
	if !ok {
		c.misses++
		return nil, 0, false
	}
	c.hits++
	c.order.MoveToFront(el)
	e := el.Value.(*cached)
	return e.doc, e.size, true
}

// Add keeps doc, decoded from size bytes of JSON, as artifact id's,
// dropping the least recently used documents beyond the bound.
func (c *StoredCache) Add(id string, doc *Stored, size int64) {
	if c == nil || size > c.maxBytes {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.byID[id]; ok {
		c.order.MoveToFront(el)
		return
	}
	c.byID[id] = c.order.PushFront(&cached{id: id, doc: doc, size: size})
	c.bytes += size
	for c.bytes > c.maxBytes {
		el := c.order.Back()
		e := el.Value.(*cached)
		c.order.Remove(el)
		delete(c.byID, e.id)
		c.bytes -= e.size
	}
}

// Stats returns the documents and bytes held and the lookups that found a
// document and that did not.
func (c *StoredCache) Stats() (docs int, bytes, hits, misses int64) {
	if c == nil {
		return 0, 0, 0, 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.byID), c.bytes, c.hits, c.misses
}
