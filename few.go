package floodgate

import "github.com/floodgate-go/floodgate/store"

// few holds a decision's per-rule values: up to store.MaxCallOps of them
// inline, so that a decision of a few rules keeps them off the heap, and
// all of them in a slice of their own beyond that.
type few[T any] struct {
	n      int
	inline [store.MaxCallOps]T
	more   []T // all the values, when there are more than fit inline
}

// next appends a zero value and returns it in place, for the caller to
// fill in field by field: storing a whole value that holds pointers
// through a pointer is a runtime call (its write barriers), which a
// decision would pay per rule.
func (f *few[T]) next() *T {
	if f.n < len(f.inline) {
		f.n++
		return &f.inline[f.n-1]
	}
	return f.spill()
}

// spill is next past the inline values.
func (f *few[T]) spill() *T {
	if f.more == nil {
		f.more = make([]T, len(f.inline), 2*len(f.inline))
		copy(f.more, f.inline[:])
	}
	f.more = append(f.more, *new(T))
	f.n++
	return &f.more[f.n-1]
}

// all are the values, in the order they were added.
func (f *few[T]) all() []T {
	if f.more != nil {
		return f.more
	}
	return f.inline[:f.n]
}
