-- fixed_window: "n=7 start=... end=...": the units n counted in the window
-- [start, end) (µs), expiring with the window.

local fixed = texted({}, 'n=%d start=%d end=%d', '^n=(%-?%d+) start=(%-?%d+) end=(%-?%d+)$', 'b', 'a', 'c')
ALG.fixed_window = fixed

-- window returns the window [s, e) that opens at now, or nil. Calendar
-- windows (align day or month) come with the boundaries of the windows
-- before, at and after the caller's time: Lua cannot read zones.
local function window(op)
  if op.align == 'clock' then
    local s = fdiv(now, op.window) * op.window
    return s, s + op.window
  elseif op.bounds then
    local b = op.bounds
    for j = 1, 3 do
      if b[j] <= now and now < b[j + 1] then return b[j], b[j + 1] end
    end
    return nil
  end
  return now, now + op.window
end

function fixed.normalize(op)
  if op.live and now < op.c then return true end
  local s, e = window(op)
  if not s then return false end
  op.a, op.b, op.c, op.live, op.dirty = s, 0, e, true, true
  return true
end

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

function fixed.status(op)
  if op.b == 0 and op.align == 'first_hit' then return op.limit, 0 end
  return max(0, op.limit - op.b), op.c - now
end

-- A window with nothing counted means the same as no key.
function fixed.expiry(op)
  if op.b == 0 then return now end
  return op.c
end

-- A window keeps the TTL it was given when it opened: a charge in the same
-- window changes only the count (SET KEEPTTL, no new TTL to format).
local load, save = fixed.load, fixed.save
function fixed.load(op)
  load(op)
  op.opened = op.c
end
function fixed.save(op, exp)
  if op.exists and op.c == op.opened then exp = true end
  save(op, exp)
end
