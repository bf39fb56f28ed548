package config

import (
	"fmt"
	"io"
	"os"
)

// Options change what LoadWith and ParseWith accept. The zero value is
// what Load and Parse accept.
type Options struct {
	// EnvoyDomains says that Envoy domains are served besides the
	// limiters (floodgate serve --envoy-config-dir). A configuration
	// without limiters, naming only the store, is then valid: the Envoy
	// domains are what it serves.
	EnvoyDomains bool
}

// LoadWith is Load with options.
func LoadWith(path string, o Options) (*Config, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.Mode().IsRegular() && fi.Size() > MaxFileSize {
		return nil, tooLarge(path, fmt.Sprintf("is %s", humanBytes(fi.Size())))
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return ParseWith(path, data, o)
}
