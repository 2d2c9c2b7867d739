package mesh

import (
	"errors"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestLoadGood(t *testing.T) {
	topo, err := Load(filepath.Join("testdata", "topology", "chain.good.yml"))
	if err != nil {
		t.Fatal(err)
	}
	want := &Topology{
		Entry: "front",
		Services: []Service{
			{Name: "front", Language: LangGo, Calls: []string{"mid"}, Replicas: 2, Work: "cpu=1ms,sleep=2ms"},
			{Name: "mid", Language: LangJava, Calls: []string{"leaf"}, Replicas: 1, Work: "cpu=0.5ms,lock=1ms"},
			{Name: "leaf", Language: LangPython, Replicas: 1},
		},
		Phases: []Phase{{Rate: 5, Duration: 10 * time.Second}, {Rate: 20, Duration: time.Minute}},
	}
	if !reflect.DeepEqual(topo, want) {
		t.Errorf("got  %+v\nwant %+v", topo, want)
	}
	if got, want := topo.StartOrder(), []string{"leaf", "mid", "front"}; !reflect.DeepEqual(got, want) {
		t.Errorf("StartOrder = %v, want %v", got, want)
	}
}

func TestLoadBad(t *testing.T) {
	for _, tc := range []struct {
		file string
		errs []string // substrings the error must contain
	}{
		{"unknown-callee", []string{`services[0] (a).calls[1]: unknown service "x"`}},
		{"cycle", []string{"services: calls form a cycle a → b → c → a"}},
		{"language", []string{`services[0] (a).language: "rust" is not go, java or python`}},
		{"entry", []string{`entry: unknown service "z"`}},
		{"work", []string{`services[0] (a).work: cpu: bad duration "fast"`}},
		{"work-key", []string{`services[0] (a).work: unknown key "gpu"`}},
		{"field", []string{"field call not found"}},
		{"duplicate", []string{`services[1].name: "a" already used by services[0]`}},
		{"replicas", []string{"services[0] (a).replicas: 0, want at least 1"}},
		{"phase", []string{`load[1].duration: "soon" is not a duration`}},
		{"name", []string{`services[0].name: "Front_End" must be`}},
		{"self", []string{"services[0] (a).calls[0]: a service cannot call itself"}},
		{"empty", []string{"empty file"}},
		{"protocol", []string{`protocol: "http2" is not http or grpc`}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			_, err := Load(filepath.Join("testdata", "topology", tc.file+".bad.yml"))
			if err == nil {
				t.Fatal("no error")
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("error %v does not wrap ErrInvalid", err)
			}
			for _, s := range tc.errs {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not contain %q", err, s)
				}
			}
		})
	}
}

func TestParseProtocol(t *testing.T) {
	for _, tc := range []struct {
		yaml string
		grpc bool
	}{
		{"entry: a\nservices: [{name: a, language: go}]\n", false},
		{"entry: a\nprotocol: http\nservices: [{name: a, language: go}]\n", false},
		{"entry: a\nprotocol: grpc\nservices: [{name: a, language: go}]\n", true},
	} {
		topo, err := Parse([]byte(tc.yaml))
		if err != nil {
			t.Fatal(err)
		}
		if topo.GRPC() != tc.grpc {
			t.Errorf("%q: GRPC() = %v, want %v", tc.yaml, topo.GRPC(), tc.grpc)
		}
	}
}

func TestValidatePhaseRate(t *testing.T) {
	topo := &Topology{Entry: "a", Services: []Service{{Name: "a", Language: LangGo, Replicas: 1}},
		Phases: []Phase{{Rate: 0, Duration: time.Second}}}
	if err := topo.Validate(); err == nil || !strings.Contains(err.Error(), "load[0].rate") {
		t.Errorf("Validate = %v, want a load[0].rate error", err)
	}
}

// The default is Protractor's Fig 6.6: ten services, E twice and J three times
// on the request path, every language on the path.
func TestDefault(t *testing.T) {
	topo := Default()
	if len(topo.Services) != 10 || topo.Entry != "a" {
		t.Fatalf("default: %d services, entry %q", len(topo.Services), topo.Entry)
	}
	v := topo.Visits()
	if v["e"] != 2 || v["j"] != 3 || len(v) != 10 {
		t.Errorf("visits = %v, want e:2 j:3 and all ten services", v)
	}
	langs := map[string]bool{}
	for _, s := range topo.Services {
		langs[s.Language] = true
	}
	if len(langs) != 3 {
		t.Errorf("languages on the path: %v, want go, java and python", langs)
	}
	if len(topo.Phases) == 0 {
		t.Error("default has no load phases")
	}
	if order := topo.StartOrder(); order[len(order)-1] != "a" {
		t.Errorf("StartOrder = %v, want the entry last", order)
	}
}

func TestParseWorkValues(t *testing.T) {
	for _, tc := range []struct {
		in   string
		dur  time.Duration
		size int64
	}{
		{"2ms", 2 * time.Millisecond, 0},
		{"0.5ms", 500 * time.Microsecond, 0},
		{"150us", 150 * time.Microsecond, 0},
		{"1s", time.Second, 0},
		{"3", 3 * time.Millisecond, 3},
	} {
		d, err := ParseWorkDuration(tc.in)
		if err != nil || d != tc.dur {
			t.Errorf("ParseWorkDuration(%q) = %v, %v; want %v", tc.in, d, err, tc.dur)
		}
		if tc.size != 0 {
			if n, err := ParseSize(tc.in); err != nil || n != tc.size {
				t.Errorf("ParseSize(%q) = %d, %v", tc.in, n, err)
			}
		}
	}
	for in, want := range map[string]int64{"64KB": 64 << 10, "1MB": 1 << 20, "10b": 10, "0KB": 0, "1.5kb": 1536} {
		if n, err := ParseSize(in); err != nil || n != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, n, err, want)
		}
	}
}
