package promutil

import "time"

// Ready is the gauge exactly_<subsystem>_ready: 1 for each owner whose
// ready function returns nil when scraped, else 0; the same answer as
// /readyz, as a series that alert rules can use.
type Ready struct {
	*scraped[func() error]
}

// Ready returns the subsystem's readiness gauge.
func (f *Factory) Ready(help string) *Ready {
	r := &Ready{newScraped(f.name("ready"), help, []string{f.Owner}, func(_ time.Time, ready func() error) float64 {
		if ready() != nil {
			return 0
		}
		return 1
	})}
	f.all = append(f.all, r)
	return r
}

// Set makes owner's series report ready(); a second Set for the same owner
// replaces the first.
func (r *Ready) Set(owner string, ready func() error) { r.set(ready, owner) }
