-- floodgate: apply batches of rule operations, each in one atomic step.
--
-- This is a line-by-line port of internal/algo: every quantity is an integer
-- number of microseconds or units held in a Lua number (a double), exact
-- below 2^53, which rule validation keeps the products under. Divisions go
-- through fdiv, which corrects the rounded quotient, so that they are exact.
--
-- Each ARGV is one batch (one decision): little-endian doubles, read with
-- struct.unpack (numbers travel without being parsed from text, and a
-- double is what Lua holds anyway):
--   head: mode (0 consume, 1 peek, 2 record, 3 refund, 4 reset,
--         5 compensate: a refund that keeps no spent-ticket record),
--         now in µs or -1 to use the server's TIME, cost, number of ops,
--         number of keys, how long a refunded ticket is remembered (µs)
--   then per op: kind limit window burst align shadow, followed by
--         the boundaries b0 b1 b2 b3 of calendar windows (fixed windows
--         with align >= 2 only), buckets (sliding windows only) and
--         stamp (refund and compensate only)
--   then the ticket (lease id) in decimal, to the end of the string.
-- KEYS: each batch's keys, one batch after another: each op's state key
--       (a concurrency op has a second, its lease set), then, for refunds,
--       the spent-ticket key.
--
-- Several batches may share one call (coalescing); each is applied
-- atomically and independently of the others, exactly as alone, and one
-- batch's error is its own. The reply is one string of little-endian
-- doubles: for each batch, a count n, then either n numbers, its reply:
--   allowed, now, then per op: status (0 refused, 1 admitted, 2 admitted
--   and charged, 3 never: the cost exceeds the limit), retry, remaining,
--   reset, stamp;
--   or -1, now when a calendar window holding now was not among the
--   boundaries passed in (nothing has been changed; the caller retries);
-- or, when n < 0, nothing: the batch failed, and its error message, -1 - n
-- bytes long, follows all the numbers, after those of earlier failures.

local MAX = 9007199254740992 -- 2^53, algo.MaxUnits
local floor = math.floor

-- fdiv is floor(a / b) for b > 0, exact for |a| < 2^53.
local function fdiv(a, b)
  local q = floor(a / b)
  local r = a - q * b
  if r < 0 then
    q = q - 1
  elseif r >= b then
    q = q + 1
  end
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

-- servernow is the server's TIME in µs, read once per script call: the
-- batches of a coalesced call run at the same instant.
local servernow

local HEADFMT = '<dddddd'
local OPFMT = '<dddddd'
local BOUNDSFMT = '<dddd'
local ONEFMT = '<d'
-- Fixed windows, token buckets and GCRA keep their state (a, b, c) as three
-- little-endian 64-bit integers in a string.
local STATEFMT = '<i8i8i8'

-- The reply's numbers are gathered in R (rn of them) and packed into one
-- string at the end: one struct.pack per call, no string per batch. A
-- string costs the server far less than an array of integers, and the
-- client far less to read.
local R, rn = {}, 0

-- now is the batch's time (µs). slack (ms) lengthens TTLs when the caller
-- supplies the time: key expiry runs on the server's clock, which may run
-- ahead of the caller's (a test's fake clock), and a key must not vanish
-- before the caller's time reaches its expiry. A key that outlives its
-- expiry means the same as an absent one. Both are set by apply for each
-- batch; they live out here so that the helpers below are made once.
local now, slack

-- Numbers are passed to redis.call as they are: Redis 7 writes an integral
-- double below 2^53 as its exact decimal digits.
-- ttl is the relative expiry in ms (rounded up) of an instant exp in µs.
-- It is decimal text: a number argument of redis.call is formatted with
-- "%.17g", which costs more than the SET it is for. TTLs repeat (a window,
-- one millisecond), so each distinct one is formatted once per call.
local ttltext = {}
local function ttl(exp)
  local ms = ceildiv(exp - now, 1000)
  if ms < 1 then ms = 1 end
  ms = ms + slack
  local t = ttltext[ms]
  if not t then
    t = string.format('%d', ms)
    ttltext[ms] = t
  end
  return t
end

