//go:build linux

package run

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"
)

func registerWithAgent(o Options, pid int, log *slog.Logger) {
	body, _ := json.Marshal(map[string]any{"pid": pid, "service": o.Service, "serviceInstanceId": o.Instance})
	for attempt := 0; attempt < 3; attempt++ {
		req, _ := http.NewRequest(http.MethodPost, strings.TrimRight(o.Agent, "/")+"/api/v1/processes", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if o.Token != "" {
			req.Header.Set("Authorization", "Bearer "+o.Token)
		}
		resp, err := (&http.Client{Timeout: 3 * time.Second}).Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode/100 == 2 {
				log.Debug("registered with the agent", "pid", pid)
				return
			}
			err = fmt.Errorf("agent answered %s", resp.Status)
		}
		if attempt == 2 {
			log.Info("not registered with a local agent (profilers will not record this process)", "agent", o.Agent, "err", err)
			return
		}
		time.Sleep(time.Second)
	}
}

func unregisterFromAgent(o Options, pid int) {
	req, _ := http.NewRequest(http.MethodDelete, fmt.Sprintf("%s/api/v1/processes/%d", strings.TrimRight(o.Agent, "/"), pid), nil)
	if o.Token != "" {
		req.Header.Set("Authorization", "Bearer "+o.Token)
	}
	if resp, err := (&http.Client{Timeout: time.Second}).Do(req); err == nil {
		resp.Body.Close()
	}
}
