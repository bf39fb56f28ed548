#!/usr/bin/env bash
# Gives every floodgate key that has no TTL one, on one Redis node.
#
# floodgate writes every key with a TTL. Builds before this script could leave a
# fixed-window key (and, after a refund, a token bucket or GCRA key) without
# one when a coalesced script call carried two decisions on it; such keys
# never expire. This script finds them with SCAN and gives each a TTL of
# TTL_MS (default: a day, the longest window most configurations have; set
# it to your longest window): a stale key then expires, and a key whose
# window is still running keeps its count until that window ends. Keys
# that already have a TTL, and keys outside PATTERN, are left alone.
#
# Usage: scripts/redis-expire-untimed.sh [redis-cli connection options]
#   PATTERN=fg:* TTL_MS=86400000 scripts/redis-expire-untimed.sh -u redis://127.0.0.1:6379/0
# In a Cluster, run it once per master (-h host -p port of each).
set -euo pipefail
pattern=${PATTERN:-fg:*}
ttl=${TTL_MS:-86400000}
# ARGV[1] is the TTL, the rest are keys; the keys SCAN found on this node
# may be of any of its slots.
script="#!lua flags=allow-cross-slot-keys
local n = 0
for i = 2, #ARGV do
  if redis.call('PTTL', ARGV[i]) == -1 then
    redis.call('PEXPIRE', ARGV[i], ARGV[1])
    n = n + 1
  end
end
return n"
redis-cli "$@" --scan --pattern "$pattern" |
	xargs -r -d '\n' -n 500 redis-cli "$@" EVAL "$script" 0 "$ttl" |
	awk -v ttl="$ttl" '{ n += $1 } END { printf "%d keys without a TTL given one of %d ms\n", n, ttl }'
