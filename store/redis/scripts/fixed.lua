-- fixed_window: the units counted in a window, as integers. A first-hit
-- window, here, is a hash in the rule key's own key, n the count and e the
-- window's end (µs): its start is the key's first hit, so the key cannot
-- name it. A clock- or calendar-aligned window (aligned.lua) is a counter
-- in a key that names the window; it counts, checks and gives back as a
-- first-hit window does, with the functions below. Both expire with their
-- window.
--
-- A change is written by the command that makes it (HINCRBY, INCRBY), so
-- a key keeps the TTL it was given when its window opened, however many
-- of a call's decisions charge it; a window's first charge gives it that
-- TTL.

local fixed = {window = true}
ALG.fixed_window = fixed

-- load reads the stored window: its count b and its end c.
function fixed.load(op)
  local k = op.key
  local st = ints[k]
  if st == nil then
    st = false
    -- A string here (the call's MGET read it) is an earlier build's
    -- text state: it counts as absent, and opening a window replaces it.
    if not cached[k] then
      local v = redis.call('HMGET', k, 'n', 'e')
      if v[1] and v[2] then st = {tonumber(v[1]), tonumber(v[2])} end
    end
    ints[k] = st
  end
  if st then
    op.b, op.c, op.a = st[1], st[2], st[2] - op.window
    op.live, op.exists = true, true
  end
  op.base = op.b
end

function fixed.normalize(op)
  if op.live and now < op.c then return true end
  op.a, op.b, op.c, op.live, op.dirty, op.opened = now, 0, now + op.window, true, true, true
  return true
end

-- check, take, give and expiry work on any fixed window: b units counted
-- in the window [a, c).
function fixed.check(op, n)
  if n > op.limit then return false, true, 0 end
  if op.b + n <= op.limit then return true, false, 0 end
  return false, false, op.c - now
end

function fixed.take(op, n)
  op.b, op.dirty = addc(op.b, n), true
  return op.a
end

function fixed.give(op, n, stamp)
  if stamp == op.a and now < op.c then op.b, op.dirty = max(0, op.b - n), true end
end

-- A window with nothing counted means the same as no key.
function fixed.expiry(op)
  if op.b == 0 then return now end
  return op.c
end

function fixed.status(op)
  if op.b == 0 then return op.limit, 0 end
  return max(0, op.limit - op.b), op.c - now
end

-- save writes what the decision changed, by the difference from what was
-- loaded; a window that opens gets its TTL (to its end, op.c).
function fixed.save(op)
  local k, d = op.key, op.b - op.base
  if op.opened then
    if cached[k] then redis.call('DEL', k); cached[k] = false end
    redis.call('HSET', k, 'n', op.b, 'e', op.c)
    redis.call('PEXPIRE', k, ttl(op.c))
    op.opened = false
  elseif d ~= 0 then
    redis.call('HINCRBY', k, 'n', d)
  end
  ints[k], op.base = {op.b, op.c}, op.b
end

function fixed.forget(op)
  redis.call('DEL', op.key)
  ints[op.key] = false
end
