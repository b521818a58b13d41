// Package deploy holds what exactly is deployed with: the manifests and
// units below it, the Grafana dashboard (grafana/exactly.json) and the
// Prometheus alert rules (prometheus/alerts.yaml). Its Go code reads the
// dashboard's and the rules' queries, for the tests that check them
// against the exported metrics and a real Prometheus.
package deploy

import (
	_ "embed"
	"encoding/json"

	"go.yaml.in/yaml/v4"
)

var (
	//go:embed grafana/exactly.json
	dashboard []byte
	//go:embed prometheus/alerts.yaml
	alertRules []byte
)

// Dashboard is the part of grafana/exactly.json that holds queries.
type Dashboard struct {
	Panels []struct {
		Title   string `json:"title"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
	Templating struct {
		List []struct {
			Name       string `json:"name"`
			Definition string `json:"definition"`
		} `json:"list"`
	} `json:"templating"`
}

// Alerts is the part of prometheus/alerts.yaml that holds the rules.
type Alerts struct {
	Groups []struct {
		Rules []struct {
			Alert string `yaml:"alert"`
			Expr  string `yaml:"expr"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

// LoadDashboard decodes grafana/exactly.json.
func LoadDashboard() (d Dashboard, err error) { return d, json.Unmarshal(dashboard, &d) }

// LoadAlerts decodes prometheus/alerts.yaml.
func LoadAlerts() (a Alerts, err error) { return a, yaml.Unmarshal(alertRules, &a) }
