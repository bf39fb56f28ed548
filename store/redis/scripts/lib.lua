-- floodgate: what every algorithm's script shares. The scripts are one
-- Redis Functions library, in the order lib, fixed, aligned, holds, bucket,
-- sliding, concurrency, args, apply (see apply.lua for the call): the
-- library is loaded once per node, and each call runs only a function:
-- the decisions' (apply.lua) or, on a migrating Cluster slot, prime
-- (concurrency.lua).
-- Each file ports its part of internal/algo.
--
-- Every quantity is an integer number of microseconds or units held in a
-- Lua number (a double), exact below 2^53, which rule validation keeps the
-- products under. Divisions go through fdiv, which corrects the rounded
-- quotient, so that they are exact.

local MAX = 9007199254740992 -- 2^53, algo.MaxUnits

-- The library functions the decisions call, as locals: reading a global
-- goes through the table Redis guards its globals with, at about 30 ns a
-- read here. A library has no globals while it loads, only while its
-- function runs, so begin binds them at the first call.
local floor, max, min, format, match, tonumber

-- fdiv is floor(a / b) for b > 0, exact for |a| < 2^53.
local function fdiv(a, b)
  local q = floor(a / b)
  local r = a - q * b
  if r < 0 then q = q - 1 elseif r >= b then q = q + 1 end
  return q
end
local function fmod(a, b) return a - fdiv(a, b) * b end
local function ceildiv(a, b)
  if a <= 0 then return 0 end
  return fdiv(a + b - 1, b)
end
local function addc(a, b)
  if a > MAX - b then return MAX end
  return a + b
end

-- now is the batch's time (µs): the caller's, or the server's TIME, read
-- once per call. slack (ms) lengthens TTLs when the caller supplies the
-- time: keys expire on the server's clock, which may run ahead of the
-- caller's (a test's fake clock).
-- KEYS and ARGV are the call's keys and arguments (a function is handed
-- them; the library keeps them here for the call).
local KEYS, ARGV = {}, {}

local now, slack, servernow = 0, 0, nil
local function settime(t)
  if t >= 0 then
    now, slack = t, 60000
    return
  end
  if not servernow then
    local tm = redis.call('TIME')
    servernow = tonumber(tm[1]) * 1000000 + tonumber(tm[2])
  end
  now, slack = servernow, 0
end

-- ttl is the relative expiry in ms (rounded up) of an instant exp in µs,
-- in decimal: redis.call formats a number argument with "%.17g", which
-- costs more than the SET it is for. TTLs repeat (a window, a
-- millisecond), so each is formatted once per call.
local ttltext = nil
local function ttl(exp)
  local ms = max(1, ceildiv(exp - now, 1000)) + slack
  if not ttltext then ttltext = {} end
  local t = ttltext[ms]
  if not t then
    t = format('%d', ms)
    ttltext[ms] = t
  end
  return t
end

