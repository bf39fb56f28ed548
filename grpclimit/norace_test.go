//go:build !race

package grpclimit

// raceEnabled reports that the race detector is on, which makes sync.Pool
// drop items, so pooled paths allocate.
const raceEnabled = false
