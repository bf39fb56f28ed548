package server

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestGrafanaDashboard checks deploy/grafana/floodgate.json: it is JSON
// Grafana can import (unique panel ids, a Prometheus datasource variable),
// and every metric its queries name is one the service exports.
func TestGrafanaDashboard(t *testing.T) {
	b, err := os.ReadFile("../deploy/grafana/floodgate.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		UID        string
		Templating struct{ List []struct{ Name, Type string } }
		Panels     []struct {
			ID      int
			Type    string
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("floodgate.json: %v", err)
	}
	// The metrics the service exports are named in its non-test sources.
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	exported := map[string]bool{}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range regexp.MustCompile(`"(floodgate_[a-z_]+)"`).FindAllStringSubmatch(string(src), -1) {
			exported[m[1]] = true
		}
	}
	for _, m := range []string{"floodgate_decisions_total", "floodgate_breaker_state", "floodgate_held_units"} {
		if !exported[m] {
			t.Fatalf("metric %s not found in the server's sources: %v", m, exported)
		}
	}
	if dash.UID == "" || len(dash.Templating.List) == 0 || dash.Templating.List[0].Type != "datasource" {
		t.Errorf("uid %q, variables %+v: want a uid and a datasource variable first", dash.UID, dash.Templating.List)
	}
	ids := map[int]bool{}
	queries := 0
	name := regexp.MustCompile(`floodgate_[a-z_]+`)
	for _, p := range dash.Panels {
		if ids[p.ID] {
			t.Errorf("panel %q: id %d used twice", p.Title, p.ID)
		}
		ids[p.ID] = true
		for _, q := range p.Targets {
			queries++
			for _, m := range name.FindAllString(q.Expr, -1) {
				base := m
				for _, suffix := range []string{"_bucket", "_count", "_sum"} {
					base = strings.TrimSuffix(base, suffix)
				}
				if !exported[base] {
					t.Errorf("panel %q queries %s, which the service does not export", p.Title, m)
				}
			}
		}
	}
	if queries < 10 {
		t.Errorf("%d queries, want the dashboard's panels", queries)
	}
}
