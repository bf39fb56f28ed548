package envoy

// Keep returns a Config with c's domains and, for each name in domains
// that c does not configure, prev's domain of that name (names prev does not
// configure either are ignored). A nil c has no domains; c and prev are not changed. A reload uses it
// to keep serving a domain whose file has gone missing for a moment (a
// deployment swapping files, a file moved away and back) with its last
// limits instead of dropping them at once; File still names the file the
// kept domain was loaded from.
func (c *Config) Keep(prev *Config, domains ...string) *Config {
	if c == nil {
		c = &Config{}
	}
	out := &Config{domains: make(map[string]*domain, len(c.domains)+len(domains))}
	for name, d := range c.domains {
		out.domains[name] = d
	}
	for _, name := range domains {
		if out.domains[name] != nil || prev == nil || prev.domains[name] == nil {
			continue
		}
		out.domains[name] = prev.domains[name]
	}
	return out
}
