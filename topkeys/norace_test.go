//go:build !race

package topkeys_test

// raceEnabled reports that the race detector is on, so heavy tests scale
// themselves down.
const raceEnabled = false
