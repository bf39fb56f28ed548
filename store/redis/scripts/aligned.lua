-- aligned: the common case in straight lines. A consume whose every rule
-- is an aligned fixed window (the whole Envoy workload) comes as one
-- argument, "aligned now cost ops" and per op "limit start stop shadow"
-- (µs; shadow 0 or 1), such as "aligned -1 1 1 100 1733220000000000
-- 1733220060000000 0", with the ops' window keys. Each key is charged by
-- its INCRBY and, if that made the decision go over, given back by a
-- DECRBY in the same call: no other call sees the difference, and an
-- admitted decision (the common case) costs the server one command per
-- rule.

-- specs holds the heads read, across calls (their windows change, so up to
-- maxspecs of them), when the head uses the server's time.
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
  for j = 1, n do
    local limit, start, stop, shadow = tonumber(it()), tonumber(it()), tonumber(it()), it()
    if not shadow then error('floodgate: the batch head ' .. text .. ' lacks an op') end
    s[j] = {limit = limit, start = start, stop = stop, shadow = shadow == '1'}
  end
  if t == -1 then
    if nspecs >= maxspecs then specs, nspecs = {}, 0 end
    specs[text], nspecs = s, nspecs + 1
  end
  return s
end

-- charge adds cost to key's window counter, which is given a TTL to the
-- window's end (stop) by the charge that opens it, and returns the count.
-- A generic batch later in the call reads the key as the call left it:
-- from the call's MGET if it has not run yet, else from ints.
local function charge(key, s, stop)
  local c = redis.call('INCRBY', key, s.costtext)
  if c == s.cost then redis.call('PEXPIRE', key, ttl(stop)) end
  if fetched then ints[key] = c end
  return c
end

local function giveback(key, s)
  local c = redis.call('DECRBY', key, s.costtext)
  if fetched then ints[key] = c end
end

-- aligned applies the batch whose head is s and whose keys start at
-- KEYS[k], and adds its reply: per op the count its window held before
-- the decision, from which the caller works out the rest (now is the
-- call's, or the head's; see store/redis/script.go's expandAligned), or -1
-- alone, a miss (see apply.lua).
local function aligned(s, k)
  settime(s.now)
  local cost, n, m = s.cost, s.n, nout
  for j = 1, n do local r = s[j]
    if now < r.start or now >= r.stop then
      out[m + 1], nout = -1, m + 1
      return
    end
  end
  local allowed = true
  for j = 1, n do local r = s[j]
    -- A count is never negative (-1 is a miss), and the caller decides
    -- by the count it is sent, as the script does.
    local before = max(0, charge(KEYS[k + j - 1], s, r.stop) - cost)
    out[m + j] = before
    if before + cost > r.limit and not r.shadow then allowed = false end
  end
  for j = 1, n do
    if not allowed or out[m + j] + cost > s[j].limit then giveback(KEYS[k + j - 1], s) end
  end
  nout = m + n
end
