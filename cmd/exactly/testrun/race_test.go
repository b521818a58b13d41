//go:build race

package testrun_test

const raceEnabled = true
