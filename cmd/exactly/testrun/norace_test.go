//go:build !race

package testrun_test

const raceEnabled = false
