package model

import (
	"errors"
	"math"
	"testing"
)

func TestParseIDs(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want string
		err  bool
	}{
		{"4bf92f3577b34da6a3ce929d0e0e4736", "4bf92f3577b34da6a3ce929d0e0e4736", false},
		{"a3ce929d0e0e4736", "0000000000000000a3ce929d0e0e4736", false}, // 64-bit Zipkin id
		{"abc", "00000000000000000000000000000abc", false},
		{"", "", true},
		{"zz", "", true},
		{"4bf92f3577b34da6a3ce929d0e0e47360", "", true},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseTraceID(tc.in)
			if tc.err {
				if !errors.Is(err, ErrBadID) {
					t.Fatalf("err = %v, want ErrBadID", err)
				}
				return
			}
			if err != nil || got.String() != tc.want {
				t.Fatalf("ParseTraceID(%q) = %s, %v", tc.in, got, err)
			}
		})
	}
	if s, err := ParseSpanID("f"); err != nil || s.String() != "000000000000000f" {
		t.Fatalf("ParseSpanID: %s %v", s, err)
	}
	if _, err := ParseSpanID("00000000000000001"); err == nil {
		t.Fatal("17-digit span id accepted")
	}
}

func TestAttributesAndFlags(t *testing.T) {
	s := &Span{Resource: []KeyValue{String(AttrServiceName, "svc"), Int(AttrProcessPID, 42)}}
	if s.IsAnomalous() || s.IsError() {
		t.Fatal("fresh span flagged")
	}
	s.SetAttr(Bool(AttrAnomaly, true))
	s.SetAttr(Bool(AttrAnomaly, true)) // replaces, not appends
	if len(s.Attributes) != 1 || !s.IsAnomalous() {
		t.Fatalf("attrs %+v", s.Attributes)
	}
	if v, ok := s.Attr(AttrProcessPID); !ok || v.String() != "42" {
		t.Fatal("resource attribute not found through Attr")
	}
	s.SetAttr(String(AttrError, "true"))
	if !s.IsError() {
		t.Fatal("error=\"true\" not an error")
	}
	if (&Span{StatusCode: StatusError}).IsError() != true {
		t.Fatal("status ERROR not an error")
	}
	for v, want := range map[Value]string{
		{Type: TypeBool, Int: 1}: "true", {Type: TypeFloat, Float: 1.5}: "1.5", {Type: TypeBytes, Str: "\x01\xff"}: "01ff", {Str: "x"}: "x",
	} {
		if v.String() != want {
			t.Errorf("%+v.String() = %q, want %q", v, v.String(), want)
		}
	}
}

func TestValueNumber(t *testing.T) {
	for _, tc := range []struct {
		name string
		v    Value
		want float64
		ok   bool
	}{
		{"int", Int("k", -7).Value, -7, true},
		{"float", Float("k", 2.5).Value, 2.5, true},
		{"decimal string", String("k", " 12.25").Value, 0, false}, // no trimming: a space is not a number
		{"string", String("k", "12.25").Value, 12.25, true},
		{"word", String("k", "fast").Value, 0, false},
		{"bool", Bool("k", true).Value, 0, false},
		{"NaN", Float("k", math.NaN()).Value, 0, false},
		{"Inf string", String("k", "+Inf").Value, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := tc.v.Number()
			if got != tc.want || ok != tc.ok {
				t.Errorf("Number() = %v, %v; want %v, %v", got, ok, tc.want, tc.ok)
			}
		})
	}
}