-- Fixed windows, token buckets and GCRA keep three numbers (a, b, c) as a
-- string of named decimal fields, such as "tokens=4 frac=0 ts=...": a
-- string, unlike a hash, is read for every key of a call in one MGET and
-- written with its TTL in one SET. Each key is read once per call and
-- written at most once, at the end, however many of the call's batches
-- touch it (a global rule's key is in every one); batches see each other's
-- changes in order, exactly as if each were its own call.
local cached, pending = {}, {}

-- ints holds the call's integer states (fixed windows, see fixed.lua) by
-- key, as the call has left them: each is read once per call, and
-- written by the command that changes it when it changes.
local ints = {}

-- out is the call's reply and nout its length (see apply.lua). The table
-- outlives the call (Redis has read it when the next begins), and a
-- call's reply shorter than the last is cut to nout at its end.
local out, nout = {}, 0

-- miss adds the reply of a batch whose clock is not in the window an
-- aligned key names.
local function miss()
  out[nout + 1], out[nout + 2] = -1, now
  nout = nout + 2
end

-- fetched reports that the call's MGET has run (see prefetch).
local fetched = false

-- begin clears what a call keeps: the library's locals outlive calls.
-- The tables of the states read are made by prefetch, for the calls that
-- read states (making a table costs about 400 instructions).
local function begin(keys, args)
  if not floor then
    floor, max, min, format, match, tonumber = math.floor, math.max, math.min, string.format, string.match, _G.tonumber
  end
  KEYS, ARGV = keys, args
  servernow, ttltext, fetched, nout = nil, nil, false, 1 -- out[1]: see finish
end

-- finish puts the server's time, if the call read it, else -1, first in
-- the reply, and cuts out to the call's reply.
local function finish()
  out[1] = servernow or -1
  for j = nout + 1, #out do out[j] = nil end
  return out
end

-- prefetch reads every key of the call (in chunks that fit Lua's stack),
-- once, before the first batch that loads state (aligned consumes do not).
-- MGET answers nil for a key of another type (a sliding window's hash, a
-- lease set), which only string states are read through. A key an earlier
-- batch of the call changed is read as it left it: those changes are
-- written through (see ints).
local function prefetch()
  if fetched then return end
  fetched, cached, pending, ints = true, {}, {}, {}
  for s = 1, #KEYS, 1000 do
    local e = min(s + 999, #KEYS)
    local vs = redis.call('MGET', unpack(KEYS, s, e))
    for j = s, e do cached[KEYS[j]] = vs[j - s + 1] end
  end
end

-- flush writes the changed keys: text with a TTL of ms, or keeping the
-- TTL the key had before the call when ms is true, or false to delete.
local function flush()
  if not fetched then return end
  for key, ms in pairs(pending) do
    local v = cached[key]
    if not v then
      redis.call('DEL', key)
    elseif ms == true then
      redis.call('SET', key, v, 'KEEPTTL')
    else
      redis.call('SET', key, v, 'PX', ms)
    end
  end
end

-- texted gives kind, whose state is (a, b, c) held as text, the load,
-- save and forget that keep it in the call's cache. text writes the
-- fields named x, y and z, in that order, and pattern reads them back:
-- written out, not built, because building them cost every call several
-- microseconds.
local function texted(kind, text, pattern, x, y, z)
  function kind.load(op)
    local v = cached[op.key]
    if not v then return end
    local a, b, c = match(v, pattern)
    if not c then error('floodgate: ' .. op.key .. ' holds ' .. v) end
    op[x], op[y], op[z] = tonumber(a), tonumber(b), tonumber(c)
    op.live, op.exists = true, true
  end
  -- save with exp true keeps the key's TTL: the one an earlier decision
  -- of this call queued for it, if any, else the one it had before the
  -- call. (A key this call forgot is loaded as absent, and so is never
  -- saved keeping its TTL.)
  function kind.save(op, exp)
    local ms = true
    if exp ~= true then
      ms = ttl(exp)
    elseif pending[op.key] then
      ms = pending[op.key]
    end
    cached[op.key], pending[op.key] = format(text, op[x], op[y], op[z]), ms
  end
  function kind.forget(op)
    cached[op.key], pending[op.key] = false, false
  end
  return kind
end

-- ALG holds each algorithm's functions, by its configuration name (an
-- aligned fixed window's are aligned.lua's). Each takes an op: {key,
-- limit, window, burst, start, stop, a, b, c, live, exists, dirty, ...}
-- and works at now:
--   load(op) reads the state; normalize(op) brings it to now (false: now
--     is not in the aligned window the key names; missed(op) says so
--     without normalizing);
--   check(op, n) -> ok, never, retry; take(op, n) -> stamp;
--   give(op, n, stamp); status(op) -> remaining, reset;
--   expiry(op) -> the instant the state means no key (default now + reset);
--   save(op, exp) writes the state to expire at exp (µs), or with its TTL
--     when exp is true; forget(op) deletes it;
--   inplace: normalizing depends on the clock alone (algo.InPlace).
local ALG = {}
