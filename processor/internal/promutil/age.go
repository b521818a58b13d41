package promutil

import "time"

// Age is a gauge of seconds since a time, per label set, computed when
// scraped: a value read at that time keeps its series while its age
// grows, so that an alert can tell a value that is current from one that
// could not be read again (a broker cut off), where a stored age would
// only move when something updates it.
type Age struct {
	*scraped[time.Time]
	labels int // owner included
}

// Age returns an age gauge labelled by owner and labels.
func (f *Factory) Age(name, help string, labels ...string) *Age {
	a := &Age{
		scraped: newScraped(f.name(name), help, f.labels(labels), secondsSince),
		labels:  len(labels) + 1,
	}
	f.all = append(f.all, a)
	return a
}

// Set records that the series of labels was last read at at.
func (a *Age) Set(at time.Time, labels ...string) { a.set(at, labels...) }

// Labels is how many labels a series has, the owner's included.
func (a *Age) Labels() int { return a.labels }

// Delete removes the series of labels.
func (a *Age) Delete(labels ...string) { a.delete(labels...) }
