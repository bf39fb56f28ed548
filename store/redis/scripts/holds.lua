-- Holds: the units that reservations hold on a fixed window's key (a rule
-- with holds=1), a sorted set beside its state (the op's second key,
-- "...}:holds"): one member per hold, "<ticket>:<units>:<n>", scored by
-- the instant (µs) it lapses, its reservation's hold time or its window's
-- end if sooner; n numbers the holds in the order they were taken (one
-- more than the set's highest), which orders those that lapse together. The key's count is its window's count plus the units of its
-- live holds; a lapsed hold counts for nothing, and the next call that
-- writes the set drops it. The set expires when its last hold lapses, so
-- a reservation nobody settles gives its units back with nothing but
-- Redis running.
--
-- Such a rule's kind is its window's (fixed or aligned) wrapped by
-- holding below, so that windows without holds run their own functions
-- unchanged. An op of it carries the set in op.lkey and, in a
-- reservation's batch, held (it holds the reservation's units), units,
-- hold (µs) and ticket. A call reads the set once per op (load), works on
-- what it read and writes the changes with the op's state (save), so a
-- later batch of a coalesced call reads the set as this one left it.

local holds = {}

-- units is the units a member holds, and seq its number.
local function units(member) return tonumber(match(member, '^%d+:(%d+)')) end
local function seq(member) return tonumber(match(member, ':(%d+)$')) or 0 end

-- load reads op's holds: op.hs the members and scores in the order they
-- lapse, op.first the index of the first live member (those before it
-- have lapsed), op.h the units held live and op.last when the last hold
-- lapses (0: none).
function holds.load(op)
  local v = redis.call('ZRANGE', op.lkey, 0, -1, 'WITHSCORES')
  local j, h = 1, 0
  while j < #v and tonumber(v[j + 1]) <= now do j = j + 2 end
  for i = j, #v, 2 do h = addc(h, units(v[i])) end
  op.hs, op.first, op.h, op.last, op.del, op.add = v, j, h, 0, false, false
  if #v > 0 then op.last = tonumber(v[#v]) end
end

-- add holds the op's units as its ticket until min(now + hold, the
-- window's end), unless that is now or the ticket holds already (a call
-- sent again after its connection broke), and returns the window's
-- start, the hold's stamp. The units are written with %d: concatenating a
-- number writes 1e+14.
local function add(op)
  local lapse = min(now + op.hold, op.c)
  if lapse <= now then return op.a end
  local v, n, prefix = op.hs, 0, op.ticket .. ':'
  for j = 1, #v, 2 do
    if j >= op.first and string.sub(v[j], 1, #prefix) == prefix then return op.a end
    n = max(n, seq(v[j]))
  end
  op.add, op.lapse, op.dirty = prefix .. format('%d:%d', op.units, n + 1), lapse, true
  op.h, op.last = addc(op.h, op.units), max(op.last, lapse)
  return op.a
end

-- drop ends the live hold at index j of op.hs.
local function drop(op, j)
  op.del, op.h, op.dirty = j, op.h - units(op.hs[j]), true
  return true
end

-- take ends the live hold of ticket (a decimal string), if there is one.
function holds.take(op, ticket)
  local v, prefix = op.hs, ticket .. ':'
  for j = op.first, #v, 2 do
    if string.sub(v[j], 1, #prefix) == prefix then return drop(op, j) end
  end
  return false
end

-- oldest ends the live hold that lapses first (of those that lapse
-- together, the first taken), if there is one.
function holds.oldest(op)
  local v, j = op.hs, op.first
  if j > #v then return false end
  for i = j + 2, #v, 2 do
    if v[i + 1] ~= v[j + 1] then break end
    if seq(v[i]) < seq(v[j]) then j = i end
  end
  return drop(op, j)
end

-- retry is the wait (µs) after which n units fit while the window's count
-- does: the live holds lapse one by one, in order.
local function retry(op, n)
  local v, used = op.hs, op.b + op.h
  for j = op.first, #v, 2 do
    if j ~= op.del then
      used = used - units(v[j])
      if used + n <= op.limit then return tonumber(v[j + 1]) - now end
    end
  end
  return op.c - now
end

-- save writes what the op changed, and drops the lapsed holds: a set left
-- empty is deleted, in one command, so that the call never touches a key
-- it has emptied (see concurrency.lua); a hold added sets the set's TTL
-- to when its last hold lapses.
local function save(op)
  local v, key = op.hs, op.lkey
  local lapsed = (op.first - 1) / 2
  local left = #v / 2 - lapsed - (op.del and 1 or 0) + (op.add and 1 or 0)
  if left == 0 then
    if #v > 0 then redis.call('DEL', key) end
  else
    if op.add then
      redis.call('ZADD', key, format('%d', op.lapse), op.add)
      redis.call('PEXPIRE', key, ttl(op.last))
    end
    if op.del then redis.call('ZREM', key, v[op.del]) end
    if lapsed > 0 then redis.call('ZREMRANGEBYSCORE', key, '-inf', format('%d', now)) end
  end
end

-- holding returns the kind of a fixed window of kind base (fixed or
-- aligned) that keeps holds: it counts them with its window's count (a
-- held op checks its units, and takes them as a hold), and reads, writes
-- and forgets them with its state. A key whose window holds nothing but
-- holds keeps its state, so that the window (a first-hit one's start)
-- stays the one the holds were taken in; its quota is whole again at the
-- window's end.
local function holding(base)
  local kind = {keys = 2, holds = true, window = true, normalize = base.normalize, missed = base.missed, give = base.give}
  function kind.load(op)
    base.load(op)
    holds.load(op)
    if #op.hs > 0 then op.exists = true end -- forgetting it deletes the set
  end
  function kind.check(op, n)
    if op.held then n = op.units end
    if n > op.limit then return false, true, 0 end
    if op.b + op.h + n <= op.limit then return true, false, 0 end
    if op.h == 0 or op.b + n > op.limit then return false, false, op.c - now end
    return false, false, retry(op, n)
  end
  function kind.take(op, n)
    if op.held then return add(op) end
    return base.take(op, n)
  end
  -- The quota is whole again when the window ends or, in a first-hit
  -- window that counts nothing, when the last hold lapses.
  function kind.status(op)
    if op.h == 0 then return base.status(op) end
    return max(0, op.limit - op.b - op.h), op.c - now
  end
  function kind.expiry(op)
    if op.h > 0 then return op.c end
    return base.expiry(op)
  end
  function kind.save(op, exp)
    base.save(op, exp)
    save(op)
  end
  function kind.forget(op)
    base.forget(op)
    redis.call('DEL', op.lkey)
  end
  return kind
end

-- held maps a window's kind to its kind with holds (see args.lua).
local held = {[fixed] = holding(fixed), [aligned] = holding(aligned)}
