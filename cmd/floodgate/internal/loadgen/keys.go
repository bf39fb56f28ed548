package loadgen

import (
	"math/rand/v2"
	"strconv"
)

// keyPicker draws key values for one worker. It is not safe for concurrent
// use: every worker owns one.
type keyPicker struct {
	prefix string
	n      uint64
	r      *rand.Rand
	zipf   *rand.Zipf // nil for the uniform distribution
	buf    []byte
}

// newKeyPicker returns a picker for cfg's keys whose draws are determined by
// cfg.Seed and the worker's index.
func newKeyPicker(cfg *Config, worker int) *keyPicker {
	r := rand.New(rand.NewPCG(cfg.Seed, uint64(worker)))
	p := &keyPicker{prefix: cfg.KeyPrefix, n: uint64(cfg.Keys), r: r}
	if cfg.Distribution == Zipf {
		p.zipf = rand.NewZipf(r, cfg.ZipfS, 1, p.n-1)
	}
	return p
}

// next returns the number of the next key, in [0, Keys).
func (p *keyPicker) next() uint64 {
	if p.zipf != nil {
		return p.zipf.Uint64()
	}
	return p.r.Uint64N(p.n)
}

// appendNext appends the next key's value to b.
func (p *keyPicker) appendNext(b []byte) []byte {
	b = append(b, p.prefix...)
	return p.appendNumber(b)
}

// appendNumber appends the next key's number alone to b, for a caller
// that has written the prefix already (escaped, as in a JSON body).
func (p *keyPicker) appendNumber(b []byte) []byte {
	return strconv.AppendUint(b, p.next(), 10)
}

// nextString returns the next key's value as a string.
func (p *keyPicker) nextString() string {
	p.buf = p.appendNext(p.buf[:0])
	return string(p.buf)
}
