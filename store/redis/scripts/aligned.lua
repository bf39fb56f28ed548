-- Clock- and calendar-aligned fixed windows: a bare counter in a key that
-- names the window's start in Unix ms ("...}:fixed:1733220000000"): GET
-- shows the count, PTTL the time to the window's end, and the next window
-- is another key. The caller names the key (it is one of the call's keys,
-- so Cluster routes it, and it is read with the call's others) and sends
-- the window's bounds: Lua cannot read time zones. A call whose clock is
-- in another window is a miss, sent again named at the call's reading. A
-- window counts, checks and gives back as any fixed window (fixed.lua).

local aligned = {window = true, check = fixed.check, take = fixed.take, give = fixed.give, expiry = fixed.expiry, forget = fixed.forget}

-- add adds n (text: n as the argument INCRBY takes) to key's count, gives
-- a window's first count its TTL (to the window's end, stop), and returns
-- the count. A later batch of the call reads the key as it left it (see
-- ints).
local function add(key, n, text, stop)
  local c = redis.call('INCRBY', key, text)
  if c == n then redis.call('PEXPIRE', key, ttl(stop)) end
  if fetched then ints[key] = c end
  return c
end

-- load reads the count of the window the key names, if now is in it
-- (op.a is -1 if not).
function aligned.load(op)
  if now < op.start or now >= op.stop then op.a = -1; return end
  op.a, op.c, op.live = op.start, op.stop, true
  local n = ints[op.key]
  if n == nil then
    n = tonumber(cached[op.key]) or false -- the call's MGET read it
    ints[op.key] = n
  end
  if n then op.b, op.exists = n, true end
  op.base = op.b
end

-- missed reports that the call's clock is not in the window the key
-- names.
function aligned.missed(op) return op.a < 0 end
function aligned.normalize(op) return op.a >= 0 end

function aligned.status(op) return max(0, op.limit - op.b), op.c - now end

-- save writes what the decision changed, by the difference from what was
-- loaded.
function aligned.save(op)
  local d = op.b - op.base
  if d ~= 0 then op.base = add(op.key, d, d, op.c) end
end

-- The common case runs in straight lines: a consume whose every rule is an
-- aligned window (the whole Envoy workload) comes as one argument,
-- "aligned now cost ops" and per op "limit start end shadow" (µs; shadow 0
-- or 1), such as "aligned -1 1 1 100 1733220000000000 1733220060000000
-- 0", with the ops' window keys. specs holds the heads read, across calls
-- (their windows change, so up to maxspecs of them), when the head uses
-- the server's time.
local specs, nspecs, maxspecs = {}, 0, 1024

-- spec returns the head text's batch, or nil if text is not an aligned
-- head.
local function spec(text)
  local s = specs[text]
  if s then return s end
  if string.sub(text, 1, 8) ~= 'aligned ' then return nil end
  local it = string.gmatch(text, '%-?%d+')
  local t, cost, n = tonumber(it()), it(), tonumber(it())
  if not n then error('floodgate: the batch head ' .. text .. ' is not "aligned now cost ops ..."') end
  -- The cost is passed to INCRBY as the text it came as: redis.call
  -- formats a number with "%.17g", at about 1,500 instructions.
  s = {now = t, cost = tonumber(cost), costtext = cost, n = n}
  if s.cost > MAX then s.cost, s.costtext = MAX, format('%d', MAX) end
  s.backtext = '-' .. s.costtext
  for j = 1, n do
    local limit, start, stop, shadow = tonumber(it()), tonumber(it()), tonumber(it()), it()
    if not shadow then error('floodgate: the batch head ' .. text .. ' lacks an op') end
    s[j] = {limit = limit, a = start, c = stop, shadow = shadow == '1'}
  end
  if t == -1 then
    if nspecs >= maxspecs then specs, nspecs = {}, 0 end
    specs[text], nspecs = s, nspecs + 1
  end
  return s
end

-- consume applies the batch whose head is s and whose keys start at
-- KEYS[k]: decide (apply.lua) written out for aligned windows, checking
-- each as fixed.check does. A window is charged (add) before it is
-- checked, and given back in the same call if the decision is denied or
-- the window had no room, so an admitted decision costs one command per
-- rule. The reply is -1 alone, a miss (see apply.lua), or per op x: 3
-- times the window's count before (at most its limit; a limit is at most
-- 2^51, so x is exact), plus 0 if it had room for the cost (and was
-- charged if the decision was admitted), 1 if not, 2 if it never has; or
-- -2 - x if the decision was denied (see store/redis/script.go).
local function consume(s, k)
  settime(s.now)
  local cost, n, m = s.cost, s.n, nout
  for j = 1, n do local op = s[j]
    if now < op.a or now >= op.c then
      out[m + 1], nout = -1, m + 1
      return
    end
  end
  local allowed = true
  for j = 1, n do local op = s[j]
    -- the count before the decision (a count is never negative)
    local before = max(0, add(KEYS[k + j - 1], cost, s.costtext, op.c) - cost)
    if before + cost <= op.limit then
      out[m + j] = 3 * before
    else
      if not op.shadow then allowed = false end
      out[m + j] = 3 * min(before, op.limit) + (cost > op.limit and 2 or 1)
    end
  end
  if allowed then
    for j = 1, n do
      if out[m + j] % 3 ~= 0 then add(KEYS[k + j - 1], -cost, s.backtext, s[j].c) end
    end
  else
    for j = 1, n do
      add(KEYS[k + j - 1], -cost, s.backtext, s[j].c)
      out[m + j] = -2 - out[m + j]
    end
  end
  nout = m + n
end
