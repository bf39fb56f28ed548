package config

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/floodgate-go/floodgate/internal/yamlnode"
	"github.com/floodgate-go/floodgate/store"
	"github.com/floodgate-go/floodgate/store/guard"
	"go.yaml.in/yaml/v3"
)

func (d *decoder) breaker(n *yaml.Node, path string, b *store.BreakerOptions) {
	f := d.mapping(n, path, "failures", "ratio", "window", "cooldown", "max_cooldown", "disabled")
	if f == nil {
		return
	}
	if v := f["failures"]; v != nil {
		if i, ok := d.intIn(v, path+".failures", 1, 1_000_000, "must be between 1 and 1000000, got %d"); ok {
			b.Failures = i
		}
	}
	if v := f["ratio"]; v != nil {
		if r, ok := d.ratio(v, path+".ratio"); ok {
			b.Ratio = r
		}
	}
	if v := f["window"]; v != nil {
		if w, ok := d.positive(v, path+".window"); ok {
			if w < 10*time.Millisecond {
				d.errorf(v, path+".window", "must be at least 10ms, got %v", w)
			} else {
				b.Window = w
			}
		}
	}
	if v := f["cooldown"]; v != nil {
		if c, ok := d.positive(v, path+".cooldown"); ok {
			b.Cooldown = c
		}
	}
	if v := f["max_cooldown"]; v != nil {
		if c, ok := d.positive(v, path+".max_cooldown"); ok {
			b.MaxCooldown = c
		}
	}
	if b.MaxCooldown > 0 && b.MaxCooldown < b.Cooldown {
		d.errorf(n, path+".max_cooldown", "must not be shorter than cooldown (%v), got %v", b.Cooldown, b.MaxCooldown)
	}
	if v := f["disabled"]; v != nil {
		if off, ok := d.boolean(v, path+".disabled"); ok && off {
			b.Failures = -1
		}
	}
}

// ratio decodes a number in (0, 1].
func (d *decoder) ratio(n *yaml.Node, path string) (float64, bool) {
	n, ok := d.scalar(n, path)
	if !ok {
		return 0, false
	}
	r, err := strconv.ParseFloat(n.Value, 64)
	if err != nil || (n.ShortTag() != "!!float" && n.ShortTag() != "!!int") || !(r > 0 && r <= 1) {
		d.errorf(n, path, "must be a number above 0 and at most 1, got %s", yamlnode.Describe(n))
		return 0, false
	}
	return r, true
}

func (d *decoder) store(n *yaml.Node, path string, s *Store) {
	f := d.mapping(n, path, "memory", "redis")
	if f == nil {
		return
	}
	if f["memory"] != nil && f["redis"] != nil {
		d.errorf(f["redis"], path+".redis", "set either memory or redis, not both")
		return
	}
	if v := f["memory"]; v != nil {
		p := path + ".memory"
		m := d.mapping(v, p, "max_keys")
		if v := m["max_keys"]; v != nil {
			if k, ok := d.intIn(v, p+".max_keys", 1, 1<<40, "must be at least 1, got %d"); ok {
				s.Memory.MaxKeys = k
			}
		}
	}
	if v := f["redis"]; v != nil {
		s.Memory = nil
		s.Redis = d.redis(v, path+".redis")
	}
}

