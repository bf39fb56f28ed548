-- concurrency: a hash {n, [ticket] = slots}: the slots n held and each
-- lease's, and beside it (the op's second key, the state key and
-- ":expiry") a sorted set of the leases' tickets scored by when each lapses
-- (µs). Both expire when the last lease lapses.

-- The lease set is the op's second key.
local leases = {inplace = true, keys = 2}
ALG.concurrency = leases

-- A call never touches a key it has emptied: on a Cluster slot being
-- migrated, Redis refuses a script's command on a key the node does not
-- hold, mid-script. So the last lease to go takes both keys with it at
-- once (gone), and the lease set is not read again.
function leases.load(op)
  local v = redis.call('HGET', op.key, 'n')
  if v then op.a, op.exists = tonumber(v), true end
  op.live, op.gone = true, false
end

local function gone(op)
  leases.forget(op)
  op.a, op.exists, op.dirty, op.gone = 0, false, false, true
end

-- slots reads the slots of the leases ids, in chunks that fit Lua's stack.
local function slots(key, ids)
  local out = {}
  for s = 1, #ids, 1000 do
    local part = redis.call('HMGET', key, unpack(ids, s, min(s + 999, #ids)))
    for j = 1, #part do out[#out + 1] = tonumber(part[j]) or 0 end
  end
  return out
end

-- unheld lowers the slots held by those of leases just removed. A sum that
-- saturated at MAX cannot be kept by subtraction: it is summed again.
local function unheld(op, removed)
  if op.a < MAX then
    op.a = op.a - removed
    return
  end
  local all, sum = redis.call('HGETALL', op.key), 0
  for j = 1, #all, 2 do
    if all[j] ~= 'n' then sum = addc(sum, tonumber(all[j + 1])) end
  end
  op.a = sum
end

-- normalize drops the leases that have lapsed.
function leases.normalize(op)
  local ids = redis.call('ZRANGEBYSCORE', op.lkey, '-inf', now)
  if #ids == 0 then return true end
  if redis.call('ZCARD', op.lkey) == #ids then
    gone(op)
    return true
  end
  local removed = 0
  for _, n in ipairs(slots(op.key, ids)) do removed = removed + n end
  redis.call('ZREMRANGEBYSCORE', op.lkey, '-inf', now)
  for s = 1, #ids, 1000 do
    redis.call('HDEL', op.key, unpack(ids, s, min(s + 999, #ids)))
  end
  unheld(op, removed)
  op.dirty = true
  return true
end

-- check walks the leases from the earliest expiry, in growing chunks,
-- until enough have lapsed.
function leases.check(op, n)
  if n > op.limit then return false, true, 0 end
  if op.a + n <= op.limit then return true, false, 0 end
  local used, from, size = op.a, 0, 16
  while true do
    local v = redis.call('ZRANGE', op.lkey, from, from + size - 1, 'WITHSCORES')
    if #v == 0 then return false, false, 0 end
    local ids = {}
    for j = 1, #v, 2 do ids[#ids + 1] = v[j] end
    local ns = slots(op.key, ids)
    for j = 1, #ids do
      used = used - ns[j]
      if used + n <= op.limit then return false, false, tonumber(v[2 * j]) - now end
    end
    from, size = from + size, size * 4
  end
end

function leases.take(op, n)
  redis.call('ZADD', op.lkey, now + op.window, op.ticket)
  redis.call('HSET', op.key, op.ticket, n)
  op.a, op.dirty, op.gone = addc(op.a, n), true, false
  return 0
end

function leases.give(op)
  local held = redis.call('HGET', op.key, op.ticket)
  if held then
    if redis.call('ZCARD', op.lkey) == 1 then return gone(op) end
    redis.call('ZREM', op.lkey, op.ticket)
    redis.call('HDEL', op.key, op.ticket)
    unheld(op, tonumber(held))
    op.dirty = true
  end
end

function leases.status(op)
  if op.gone then return op.limit, 0 end
  local reset = 0
  local last = redis.call('ZRANGE', op.lkey, -1, -1, 'WITHSCORES')
  if #last == 2 then reset = tonumber(last[2]) - now end
  return max(0, op.limit - op.a), reset
end

function leases.save(op, exp)
  local ms = ttl(exp)
  redis.call('HSET', op.key, 'n', op.a)
  redis.call('PEXPIRE', op.key, ms)
  redis.call('PEXPIRE', op.lkey, ms)
end

function leases.forget(op) redis.call('DEL', op.key, op.lkey) end

-- prime is the library's second function, for a Cluster slot being
-- migrated (see store/redis/moving.go): it makes KEYS[1], one of an op's
-- two keys (a concurrency rule key's, or a fixed window's and its holds),
-- exist if it does not, as ARGV[1] says: 'state' (a hash, n=0: no lease,
-- or a first-hit window not opened), 'counter' (an aligned window's count,
-- 0) or 'leases' (a sorted set of one placeholder lease or hold, long
-- lapsed, which the next call that writes it drops). Each means what no
-- key means. The key expires ARGV[3] µs (the rule's window, or what is
-- left of an aligned one) after now (ARGV[2]: µs, or -1 for the server's
-- TIME).
local function prime(keys, args)
  begin(keys, args)
  settime(tonumber(args[2]))
  local key, kind = keys[1], args[1]
  if redis.call('EXISTS', key) == 0 then
    if kind == 'state' then
      redis.call('HSET', key, 'n', 0)
    elseif kind == 'counter' then
      redis.call('SET', key, '0')
    else
      redis.call('ZADD', key, 0, '')
    end
    redis.call('PEXPIRE', key, ttl(now + tonumber(args[3])))
  end
  return 0
end
redis.register_function(FUNCTION .. '_prime', prime)
