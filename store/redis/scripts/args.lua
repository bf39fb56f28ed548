-- floodgate: reading a call's arguments (see apply.lua for their layout).

-- rule reads a rule: its algorithm, then name=value fields: limit, window
-- (µs), burst, buckets (sliding windows), align (fixed windows: first_hit,
-- the default, clock, day or month; an aligned window, see aligned.lua,
-- comes with start and end, the window its key names), shadow=1, holds=1
-- (a fixed window whose key keeps reservations' holds, see holds.lua) and
-- held=1 (the rule holds the units of the batch's reservation). Rules
-- repeat (one per limiter rule and window), so each is read once and
-- kept, across calls, up to maxrules of them.
local rules, nrules, maxrules = {}, 0, 4096
local function rule(text)
  local r = rules[text]
  if r then return r end
  local name, rest = match(text, '^(%S+)(.*)$')
  r = {kind = ALG[name], limit = 0, window = 0, burst = 0, buckets = 0, start = 0, stop = 0, shadow = false, holds = false, held = false}
  if not r.kind then error('floodgate: unknown algorithm in ' .. text) end
  for k, v in string.gmatch(rest, '(%w+)=(%S+)') do
    if k == 'align' then
      if v ~= 'first_hit' then r.kind = aligned end
    elseif k == 'shadow' or k == 'holds' or k == 'held' then
      r[k] = v == '1'
    elseif k == 'end' then
      r.stop = tonumber(v)
    else
      r[k] = tonumber(v)
    end
  end
  r.holds = r.holds or r.held
  if r.holds then
    r.kind = held[r.kind]
    if not r.kind then error('floodgate: only a fixed window holds reservations: ' .. text) end
  end
  if nrules >= maxrules then rules, nrules = {}, 0 end
  rules[text], nrules = r, nrules + 1
  return r
end

-- head reads a batch's head, "mode now cost ticket ops", such as
-- "consume -1 1 0 1": the mode, the time (µs, or -1 for the server's
-- TIME), the cost, the ticket and the number of ops, in one argument (each
-- argument costs the server about 2,000 instructions); a reservation's
-- (mode reserve, or its compensation) goes on with the units its held
-- rules hold and for how long (µs), such as "reserve -1 1 77 2 8000
-- 30000000". The heads that repeat (no ticket, the server's time) are read
-- once and kept, across calls, up to maxheads of them.
local heads, nheads, maxheads = {}, 0, 1024
local function head(text)
  local h = heads[text]
  if h then return h end
  local mode, t, cost, ticket, n, rest = match(text, '^(%a+) (%-?%d+) (%d+) (%d+) (%d+)(.*)$')
  local units, hold = 0, 0
  if rest and rest ~= '' then
    units, hold = match(rest, '^ (%d+) (%d+)$')
    units, hold = tonumber(units), tonumber(hold)
  end
  if not n or not hold then error('floodgate: the batch head ' .. text .. ' is not "mode now cost ticket ops [units hold]"') end
  h = {mode = mode, now = tonumber(t), cost = min(tonumber(cost), MAX), ticket = ticket, n = tonumber(n),
    units = min(units, MAX), hold = hold,
    stamped = mode == 'refund' or mode == 'compensate' or mode == 'settle' or mode == 'settlepart',
    spent = mode == 'refund' or (mode == 'settle' and ticket ~= '0')}
  if ticket == '0' and t == '-1' then
    if nheads >= maxheads then heads, nheads = {}, 0 end
    heads[text], nheads = h, nheads + 1
  end
  return h
end

-- parse reads the batch at ARGV[i] and KEYS[k]; it returns the batch and
-- the indexes of the next. The batch and op tables are the call's, reused
-- by each batch in turn (making tables is a good part of a script's cost),
-- so parse sets every field an op has (sliding.load sets a sliding
-- window's own).
local batch, pool = {ops = {}}, {}
local function parse(i, k)
  local b = batch
  local h = head(ARGV[i])
  b.mode, b.now, b.cost, b.ticket = h.mode, h.now, h.cost, h.ticket
  b.spent = false
  local stamped = h.stamped
  local n = h.n
  i = i + 1
  for j = 1, n do
    local r, op = rule(ARGV[i]), pool[j] or {}
    pool[j], b.ops[j] = op, op
    op.kind, op.key, op.lkey, op.ticket, op.stamp = r.kind, KEYS[k], false, b.ticket, 0
    op.limit, op.window, op.burst, op.buckets = r.limit, r.window, r.burst, r.buckets
    op.start, op.stop, op.shadow = r.start, r.stop, r.shadow
    op.a, op.b, op.c, op.live, op.exists, op.dirty = 0, 0, 0, false, false, false
    op.base, op.opened = 0, false
    op.ok, op.never, op.took, op.retry, op.rem, op.reset, op.out = false, false, false, 0, 0, 0, 0
    i, k = i + 1, k + 1
    if r.kind.keys == 2 then
      op.lkey, k = KEYS[k], k + 1
      if r.holds then op.held, op.units, op.hold = r.held and h.units > 0, h.units, h.hold end
    end
    if stamped then op.stamp, i = tonumber(ARGV[i]), i + 1 end
  end
  for j = n + 1, #b.ops do b.ops[j] = nil end
  if h.spent then b.spent, b.keep, k, i = KEYS[k], tonumber(ARGV[i]), k + 1, i + 1 end
  return b, i, k
end
