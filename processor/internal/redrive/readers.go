package redrive

import (
	"fmt"
	"strings"

	"github.com/exactly-io/exactly/topology"
)

// SharedInput returns an error wrapping ErrUsage when a stage or sink of f
// other than stage reads stage's input topic. A redrive writes dead letters
// back to that topic, so every other reader would get the records a second
// time: duplicates that no group offset or verify can tell apart.
func SharedInput(f *topology.File, stage string) error {
	st, ok := f.Stage(stage)
	if !ok {
		return nil
	}
	in := st.Input.Topic
	var others []string
	for _, s := range f.Stages {
		if s.Name != st.Name && s.Input.Topic == in {
			others = append(others, "stage "+s.Name)
		}
	}
	for _, s := range f.Sinks {
		if s.Input.Topic == in {
			others = append(others, "sink "+s.Name)
		}
	}
	if len(others) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s, the input of stage %s, is also read by %s: they would get the redriven records a second time; "+
		"redrive needs an input topic that only stage %s reads", ErrUsage, in, st.Name, strings.Join(others, ", "), st.Name)
}
