//go:build race

package memory_test

// raceEnabled reports that the race detector is on, so heavy tests scale
// themselves down.
const raceEnabled = true
