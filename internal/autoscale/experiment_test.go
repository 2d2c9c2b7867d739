package autoscale

import (
	"encoding/json"
	"math"
	"slices"
	"testing"
)

func TestRamp(t *testing.T) {
	got := Ramp(10, 40, 2, 3, 1, 3, 1)
	want := []float64{10, 10, 20, 30, 40, 40, 30, 20, 10, 10}
	if !slices.Equal(got, want) {
		t.Fatalf("Ramp = %v, want %v", got, want)
	}
}

func TestNumJSON(t *testing.T) {
	b, err := json.Marshal([]Num{1.5, Num(math.NaN()), Num(math.Inf(1))})
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != "[1.5,null,null]" {
		t.Fatalf("marshal = %s", b)
	}
	var back []Num
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back[0] != 1.5 || !math.IsNaN(float64(back[1])) {
		t.Fatalf("unmarshal = %v", back)
	}
}

func TestReadingSignal(t *testing.T) {
	r := Reading{CPU: 0.8, RunqMs: 3}
	if r.Signal("cpu") != 0.8 || r.Signal("runq") != 3 {
		t.Fatalf("Signal picked the wrong value: cpu %v runq %v", r.Signal("cpu"), r.Signal("runq"))
	}
}
