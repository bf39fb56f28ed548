package floodgate

// GeneralPath makes l decide on its rules the general way even when it
// could take decideOne: BenchmarkOneRule's measure of what decideOne
// saves.
func GeneralPath(l *Limiter) { l.one = nil }
