package reader

import (
	"slices"
	"strings"
	"time"

	"github.com/exactly-io/exactly/processor/internal/fault"
	"github.com/exactly-io/exactly/topology"
)

// OrDefault sets *v to d when *v is the zero value: how New applies the
// topology spec's defaults (topology.Default) to a Config built by hand.
func OrDefault[T comparable](v *T, d T) {
	var zero T
	if *v == zero {
		*v = d
	}
}

// Within returns a *ConfigError "<name> <v> must be between <lo> and
// <hi>" when v is outside the topology spec's bounds of the setting at
// path (see topology.Bounds).
func Within[T int | int32 | time.Duration](name, path string, v T) error {
	lo, hi := topology.Bounds[T](path)
	if v < lo || v > hi {
		return fault.NewConfigError("%s %v must be between %v and %v", name, v, lo, hi)
	}
	return nil
}

// OneOf returns a *ConfigError "<name> "<v>": want a or b" when v is not
// one of the values the topology spec allows the setting at path (see
// topology.Allowed).
func OneOf(name, path, v string) error {
	allowed := topology.Allowed(path)
	if slices.Contains(allowed, v) {
		return nil
	}
	return fault.NewConfigError("%s %q: want %s", name, v, strings.Join(allowed, " or "))
}
