package config

import "strings"

// RedactURL returns s with the password of its userinfo (the part between
// "user:" and "@") replaced by "xxxxx", whether or not s parses as a URL, so
// that an error about a URL never prints its secret. Without a scheme, all
// of the userinfo is replaced.
func RedactURL(s string) string {
	start := 0
	_, rest, scheme := strings.Cut(s, "://")
	switch {
	case scheme:
		start = len(s) - len(rest)
	case strings.HasPrefix(s, "//"):
		start = 2
	}
	authority := s[start:]
	if i := strings.IndexAny(authority, "/?#"); i >= 0 {
		authority = authority[:i]
	}
	at := strings.LastIndexByte(authority, '@')
	if at < 0 {
		return s
	}
	from := 0
	if scheme {
		from = strings.IndexByte(authority[:at], ':') + 1
		if from == 0 {
			return s // a user name and no password
		}
	}
	return s[:start+from] + "xxxxx" + s[start+at:]
}
