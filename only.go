package floodgate

import "slices"

// Only returns a limiter that applies just the named rules of l. It has l's
// name, store, clock and failure policy, so its rules act
// on the very state of l's rules of the same names: recording into it
// records into those rules of l and leaves the others alone. Use it to
// record post-flight tokens into a route's tokens-per-minute rule and not
// its requests-per-minute rule. It returns an error for an unknown name or
// none.
func (l *Limiter) Only(rules ...string) (*Limiter, error) {
	if len(rules) == 0 {
		return nil, sprintfErr("floodgate: limiter %q: Only needs at least one rule name", l.name)
	}
	all := l.Rules()
	var keep []Rule
	for _, name := range rules {
		i := slices.IndexFunc(all, func(r Rule) bool { return r.Name == name })
		if i < 0 {
			return nil, sprintfErr("floodgate: limiter %q has no rule %q", l.name, name)
		}
		keep = append(keep, all[i])
	}
	opts := l.opts
	opts.Replaces = l // a view shares l's keys
	sub, err := New(l.name, l.store, keep, &opts)
	if err != nil {
		return nil, err
	}
	return sub, nil
}
