-- token_bucket: "tokens=4 frac=0 ts=...": whole tokens, the fraction of
-- the next one in 1/window units, and the time of the last refill (µs).
-- gcra: "tat=... frac=0 limit=...": the theoretical arrival time (µs), its
-- remainder in 1/limit µs, and the limit the remainder was counted under.
-- Both expire when the bucket is full again.

local bucket = texted({}, 'tokens=%d frac=%d ts=%d', '^tokens=(%-?%d+) frac=(%-?%d+) ts=(%-?%d+)$', 'a', 'b', 'c')
ALG.token_bucket = bucket

function bucket.normalize(op)
  local burst, w = op.burst, op.window
  if not op.live then
    op.a, op.b, op.c, op.live, op.dirty = burst, 0, now, true, true
  elseif now <= op.c then
    if op.a >= burst then op.a, op.b, op.dirty = burst, 0, true end
  else
    local el = now - op.c
    op.c, op.dirty = now, true
    if op.a >= burst then
      op.a, op.b = burst, 0
      return true
    end
    op.b = min(op.b, w - 1) -- the window may have shrunk
    if el >= ceildiv((burst - op.a) * w - op.b, op.limit) then
      op.a, op.b = burst, 0
      return true
    end
    local acc = op.b + el * op.limit
    local q = fdiv(acc, w)
    op.a, op.b = op.a + q, acc - q * w
  end
  return true
end

-- lag is how far the clock stepped back behind the last refill: refilling
-- resumes only once now passes it again.
local function lag(op) return max(0, op.c - now) end

function bucket.check(op, n)
  if n > op.burst then return false, true, 0 end
  if op.a >= n then return true, false, 0 end
  return false, false, lag(op) + ceildiv((n - op.a) * op.window - op.b, op.limit)
end

function bucket.take(op, n)
  op.a, op.dirty = max(op.a - n, op.burst - fdiv(MAX, op.window)), true
  return now
end

function bucket.give(op, n, stamp)
  if now - stamp < op.window then op.a, op.dirty = addc(op.a, n), true end
end

function bucket.status(op)
  local rem = min(max(0, op.a), op.burst)
  if op.a >= op.burst then return rem, 0 end
  return rem, lag(op) + ceildiv((op.burst - op.a) * op.window - op.b, op.limit)
end

local gcra = texted({}, 'tat=%d frac=%d limit=%d', '^tat=(%-?%d+) frac=(%-?%d+) limit=(%-?%d+)$', 'a', 'b', 'c')
ALG.gcra = gcra

-- Under another limit than c, the arrival time is rounded up to a whole µs.
function gcra.normalize(op)
  if not op.live or op.a < now then
    op.a, op.b, op.live, op.dirty = now, 0, true, true
  elseif op.c ~= op.limit and op.b ~= 0 then
    op.a, op.b, op.dirty = op.a + 1, 0, true
  end
  if op.c ~= op.limit then op.c, op.dirty = op.limit, true end
  return true
end

-- debt is how far the arrival time is ahead of now, in 1/limit µs.
local function debt(op)
  if op.a < now then return 0 end
  return (op.a - now) * op.limit + op.b
end

function gcra.check(op, n)
  if n > op.burst then return false, true, 0 end
  local over = debt(op) + (n - op.burst) * op.window
  if over <= 0 then return true, false, 0 end
  return false, false, ceildiv(over, op.limit)
end

function gcra.take(op, n)
  local m = min(n, fdiv(MAX, op.window) + op.burst)
  local d = min(debt(op) + m * op.window, MAX + op.burst * op.window)
  local q = fdiv(d, op.limit)
  op.a, op.b, op.dirty = now + q, d - q * op.limit, true
  return now
end

-- give moves the arrival time back by the lesser of the time the ticket
-- took at its limit and its units at the key's limit c (see algo.Give).
function gcra.give(op, n, stamp)
  if now - stamp >= op.window or op.a < now then return end
  local c = op.c
  if c <= 0 then c = op.limit end
  n = min(n, fdiv(MAX, op.window))
  local back = n * op.window
  if op.limit > c then back = fdiv(n * op.window, op.limit) * c end
  local d = max(0, (op.a - now) * c + op.b - back)
  local q = fdiv(d, c)
  op.a, op.b, op.dirty = now + q, d - q * c, true
end

function gcra.status(op)
  local d = debt(op)
  local x = op.burst * op.window - d
  local rem = 0
  if x > 0 then rem = fdiv(x, op.window) end
  return rem, ceildiv(d, op.limit)
end
