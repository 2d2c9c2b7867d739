package agent

import (
	"strings"
	"testing"
)

func TestParseTargetSpec(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want TargetSpec
		err  string
	}{
		{in: "pid=1234", want: TargetSpec{PID: 1234}},
		{in: "service=checkout,cmd=checkout.jar", want: TargetSpec{Service: "checkout", Command: "checkout.jar"}},
		{in: " cmd=java -jar x.jar , instance=c-1", want: TargetSpec{Command: "java -jar x.jar", InstanceID: "c-1"}},
		{in: "", err: "empty"},
		{in: "pid=abc", err: "positive integer"},
		{in: "pid=-3", err: "positive integer"},
		{in: "service=x", err: "needs pid= or cmd="},
		{in: "pid=1,cmd=x", err: "exclusive"},
		{in: "user=root", err: "unknown key"},
		{in: "pid", err: "not key=value"},
		{in: "cmd=", err: "not key=value"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseTargetSpec(tc.in)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %+v, %v; want %+v", got, err, tc.want)
			}
			if again, err := ParseTargetSpec(got.String()); err != nil || again != got {
				t.Fatalf("round trip of %q: %+v, %v", got.String(), again, err)
			}
		})
	}
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		mod  func(*Config)
		err  string
	}{
		{name: "defaults"},
		{name: "public with token", mod: func(c *Config) { c.ListenAddr, c.AuthToken = "0.0.0.0:7070", "t" }},
		{name: "public without token", mod: func(c *Config) { c.ListenAddr = ":7070" }, err: "beyond loopback"},
		{name: "localhost", mod: func(c *Config) { c.ListenAddr = "localhost:7070" }},
		{name: "bad server", mod: func(c *Config) { c.ServerURL = "127.0.0.1:16686" }, err: "server URL"},
		{name: "bad advertise", mod: func(c *Config) { c.AdvertiseURL = "/dump" }, err: "advertise URL"},
		{name: "bad listen", mod: func(c *Config) { c.ListenAddr = "7070" }, err: "listen address"},
		{name: "no concurrency", mod: func(c *Config) { c.MaxConcurrentDumps = 0 }, err: "concurrent"},
		{name: "nice out of range", mod: func(c *Config) { c.DumpNice = 20 }, err: "dump nice"},
		{name: "empty target", mod: func(c *Config) { c.Targets = []TargetSpec{{Service: "x"}} }, err: "targets[0]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := DefaultConfig()
			if tc.mod != nil {
				tc.mod(&c)
			}
			err := c.Validate()
			if tc.err == "" && err != nil || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
				t.Fatalf("err = %v, want %q", err, tc.err)
			}
		})
	}
}

func TestOTelService(t *testing.T) {
	for _, tc := range []struct {
		name          string
		env           []string
		service, inst string
	}{
		{name: "none", env: []string{"PATH=/bin"}},
		{name: "service name", env: []string{"OTEL_SERVICE_NAME=checkout"}, service: "checkout"},
		{name: "resource attributes", env: []string{"OTEL_RESOURCE_ATTRIBUTES=deployment.environment=prod, service.name=cart%20v2,service.instance.id=c-1"}, service: "cart v2", inst: "c-1"},
		{name: "service name wins", env: []string{"OTEL_SERVICE_NAME=a", "OTEL_RESOURCE_ATTRIBUTES=service.name=b"}, service: "a"},
		{name: "service name wins in any order", env: []string{"OTEL_RESOURCE_ATTRIBUTES=service.name=b", "OTEL_SERVICE_NAME=a"}, service: "a"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, i := otelService(tc.env)
			if s != tc.service || i != tc.inst {
				t.Fatalf("got %q %q, want %q %q", s, i, tc.service, tc.inst)
			}
		})
	}
}

func TestJavaMain(t *testing.T) {
	for _, tc := range []struct {
		argv []string
		want string
	}{
		{[]string{"java", "-Xmx1g", "-jar", "/srv/checkout-1.2.jar", "--port=8080"}, "checkout-1.2"},
		{[]string{"/usr/bin/java", "-cp", "a.jar:b.jar", "-Dx=y", "com.example.Main", "arg"}, "com.example.Main"},
		{[]string{"java", "-m", "app/com.example.App"}, "com.example.App"},
		{[]string{"java", "-version"}, ""},
	} {
		if got := javaMain(tc.argv); got != tc.want {
			t.Errorf("javaMain(%q) = %q, want %q", tc.argv, got, tc.want)
		}
	}
}