-- The state of fixed windows, token buckets and GCRA (one string per key)
-- goes through a cache that lives for one script call: each key is read
-- once and written at most once per call, however many of the call's
-- batches touch it (a global rule's key is in every one). Batches see each
-- other's writes in order, exactly as if each were its own call. sget
-- returns a key's value or nil; sset and sdel change it; flush writes the
-- changed keys back, each with the TTL of its last write (ms true: the
-- key's TTL as it is).
local cval, cms, cdirty = {}, {}, {}
local function sget(k)
  local v = cval[k]
  if v == nil then
    v = redis.call('GET', k) -- false when absent
    cval[k] = v
  end
  if v then return v end
  return nil
end
local function sset(k, v, ms)
  cval[k], cms[k], cdirty[k] = v, ms, true
end
local function sdel(k)
  cval[k], cdirty[k] = false, true
end
-- prefetch reads every key of the call with MGET (in chunks that fit
-- Lua's stack), before any batch runs: one command instead of a GET per
-- rule. MGET answers nil for a key of another type (a sliding window's
-- hash, a lease set), which only string states are read through.
local function prefetch()
  local n = #KEYS
  for s = 1, n, 1000 do
    local e = math.min(s + 999, n)
    local vs = redis.call('MGET', unpack(KEYS, s, e))
    for j = s, e do cval[KEYS[j]] = vs[j - s + 1] end
  end
end
-- flush writes each changed key once. A key whose final state is "absent"
-- is deleted; deleting one that no longer exists costs a DEL, which is
-- rarer than remembering what each key held.
local function flush()
  for k in pairs(cdirty) do
    local v = cval[k]
    if v and cms[k] == true then
      redis.call('SET', k, v, 'KEEPTTL')
    elseif v then
      redis.call('SET', k, v, 'PX', cms[k])
    else
      redis.call('DEL', k)
    end
  end
end

-- Per-op values of the fast path below, reused by every batch of a call
-- (no table per op): parameters (o*), state (s*) and answer (a*).
local okind, olimit, owindow, oburst, oalign, oshadow, obounds = {}, {}, {}, {}, {}, {}, {}
local sa, sb, sc, sexists, sdirty = {}, {}, {}, {}, {}
local aok, anever, aretry = {}, {}, {}

-- miss answers -1, now in place of the batch's reply begun at R[base + 1]:
-- the calendar window holding now was not among those passed in.
local function miss(base)
  R[base + 1], R[base + 2] = -1, now
  rn = base + 2
end

-- apply runs one batch, its numbers and ticket in blob, its keys
-- KEYS[kb + 1], KEYS[kb + 2], ..., and appends its reply to R. A coalesced
-- call runs several batches, each one atomic and independent of the others
-- (see the end of the script).
local function apply(kb, blob)
  local base = rn
  local mode, nowarg, cost, nops, _, keep, pos = struct.unpack(HEADFMT, blob)
  slack = 0
  if nowarg < 0 then
    if not servernow then
      local t = redis.call('TIME')
      servernow = tonumber(t[1]) * 1000000 + tonumber(t[2])
    end
    now = servernow
  else
    now = nowarg
    slack = 60000
  end

  -- Fast path ---------------------------------------------------------------
  -- Consumes and peeks whose rules are all fixed windows, token buckets or
  -- GCRA (most decisions) run here: the same arithmetic as the general code
  -- below, written out in one place. Making the general code's helper closures
  -- and per-rule tables costs the server more than these algorithms do. The
  -- conformance suite and the differential test run both paths.
  if mode <= 1 then
    local p, fast = pos, true
    for i = 1, nops do
      local kind, limit, window, burst, align, shadow
      kind, limit, window, burst, align, shadow, p = struct.unpack(OPFMT, blob, p)
      if kind == 2 or kind == 5 then
        fast = false
        break
      end
      okind[i], olimit[i], owindow[i], oburst[i], oalign[i], oshadow[i] = kind, limit, window, burst, align, shadow == 1
      if kind == 1 and align >= 2 then
        local b0, b1, b2, b3
        b0, b1, b2, b3, p = struct.unpack(BOUNDSFMT, blob, p)
        obounds[i] = {b0, b1, b2, b3}
      end
    end
    if fast then
      local allowed = true
      for i = 1, nops do
        local kind, limit, window, burst = okind[i], olimit[i], owindow[i], oburst[i]
        local a, b, c, exists, dirty = 0, 0, 0, false, false
        local v = sget(KEYS[kb + i])
        if v then
          a, b, c = struct.unpack(STATEFMT, v)
          exists = true
        end
        local ok, never, retry = false, false, 0
        if kind == 1 then
          if not exists or now >= c then
            local align, s, e = oalign[i], nil, nil
            if align == 1 then
              s = fdiv(now, window) * window
              e = s + window
            elseif align >= 2 then
              local bd = obounds[i]
              for j = 1, 3 do
                if bd[j] <= now and now < bd[j + 1] then
                  s, e = bd[j], bd[j + 1]
                  break
                end
              end
              if not s then return miss(base) end
            else
              s, e = now, now + window
            end
            a, b, c, dirty = s, 0, e, true
          end
          if cost > limit then
            never = true
          elseif b + cost <= limit then
            ok = true
          else
            retry = c - now
          end
        elseif kind == 3 then
          if not exists then
            a, b, c, dirty = burst, 0, now, true
          elseif now <= c then
            if a >= burst then a, b, dirty = burst, 0, true end
          else
            local el = now - c
            c, dirty = now, true
            if a >= burst then
              a, b = burst, 0
            else
              b = math.min(b, window - 1)
              if el >= ceildiv((burst - a) * window - b, limit) then
                a, b = burst, 0
              else
                local acc = b + el * limit
                local q = fdiv(acc, window)
                a, b = a + q, acc - q * window
              end
            end
          end
          if cost > burst then
            never = true
          elseif a >= cost then
            ok = true
          else
            retry = math.max(0, c - now) + ceildiv((cost - a) * window - b, limit)
          end
        else
          if not exists or a < now then
            a, b, dirty = now, 0, true
          elseif c ~= limit and b ~= 0 then
            a, b, dirty = a + 1, 0, true
          end
          if c ~= limit then c, dirty = limit, true end
          if cost > burst then
            never = true
          else
            local over = (a - now) * limit + b + cost * window - burst * window
            if over <= 0 then ok = true else retry = ceildiv(over, limit) end
          end
        end
        if not ok and not oshadow[i] then allowed = false end
        sa[i], sb[i], sc[i], sexists[i], sdirty[i], aok[i], anever[i], aretry[i] = a, b, c, exists, dirty, ok, never, retry
      end
      local charge = allowed and mode == 0
      R[rn + 1], R[rn + 2] = charge and 1 or 0, now
      rn = rn + 2
      for i = 1, nops do
        local kind, limit, window, burst = okind[i], olimit[i], owindow[i], oburst[i]
        local a, b, c, dirty, ok = sa[i], sb[i], sc[i], sdirty[i], aok[i]
        local status, stamp = 0, 0
        if ok then status = 1 elseif anever[i] then status = 3 end
        if charge and ok then
          status, dirty = 2, true
          local n = math.min(cost, MAX)
          if kind == 1 then
            b = addc(b, n)
            stamp = a
          elseif kind == 3 then
            a = a - n
            local lowest = burst - fdiv(MAX, window)
            if a < lowest then a = lowest end
            stamp = now
          else
            local debt = 0
            if a >= now then debt = (a - now) * limit + b end
            local m = math.min(n, fdiv(MAX, window) + burst)
            local d = math.min(debt + m * window, MAX + burst * window)
            local q = fdiv(d, limit)
            a, b = now + q, d - q * limit
            stamp = now
          end
        end
        local rem, reset, exp
        if kind == 1 then
          if b == 0 and oalign[i] == 0 then
            rem, reset = limit, 0
          else
            rem, reset = math.max(0, limit - b), c - now
          end
          if b == 0 then exp = now else exp = c end
        elseif kind == 3 then
          rem = math.min(math.max(0, a), burst)
          if a >= burst then
            reset = 0
          else
            reset = math.max(0, c - now) + ceildiv((burst - a) * window - b, limit)
          end
          exp = now + reset
        else
          local d = 0
          if a >= now then d = (a - now) * limit + b end
          local x = burst * window - d
          rem = 0
          if x > 0 then rem = fdiv(x, window) end
          reset = ceildiv(d, limit)
          exp = now + reset
        end
        -- Only a charge keeps the state as this decision saw it (see
        -- internal/algo): a peek or an uncharged rule writes nothing.
        if status ~= 2 then
          -- nothing to write
        elseif exp <= now then
          if sexists[i] then sdel(KEYS[kb + i]) end
        elseif dirty then
          sset(KEYS[kb + i], struct.pack(STATEFMT, a, b, c), ttl(exp))
        end
        R[rn + 1], R[rn + 2], R[rn + 3], R[rn + 4], R[rn + 5] = status, aretry[i], rem, reset, stamp
        rn = rn + 5
      end
      return
    end
  end

  -- General path ------------------------------------------------------------

  local ops = {}
  local ki = kb + 1
  local haverings, haveleases = false, false
  for i = 1, nops do
    local kind, limit, window, burst, align, shadow
    kind, limit, window, burst, align, shadow, pos = struct.unpack(OPFMT, blob, pos)
    -- Flags (live, exists, dirty, ok, never, took) start nil, meaning false.
    local op = {
      kind = kind, limit = limit, window = window, burst = burst, buckets = 0, align = align,
      shadow = shadow == 1, stamp = 0, key = KEYS[ki], a = 0, b = 0, c = 0,
      retry = 0, rem = 0, reset = 0, out = 0,
    }
    ki = ki + 1
    if kind == 1 and align >= 2 then
      local b0, b1, b2, b3
      b0, b1, b2, b3, pos = struct.unpack(BOUNDSFMT, blob, pos)
      op.bounds = {b0, b1, b2, b3}
    end
    if kind == 2 then op.buckets, pos = struct.unpack(ONEFMT, blob, pos) end
    if mode == 3 or mode == 5 then op.stamp, pos = struct.unpack(ONEFMT, blob, pos) end
    if kind == 5 then
      op.lkey = KEYS[ki]
      ki = ki + 1
      haveleases = true
    elseif kind == 2 then
      haverings = true
    end
    ops[i] = op
  end
  local ticket = string.sub(blob, pos)
  local spentkey = KEYS[ki]

  -- State access ------------------------------------------------------------

  local function load(op)
    local k = op.kind
    if k == 1 or k == 3 or k == 4 then
      local v = sget(op.key)
      if v then
        op.a, op.b, op.c = struct.unpack(STATEFMT, v)
        op.live, op.exists = true, true
      end
    elseif k == 2 then
      local v = redis.call('HMGET', op.key, 'a', 'b', 'k')
      op.ring, op.changed = {}, {}
      if v[1] then
        op.a, op.b, op.k = tonumber(v[1]), tonumber(v[2]), tonumber(v[3])
        op.live, op.exists = true, true
      end
    else
      local v = redis.call('HGET', op.key, 'n')
      if v then
        op.a, op.exists = tonumber(v), true
      end
      op.live = true
    end
  end

  -- Helpers of sliding windows and concurrency leases are made only for
  -- batches that have such rules: making closures is a good part of a short
  -- script's cost.
  local ring, setring, loadring, clearsliding, hmget, unheld
  if haverings or haveleases then
    -- Sliding-window ring buckets are hash fields named by their index.
    ring = function(op, i)
      local v = op.ring[i]
      if v == nil then
        if op.clear or op.full then
          v = 0
        else
          v = tonumber(redis.call('HGET', op.key, tostring(i))) or 0
        end
        op.ring[i] = v
      end
      return v
    end
    setring = function(op, i, v)
      op.ring[i] = v
      op.changed[i] = true
      op.dirty = true
    end
    loadring = function(op)
      if op.clear or op.full then return end
      local all = redis.call('HGETALL', op.key)
      for j = 1, #all, 2 do
        local i = tonumber(all[j])
        if i ~= nil and op.ring[i] == nil then op.ring[i] = tonumber(all[j + 1]) end
      end
      op.full = true
    end

    -- hmget reads fields of a hash in chunks that fit Lua's stack.
    hmget = function(key, fields)
      local out = {}
      for s = 1, #fields, 1000 do
        local e = math.min(s + 999, #fields)
        local part = redis.call('HMGET', key, unpack(fields, s, e))
        for j = 1, #part do out[#out + 1] = tonumber(part[j]) or 0 end
      end
      return out
    end

    -- unheld lowers a concurrency key's slots held by the leases just removed.
    -- A sum that saturated at MAX cannot be kept by subtraction: it is then
    -- summed again from the leases left.
    unheld = function(op, removed)
      if op.a < MAX then
        op.a = op.a - removed
        return
      end
      local all = redis.call('HGETALL', op.key)
      local sum = 0
      for j = 1, #all, 2 do
        if all[j] ~= 'n' then sum = addc(sum, tonumber(all[j + 1])) end
      end
      op.a = sum
    end

    clearsliding = function(op, cur)
      op.clear, op.full, op.ring = true, true, {}
      op.a, op.b, op.live, op.dirty = cur, 0, true, true
    end
  end

  -- Windows -----------------------------------------------------------------

  local function window(op)
    if op.align == 1 then
      local s = fdiv(now, op.window) * op.window
      return s, s + op.window
    elseif op.align >= 2 then
      local b = op.bounds
      for j = 1, 3 do
        if b[j] <= now and now < b[j + 1] then return b[j], b[j + 1] end
      end
      return nil
    end
    return now, now + op.window
  end

  -- Normalize ---------------------------------------------------------------

  local function normalize(op)
    local k = op.kind
    if k == 1 then
      if not op.live or now >= op.c then
        local s, e = window(op)
        if not s then return false end
        op.a, op.b, op.c, op.live, op.dirty = s, 0, e, true, true
      end
    elseif k == 2 then
      local width = op.window / op.buckets
      local cur = fdiv(now, width)
      if not op.live or op.k ~= op.buckets then
        clearsliding(op, cur)
      elseif cur <= op.a then
        -- same bucket, or the clock stepped back: stay put
      elseif cur - op.a >= op.buckets then
        clearsliding(op, cur)
      else
        for bk = op.a + 1, cur do
          local i = fmod(bk, op.buckets)
          op.b = op.b - ring(op, i)
          setring(op, i, 0)
        end
        op.a, op.dirty = cur, true
      end
    elseif k == 3 then
      local burst, w = op.burst, op.window
      if not op.live then
        op.a, op.b, op.c, op.live, op.dirty = burst, 0, now, true, true
        return true
      end
      if now <= op.c then
        if op.a >= burst then op.a, op.b, op.dirty = burst, 0, true end
        return true
      end
      local el = now - op.c
      op.c, op.dirty = now, true
      if op.a >= burst then
        op.a, op.b = burst, 0
        return true
      end
      op.b = math.min(op.b, w - 1)
      local need = (burst - op.a) * w - op.b
      if el >= ceildiv(need, op.limit) then
        op.a, op.b = burst, 0
        return true
      end
      local acc = op.b + el * op.limit
      local q = fdiv(acc, w)
      op.a, op.b = op.a + q, acc - q * w
    elseif k == 4 then
      -- c is the limit the fraction b was counted under: under another
      -- limit the arrival time is rounded up to a whole µs.
      if not op.live or op.a < now then
        op.a, op.b, op.live, op.dirty = now, 0, true, true
      elseif op.c ~= op.limit and op.b ~= 0 then
        op.a, op.b, op.dirty = op.a + 1, 0, true
      end
      if op.c ~= op.limit then op.c, op.dirty = op.limit, true end
    else
      local ids = redis.call('ZRANGEBYSCORE', op.lkey, '-inf', now)
      if #ids > 0 then
        local ns = hmget(op.key, ids)
        local removed = 0
        for j = 1, #ns do removed = removed + ns[j] end
        redis.call('ZREMRANGEBYSCORE', op.lkey, '-inf', now)
        for s = 1, #ids, 1000 do
          redis.call('HDEL', op.key, unpack(ids, s, math.min(s + 999, #ids)))
        end
        unheld(op, removed)
        op.dirty = true
      end
    end
    return true
  end

  -- Check, take, give, status ---------------------------------------------

  local function gcradebt(op)
    if op.a < now then return 0 end
    return (op.a - now) * op.limit + op.b
  end

  -- bucketlag is how far the clock stepped back behind a token bucket's last
  -- refill: refilling resumes only once now passes it again.
  local function bucketlag(op) return math.max(0, op.c - now) end

  local function check(op, n)
    local k = op.kind
    if k == 1 then
      if n > op.limit then return false, true, 0 end
      if op.b + n <= op.limit then return true, false, 0 end
      return false, false, op.c - now
    elseif k == 2 then
      if n > op.limit then return false, true, 0 end
      if op.b + n <= op.limit then return true, false, 0 end
      loadring(op)
      local width = op.window / op.buckets
      local sum = op.b
      for bk = op.a - op.buckets + 1, op.a do
        sum = sum - ring(op, fmod(bk, op.buckets))
        if sum + n <= op.limit then return false, false, (bk + op.buckets) * width - now end
      end
      return false, false, (op.a + op.buckets) * width - now
    elseif k == 3 then
      if n > op.burst then return false, true, 0 end
      if op.a >= n then return true, false, 0 end
      return false, false, bucketlag(op) + ceildiv((n - op.a) * op.window - op.b, op.limit)
    elseif k == 4 then
      if n > op.burst then return false, true, 0 end
      local over = gcradebt(op) + n * op.window - op.burst * op.window
      if over <= 0 then return true, false, 0 end
      return false, false, ceildiv(over, op.limit)
    else
      if n > op.limit then return false, true, 0 end
      if op.a + n <= op.limit then return true, false, 0 end
      -- Walk the leases from the earliest expiry, in growing chunks, until
      -- enough have lapsed.
      local used, from, size = op.a, 0, 16
      while true do
        local v = redis.call('ZRANGE', op.lkey, from, from + size - 1, 'WITHSCORES')
        if #v == 0 then return false, false, 0 end
        local ids = {}
        for j = 1, #v, 2 do ids[#ids + 1] = v[j] end
        local ns = hmget(op.key, ids)
        for j = 1, #ids do
          used = used - ns[j]
          if used + n <= op.limit then return false, false, tonumber(v[2 * j]) - now end
        end
        from, size = from + size, size * 4
      end
    end
  end

  local function take(op, n)
    local k = op.kind
    n = math.min(n, MAX) -- a larger charge means the same
    op.dirty = true
    if k == 1 then
      op.b = addc(op.b, n)
      return op.a
    elseif k == 2 then
      local i = fmod(op.a, op.buckets)
      setring(op, i, addc(ring(op, i), n))
      op.b = addc(op.b, n)
      return op.a
    elseif k == 3 then
      op.a = op.a - n
      local lowest = op.burst - fdiv(MAX, op.window)
      if op.a < lowest then op.a = lowest end
      return now
    elseif k == 4 then
      local m = math.min(n, fdiv(MAX, op.window) + op.burst)
      local d = math.min(gcradebt(op) + m * op.window, MAX + op.burst * op.window)
      local q = fdiv(d, op.limit)
      op.a, op.b = now + q, d - q * op.limit
      return now
    else
      redis.call('ZADD', op.lkey, now + op.window, ticket)
      redis.call('HSET', op.key, ticket, n)
      op.a = addc(op.a, n)
    end
    return 0
  end

  -- give works on the stored state, normalized only for sliding windows and
  -- leases: a refund does not bring a token bucket or a GCRA key to now
  -- under the ticket's limits (see algo.Give).
  local function give(op, n, stamp)
    local k = op.kind
    n = math.min(n, MAX)
    if k == 1 then
      if stamp == op.a and now < op.c then
        op.b, op.dirty = math.max(0, op.b - n), true
      end
    elseif k == 2 then
      if stamp <= op.a and op.a - stamp < op.buckets then
        local i = fmod(stamp, op.buckets)
        local d = math.min(n, ring(op, i))
        setring(op, i, ring(op, i) - d)
        op.b = op.b - d
      end
    elseif k == 3 then
      if now - stamp >= op.window then return end
      op.a, op.dirty = addc(op.a, n), true
    elseif k == 4 then
      if now - stamp >= op.window or op.a < now then return end
      local c = op.c
      if c <= 0 then c = op.limit end
      n = math.min(n, fdiv(MAX, op.window))
      local back = n * op.window
      if op.limit > c then back = fdiv(n * op.window, op.limit) * c end
      local d = math.max(0, (op.a - now) * c + op.b - back)
      local q = fdiv(d, c)
      op.a, op.b, op.dirty = now + q, d - q * c, true
    else
      local held = redis.call('HGET', op.key, ticket)
      if held then
        redis.call('ZREM', op.lkey, ticket)
        redis.call('HDEL', op.key, ticket)
        unheld(op, tonumber(held))
        op.dirty = true
      end
    end
  end

  local function status(op)
    local k = op.kind
    if k == 1 then
      if op.b == 0 and op.align == 0 then return op.limit, 0 end
      return math.max(0, op.limit - op.b), op.c - now
    elseif k == 2 then
      local rem = math.max(0, op.limit - op.b)
      if op.b <= 0 then return rem, 0 end
      local width = op.window / op.buckets
      for bk = op.a, op.a - op.buckets + 1, -1 do
        if ring(op, fmod(bk, op.buckets)) ~= 0 then return rem, (bk + op.buckets) * width - now end
      end
      return rem, 0
    elseif k == 3 then
      local rem = math.min(math.max(0, op.a), op.burst)
      if op.a >= op.burst then return rem, 0 end
      return rem, bucketlag(op) + ceildiv((op.burst - op.a) * op.window - op.b, op.limit)
    elseif k == 4 then
      local d = gcradebt(op)
      local x = op.burst * op.window - d
      local rem = 0
      if x > 0 then rem = fdiv(x, op.window) end
      return rem, ceildiv(d, op.limit)
    else
      local reset = 0
      local last = redis.call('ZRANGE', op.lkey, -1, -1, 'WITHSCORES')
      if #last == 2 then reset = tonumber(last[2]) - now end
      return math.max(0, op.limit - op.a), reset
    end
  end

  -- persist writes op's state back with the TTL algo.Expiry gives it, or
  -- deletes it when it means the same as an absent key. Every write sets the
  -- key's TTL in the same step.
  local function persist(op)
    local k = op.kind
    local exp
    if k == 1 then
      if op.b == 0 then exp = now else exp = op.c end
    else
      exp = now + op.reset
    end
    if exp <= now then
      if op.exists then
        if k == 5 then
          redis.call('DEL', op.key, op.lkey)
        elseif k == 2 then
          redis.call('DEL', op.key)
        else
          sdel(op.key)
        end
      end
      return
    end
    if not op.dirty then return end
    if k == 1 or k == 3 or k == 4 then
      sset(op.key, struct.pack(STATEFMT, op.a, op.b, op.c), ttl(exp))
    elseif k == 2 then
      if op.clear and op.exists then redis.call('DEL', op.key) end
      local set = {'a', op.a, 'b', op.b, 'k', op.buckets}
      local del = {}
      for i in pairs(op.changed) do
        local v = op.ring[i]
        if v ~= 0 then
          set[#set + 1] = tostring(i)
          set[#set + 1] = v
        elseif not op.clear then
          del[#del + 1] = tostring(i)
        end
      end
      redis.call('HSET', op.key, unpack(set))
      for s = 1, #del, 1000 do
        redis.call('HDEL', op.key, unpack(del, s, math.min(s + 999, #del)))
      end
      redis.call('PEXPIRE', op.key, ttl(exp))
    else
      local ms = ttl(exp)
      redis.call('HSET', op.key, 'n', op.a)
      redis.call('PEXPIRE', op.key, ms)
      redis.call('PEXPIRE', op.lkey, ms)
    end
  end

  -- The batch ------------------------------------------------------------------

  local function reply(allowed)
    R[rn + 1], R[rn + 2] = allowed and 1 or 0, now
    rn = rn + 2
    for i = 1, nops do
      local op = ops[i]
      local status = 0
      if op.took then status = 2 elseif op.ok then status = 1 elseif op.never then status = 3 end
      R[rn + 1], R[rn + 2], R[rn + 3], R[rn + 4], R[rn + 5] = status, op.retry, op.rem, op.reset, op.out
      rn = rn + 5
    end
  end

  if mode == 4 then
    for i = 1, nops do
      local op = ops[i]
      if op.kind == 5 then
        redis.call('DEL', op.key, op.lkey)
      elseif op.kind == 2 then
        redis.call('DEL', op.key)
      else
        sdel(op.key)
      end
      op.ok, op.rem = true, op.limit
    end
    return reply(false)
  end

  if mode == 3 or mode == 5 then
    if mode == 3 and redis.call('EXISTS', spentkey) == 1 then return reply(false) end
    for i = 1, nops do load(ops[i]) end
    for i = 1, nops do
      local op = ops[i]
      if op.exists and (op.kind == 2 or op.kind == 5) and not normalize(op) then return miss(base) end
    end
    for i = 1, nops do
      local op = ops[i]
      if op.exists then
        give(op, cost, op.stamp)
        if op.kind == 2 or op.kind == 5 then
          op.rem, op.reset = status(op)
          persist(op)
        else
          -- The given-back state is kept as it stands, with its TTL: the
          -- key can only reach "nothing held" sooner. The reply reports it
          -- brought to now.
          if op.dirty then sset(op.key, struct.pack(STATEFMT, op.a, op.b, op.c), true) end
          if op.kind == 1 and now >= op.c then
            op.rem, op.reset = op.limit, 0 -- the window has passed
          else
            normalize(op) -- cannot miss: no window is opened
            op.rem, op.reset = status(op)
          end
        end
      end
    end
    if mode == 3 then redis.call('SET', spentkey, '1', 'PX', ttl(now + keep)) end
    return reply(false)
  end

  for i = 1, nops do load(ops[i]) end
  for i = 1, nops do
    if not normalize(ops[i]) then return miss(base) end
  end

  local allowed = true
  if mode == 2 then
    for i = 1, nops do
      local op = ops[i]
      op.out = take(op, cost)
      op.ok, op.never, op.retry = check(op, 1)
      op.rem, op.reset = status(op)
      persist(op)
    end
    return reply(false)
  end

  for i = 1, nops do
    local op = ops[i]
    op.ok, op.never, op.retry = check(op, cost)
    if not op.ok and not op.shadow then allowed = false end
  end
  for i = 1, nops do
    local op = ops[i]
    if mode == 0 and allowed and op.ok then
      op.out = take(op, cost)
      op.took = true
    end
    op.rem, op.reset = status(op)
    -- Only a charge keeps a bucket's state as this decision saw it (see
    -- internal/algo); windows and leases normalize by the clock alone.
    if op.took or op.kind == 2 or op.kind == 5 then persist(op) end
  end
  return reply(allowed and mode == 0)
end

-- The call: every batch in ARGV, in order, each with its own keys. One
-- batch's error does not stop the others: it becomes that batch's reply.
prefetch()
local errs = {}
local kb = 0
for j = 1, #ARGV do
  local blob = ARGV[j]
  local at = rn + 1
  rn = at
  local ok, r = pcall(apply, kb, blob)
  if ok then
    R[at] = rn - at
  else
    local msg
    if type(r) == 'table' and r.err then msg = r.err else msg = 'ERR ' .. tostring(r) end
    R[at], rn = -1 - #msg, at
    errs[#errs + 1] = msg
  end
  kb = kb + struct.unpack(ONEFMT, blob, 33) -- the batch's number of keys
end
flush()
if rn <= 4000 then
  return struct.pack('<' .. string.rep('d', rn), unpack(R, 1, rn)) .. table.concat(errs)
end
local out = {}
for s = 1, rn, 4000 do
  local e = math.min(s + 3999, rn)
  out[#out + 1] = struct.pack('<' .. string.rep('d', e - s + 1), unpack(R, s, e))
end
return table.concat(out) .. table.concat(errs)
