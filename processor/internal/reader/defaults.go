package reader

// OrDefault sets *v to d when *v is the zero value: how New applies the
// topology.Default* values to a Config built by hand.
func OrDefault[T comparable](v *T, d T) {
	var zero T
	if *v == zero {
		*v = d
	}
}
