package store

import "context"

// Incident is a stored incident: the fields a store filters on, and the
// document its producer (package diagnosis) owns, kept as it is.
type Incident struct {
	ID string // opaque, URL-safe, chosen by the producer
	// Entry is the affected entry point ("service operation"); EntryService
	// its service.
	Entry, EntryService string
	// Service is the culprit the current verdict names ("" before one).
	Service string
	// Start and End bound the incident, Unix ns; End is 0 while it is open.
	Start, End int64
	// Updated is when the document last changed, Unix ns.
	Updated int64
	// Doc is the producer's JSON document.
	Doc []byte
}

// IncidentQuery selects incidents.
type IncidentQuery struct {
	// Service, when set, matches the incident's culprit or entry service.
	Service string
	// Entry, when set, matches the entry point exactly.
	Entry string
	// From and To (Unix ns, 0 = unbounded) keep incidents whose time span
	// [Start, End] (End = now while open) overlaps [From, To].
	From, To int64
	Limit    int // at most this many, newest Start first; ≤ 0 means 100
}

// IncidentStore keeps incidents across restarts. Implementations MUST be
// safe for concurrent use; Doc slices returned belong to the caller.
type IncidentStore interface {
	// PutIncident inserts the incident or replaces the one with its ID.
	PutIncident(ctx context.Context, in Incident) error
	// GetIncident returns the incident with id, or ErrNotFound.
	GetIncident(ctx context.Context, id string) (Incident, error)
	// FindIncidents returns the incidents q selects, newest Start first.
	FindIncidents(ctx context.Context, q IncidentQuery) ([]Incident, error)
}
