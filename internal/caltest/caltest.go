// Package caltest is a reference for calendar-aligned windows, shared by the
// algorithm tests and the stores' conformance model.
package caltest

import "time"

// Window returns the local calendar day (or, with month, the calendar
// month) holding now, as [start, end) in Unix microseconds, in loc (nil
// means UTC). It finds the instants where the local date changes by
// bisection instead of constructing midnights, so it checks the stores'
// calendar arithmetic independently (DST days of 23 or 25 hours, days that
// start at 01:00, leap days).
func Window(now int64, loc *time.Location, month bool) (start, end int64) {
	if loc == nil {
		loc = time.UTC
	}
	date := func(us int64) (int, time.Month, int) {
		y, m, d := time.UnixMicro(us).In(loc).Date()
		if month {
			d = 1
		}
		return y, m, d
	}
	y0, m0, d0 := date(now)
	same := func(us int64) bool {
		y, m, d := date(us)
		return y == y0 && m == m0 && d == d0
	}
	span := int64(48 * time.Hour / time.Microsecond)
	if month {
		span = int64(33 * 24 * time.Hour / time.Microsecond)
	}
	// same is true on [start, end) and false just outside it.
	lo, hi := now-span, now
	for hi-lo > 1 {
		if mid := lo + (hi-lo)/2; same(mid) {
			hi = mid
		} else {
			lo = mid
		}
	}
	start = hi
	lo, hi = now, now+span
	for hi-lo > 1 {
		if mid := lo + (hi-lo)/2; same(mid) {
			lo = mid
		} else {
			hi = mid
		}
	}
	return start, hi
}
