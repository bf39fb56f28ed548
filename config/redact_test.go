package config

import "testing"

func TestRedactURL(t *testing.T) {
	for in, want := range map[string]string{
		"redis://:secret@host:6379x/0":   "redis://:xxxxx@host:6379x/0",
		"rediss://user:pw@h:1/2?x=y":     "rediss://user:xxxxx@h:1/2?x=y",
		"redis://user:p@ss@h:1/0":        "redis://user:xxxxx@h:1/0",
		"redis://user@h:1/0":             "redis://user@h:1/0",
		"redis://h:1/0?u=a@b":            "redis://h:1/0?u=a@b",
		"not a url :secret@":             "xxxxx@",
		"unix://:pw@/var/run/redis.sock": "unix://:xxxxx@/var/run/redis.sock",
	} {
		if got := RedactURL(in); got != want {
			t.Errorf("RedactURL(%q) = %q, want %q", in, got, want)
		}
	}
}