func (d *decoder) redis(n *yaml.Node, path string) *Redis {
	r := &Redis{Deadline: guard.DefaultTimeout, KeyPrefix: "fg:", HashTag: "rule"}
	f := d.mapping(n, path, "url", "cluster", "sentinel", "username", "password", "db", "deadline",
		"key_prefix", "hash_tag", "deny_cache_size", "fallback")
	if f == nil {
		return r
	}
	var modes []string
	for _, k := range []string{"url", "cluster", "sentinel"} {
		if f[k] != nil {
			modes = append(modes, k)
		}
	}
	switch {
	case len(modes) == 0:
		d.errorf(n, path, "set one of url, cluster or sentinel")
	case len(modes) > 1:
		d.errorf(f[modes[1]], yamlnode.Join(path, modes[1]), "set only one of url, cluster or sentinel (%s is set too)", modes[0])
	}
	if v := f["url"]; v != nil {
		p := path + ".url"
		if s, ok := d.str(v, p); ok {
			// Errors print the URL redacted: it may carry a password.
			u, err := url.Parse(s)
			var ue *url.Error
			switch {
			case errors.As(err, &ue) && !isEscapeError(ue.Err):
				d.errorf(v, p, "%q is not a valid URL: %v", RedactURL(s), ue.Err)
			case err != nil:
				d.errorf(v, p, "%q is not a valid URL", RedactURL(s))
			case u.Scheme != "redis" && u.Scheme != "rediss" && u.Scheme != "unix":
				d.errorf(v, p, "must start with redis://, rediss:// or unix://, got %q", RedactURL(s))
			default:
				r.URL = s
			}
		}
	}
	if v := f["cluster"]; v != nil {
		r.Cluster = d.addrs(v, path+".cluster")
	}
	if v := f["sentinel"]; v != nil {
		p := path + ".sentinel"
		s := &Sentinel{}
		sf := d.mapping(v, p, "master", "addrs", "password")
		if sf != nil {
			if m := sf["master"]; m != nil {
				s.Master, _ = d.str(m, p+".master")
			} else {
				d.errorf(v, p+".master", "must be set")
			}
			if a := sf["addrs"]; a != nil {
				s.Addrs = d.addrs(a, p+".addrs")
			} else {
				d.errorf(v, p+".addrs", "must list at least one sentinel")
			}
			if pw := sf["password"]; pw != nil {
				s.Password, _ = d.str(pw, p+".password")
			}
		}
		r.Sentinel = s
	}
	if v := f["username"]; v != nil {
		r.Username, _ = d.str(v, path+".username")
	}
	if v := f["password"]; v != nil {
		r.Password, _ = d.str(v, path+".password")
	}
	if v := f["deadline"]; v != nil {
		if t, ok := d.positive(v, path+".deadline"); ok {
			r.Deadline = t
		}
	}
	if v := f["key_prefix"]; v != nil {
		p := path + ".key_prefix"
		if s, ok := d.str(v, p); ok {
			if strings.ContainsAny(s, "{}") {
				d.errorf(v, p, "must not contain '{' or '}' (keys carry their own hash tags)")
			}
			r.KeyPrefix = s
		}
	}
	if v := f["hash_tag"]; v != nil {
		p := path + ".hash_tag"
		if s, ok := d.str(v, p); ok {
			if s != "rule" && s != "limiter" {
				d.errorf(v, p, "must be rule or limiter, got %q", s)
			} else {
				r.HashTag = s
			}
		}
	}
	if v := f["db"]; v != nil {
		if db, ok := d.intIn(v, path+".db", 0, 1<<20, "must be a database number, got %d"); ok {
			r.DB = db
		}
	}
	if v := f["deny_cache_size"]; v != nil {
		if n, ok := d.intIn(v, path+".deny_cache_size", -1, 1<<30, "must be -1 (off) or a key count, got %d"); ok {
			r.DenyCacheSize = n
		}
	}
	if v := f["fallback"]; v != nil {
		r.Fallback = d.fallback(v, path+".fallback")
	}
	return r
}

func (d *decoder) fallback(n *yaml.Node, path string) *Fallback {
	fb := &Fallback{}
	f := d.mapping(n, path, "instances", "retry", "max_keys")
	if f == nil {
		return fb
	}
	if v := f["instances"]; v != nil {
		if i, ok := d.intIn(v, path+".instances", 1, 1_000_000, "must be at least 1, got %d"); ok {
			fb.Instances = i
		}
	} else {
		d.errorf(n, path+".instances", "must be set: how many instances share the limits")
	}
	if v := f["retry"]; v != nil {
		d.errorf(v, path+".retry", "is no longer a fallback setting: the breaker decides when Redis is tried again (breaker.cooldown)")
	}
	if v := f["max_keys"]; v != nil {
		if k, ok := d.intIn(v, path+".max_keys", 1, 1<<40, "must be at least 1, got %d"); ok {
			fb.MaxKeys = k
		}
	}
	return fb
}

// isEscapeError reports whether err is about a %-escape, whose message
// quotes part of the URL (perhaps of its password).
func isEscapeError(err error) bool {
	var e url.EscapeError
	return errors.As(err, &e)
}

// addrs decodes a non-empty list of host:port addresses.
func (d *decoder) addrs(n *yaml.Node, path string) []string {
	list, ok := d.strs(n, path)
	if !ok {
		return nil
	}
	if len(list) == 0 {
		d.errorf(n, path, "must list at least one address")
	}
	for i, a := range list {
		if _, _, err := net.SplitHostPort(a); err != nil {
			p := fmt.Sprintf("%s[%d]", path, i)
			d.errorf(d.at(p, n), p, "must be host:port, got %q", a)
			return nil
		}
	}
	return list
}
