package autoscale

import (
	"errors"
	"math"
	"testing"
	"time"
)

func TestDecide(t *testing.T) {
	p := Policy{Name: "cpu", Out: 0.7, In: 0.3, Min: 1, Max: 4, Cooldown: 10 * time.Second}
	long := time.Minute
	tests := []struct {
		name     string
		signal   float64
		replicas int
		since    time.Duration
		want     int
	}{
		{"above out scales out by one", 0.9, 1, long, 2},
		{"far above out still one step", 5, 2, long, 3},
		{"at max stays", 0.9, 4, long, 4},
		{"below in scales in", 0.1, 3, long, 2},
		{"at min stays", 0.1, 1, long, 1},
		{"between thresholds holds", 0.5, 2, long, 2},
		{"exactly out holds", 0.7, 2, long, 2},
		{"exactly in holds", 0.3, 2, long, 2},
		{"cooldown blocks out", 0.9, 2, 5 * time.Second, 2},
		{"cooldown blocks in", 0.1, 2, 5 * time.Second, 2},
		{"cooldown just over", 0.9, 2, 10 * time.Second, 3},
		{"NaN holds", math.NaN(), 2, long, 2},
		{"below min is raised even in cooldown", 0.1, 0, 0, 1},
		{"above max is lowered even in cooldown", 0.9, 6, 0, 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := p.Decide(tt.signal, tt.replicas, tt.since); got != tt.want {
				t.Fatalf("Decide(%v, %d, %v) = %d, want %d", tt.signal, tt.replicas, tt.since, got, tt.want)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	ok := Policy{Out: 2, In: 1, Min: 1, Max: 3}
	if err := ok.Validate(); err != nil {
		t.Fatalf("valid policy: %v", err)
	}
	bad := []Policy{
		{Out: 2, In: 1, Min: 0, Max: 3},
		{Out: 2, In: 1, Min: 3, Max: 2},
		{Out: 1, In: 1, Min: 1, Max: 3},
		{Out: 1, In: 2, Min: 1, Max: 3},
		{Out: 2, In: 1, Min: 1, Max: 3, Cooldown: -time.Second},
	}
	for i, p := range bad {
		if err := p.Validate(); !errors.Is(err, ErrPolicy) {
			t.Errorf("case %d: Validate() = %v, want ErrPolicy", i, err)
		}
	}
}
