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

// add appends v and returns it in place.
func (f *few[T]) add(v T) *T {
	switch {
	case f.n < len(f.inline):
		f.inline[f.n] = v
	case f.more == nil:
		f.more = make([]T, len(f.inline), 2*len(f.inline))
		copy(f.more, f.inline[:])
		f.more = append(f.more, v)
	default:
		f.more = append(f.more, v)
	}
	f.n++
	return &f.all()[f.n-1]
}

// all are the values, in the order they were added.
func (f *few[T]) all() []T {
	if f.more != nil {
		return f.more
	}
	return f.inline[:f.n]
}
