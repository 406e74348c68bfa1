package deploy

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"testing"
)

// dashboard is the part of Grafana's dashboard model the file uses; the
// file is decoded refusing any other field.
type dashboard struct {
	UID           string          `json:"uid"`
	Title         string          `json:"title"`
	Description   string          `json:"description"`
	Tags          []string        `json:"tags"`
	Editable      bool            `json:"editable"`
	SchemaVersion int             `json:"schemaVersion"`
	Version       int             `json:"version"`
	Time          json.RawMessage `json:"time"`
	Refresh       string          `json:"refresh"`
	Timezone      string          `json:"timezone"`
	Annotations   json.RawMessage `json:"annotations"`
	Templating    struct {
		List []struct {
			Name       string          `json:"name"`
			Label      string          `json:"label"`
			Type       string          `json:"type"`
			Datasource *datasource     `json:"datasource"`
			Query      json.RawMessage `json:"query"`
			Definition string          `json:"definition"`
			Refresh    int             `json:"refresh"`
			Multi      bool            `json:"multi"`
			IncludeAll bool            `json:"includeAll"`
			AllValue   string          `json:"allValue"`
			Current    json.RawMessage `json:"current"`
			Hide       int             `json:"hide"`
		} `json:"list"`
	} `json:"templating"`
	Panels []panel `json:"panels"`
}

type datasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type panel struct {
	ID          int                      `json:"id"`
	Type        string                   `json:"type"`
	Title       string                   `json:"title"`
	Description string                   `json:"description"`
	Collapsed   bool                     `json:"collapsed"`
	Datasource  *datasource              `json:"datasource"`
	GridPos     struct{ H, W, X, Y int } `json:"gridPos"`
	FieldConfig json.RawMessage          `json:"fieldConfig"`
	Options     json.RawMessage          `json:"options"`
	Panels      []panel                  `json:"panels"`
	Targets     []struct {
		RefID        string      `json:"refId"`
		Datasource   *datasource `json:"datasource"`
		Expr         string      `json:"expr"`
		LegendFormat string      `json:"legendFormat"`
	} `json:"targets"`
}

func loadDashboard(t *testing.T) dashboard {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, "deploy", "grafana", "quorate.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("quorate.json: %v", err)
	}
	return d
}

var labelValues = regexp.MustCompile(`^label_values\((.+),\s*\w+\)$`)

func TestDashboard(t *testing.T) {
	d := loadDashboard(t)
	if d.UID == "" || d.Title == "" {
		t.Error("the dashboard needs a uid and a title")
	}
	known := knownMetrics(t)
	dsVar := ""
	for _, v := range d.Templating.List {
		switch v.Type {
		case "datasource":
			dsVar = "${" + v.Name + "}"
		case "query":
			var q struct{ Query string }
			if err := json.Unmarshal(v.Query, &q); err != nil {
				t.Fatalf("variable %s: %v", v.Name, err)
			}
			m := labelValues.FindStringSubmatch(q.Query)
			if m == nil {
				t.Errorf("variable %s: query %q: want label_values(selector, label)", v.Name, q.Query)
				continue
			}
			checkExpr(t, "variable "+v.Name, m[1], known)
		}
	}
	used := map[string]bool{}
	ids := map[int]bool{}
	var boxes []panel
	for _, p := range d.Panels {
		if ids[p.ID] {
			t.Errorf("panel id %d is used twice", p.ID)
		}
		ids[p.ID] = true
		g := p.GridPos
		if g.W <= 0 || g.H <= 0 || g.X < 0 || g.X+g.W > 24 {
			t.Errorf("panel %q: gridPos %+v is outside Grafana's 24 columns", p.Title, g)
		}
		for _, q := range boxes {
			o := q.GridPos
			if g.X < o.X+o.W && o.X < g.X+g.W && g.Y < o.Y+o.H && o.Y < g.Y+g.H {
				t.Errorf("panels %q and %q overlap", p.Title, q.Title)
			}
		}
		boxes = append(boxes, p)
		if p.Type == "row" {
			continue
		}
		if len(p.Targets) == 0 || p.Datasource == nil || p.Datasource.UID != dsVar {
			t.Errorf("panel %q: %d queries on data source %+v; want queries on the %s variable", p.Title, len(p.Targets), p.Datasource, dsVar)
		}
		refs := map[string]bool{}
		for _, q := range p.Targets {
			if q.RefID == "" || refs[q.RefID] {
				t.Errorf("panel %q: refId %q empty or repeated", p.Title, q.RefID)
			}
			refs[q.RefID] = true
			for _, n := range checkExpr(t, "panel "+p.Title, q.Expr, known) {
				used[n] = true
			}
		}
	}
	// The golden signals and the cluster's state, by the metric that shows each.
	for _, n := range []string{
		"quorate_check_requests_total", "quorate_check_duration_seconds_bucket", // traffic, latency
		"quorate_unavailable_total", "quorate_policy_decisions_total", // errors, fail-open
		"quorate_queue_full_total", "quorate_lease_shed_total", "quorate_wal_sync_duration_seconds_bucket", // saturation
		"quorate_policy_version", "quorate_group_leader", "quorate_members", // the cluster
		"quorate_shards_without_leader", "quorate_breaker_open_shards", "quorate_decision_log_dropped_total",
	} {
		if !used[n] {
			t.Errorf("no panel shows %s", n)
		}
	}
}
