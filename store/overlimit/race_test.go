//go:build race

package overlimit_test

// raceEnabled reports that the race detector is on.
const raceEnabled = true
