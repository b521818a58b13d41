package promutil

import "time"

// Since is a gauge of seconds since a time that each owner's function
// returns when scraped. Unlike Age it has one series per owner from the
// owner's start, whatever the owner holds, so an alert can read it for an
// instance that never got a partition.
type Since struct {
	*scraped[func() time.Time]
}

// Since returns a gauge of seconds since a time, labelled by owner.
func (f *Factory) Since(name, help string) *Since {
	s := &Since{newScraped(f.name(name), help, []string{f.Owner}, func(now time.Time, at func() time.Time) float64 {
		return secondsSince(now, at())
	})}
	f.all = append(f.all, s)
	return s
}

// Set makes owner's series report the seconds since at(); a second Set
// for the same owner replaces the first.
func (s *Since) Set(owner string, at func() time.Time) { s.set(at, owner) }
