-- floodgate: apply batches of rule operations, each in one atomic step.
--
-- ARGV holds one or more batches (decisions), one after another, in
-- decimal: mode (consume, peek, record, refund, reset, or compensate: a
-- refund that keeps no spent-ticket record), now (µs, or -1 for the
-- server's TIME), cost, ticket, the number of ops, how long a refunded
-- ticket is remembered (µs); then per op: algorithm, limit, window (µs),
-- burst, align, shadow (1 or 0), the algorithm's own arguments (see its
-- args) and, for refunds, the stamp. KEYS holds each batch's keys in the
-- same order: each op's state key (a concurrency op has a second, its lease
-- set), then, for a refund, its spent-ticket key.
--
-- The reply has one entry per batch, each applied atomically and
-- independently of the others, exactly as alone: {allowed, now, then per
-- op: status (0 refused, 1 admitted, 2 admitted and charged, 3 never: the
-- cost exceeds the limit), retry, remaining, reset, stamp}; or {-1, now}
-- when the calendar window holding now was not among the boundaries passed
-- in (nothing has changed; the caller retries); or the batch's error.

-- parse reads the batch at ARGV[i] and KEYS[k]; it returns the batch and
-- the indexes of the next.
local function parse(i, k)
  local b = {mode = ARGV[i], now = tonumber(ARGV[i + 1]), cost = math.min(tonumber(ARGV[i + 2]), MAX),
    ticket = ARGV[i + 3], keep = tonumber(ARGV[i + 5]), ops = {}}
  local refund = b.mode == 'refund' or b.mode == 'compensate'
  i = i + 6
  for j = 1, tonumber(ARGV[i - 2]) do
    local kind = ALG[ARGV[i]]
    if not kind then error('unknown algorithm ' .. tostring(ARGV[i])) end
    local op = {kind = kind, key = KEYS[k], limit = tonumber(ARGV[i + 1]), window = tonumber(ARGV[i + 2]),
      burst = tonumber(ARGV[i + 3]), align = ARGV[i + 4], shadow = ARGV[i + 5] == '1', ticket = b.ticket,
      a = 0, b = 0, c = 0, retry = 0, rem = 0, reset = 0, out = 0}
    k = k + 1
    if kind.keys == 2 then op.lkey, k = KEYS[k], k + 1 end
    i = kind.args(op, ARGV, i + 6)
    if refund then op.stamp, i = tonumber(ARGV[i]), i + 1 end
    b.ops[j] = op
  end
  if b.mode == 'refund' then b.spent, k = KEYS[k], k + 1 end
  return b, i, k
end

-- persist writes op's state back to expire when it means no key, or
-- forgets it if that is now.
local function persist(op)
  local exp = now + op.reset
  if op.kind.expiry then exp = op.kind.expiry(op) end
  if exp <= now then
    if op.exists then op.kind.forget(op) end
  elseif op.dirty then
    op.kind.save(op, exp)
  end
end

local function reply(b, allowed)
  local r = {allowed and 1 or 0, now}
  for _, op in ipairs(b.ops) do
    local status = 0
    if op.took then status = 2 elseif op.ok then status = 1 elseif op.never then status = 3 end
    r[#r + 1], r[#r + 2], r[#r + 3], r[#r + 4], r[#r + 5] = status, op.retry, op.rem, op.reset, op.out
  end
  return r
end

local function reset(b)
  for _, op in ipairs(b.ops) do
    op.kind.forget(op)
    op.ok, op.rem = true, op.limit
  end
  return reply(b, false)
end

-- refund gives back to the stored state (normalized only for in-place
-- kinds, see algo.Give), which keeps its TTL: it can only reach "nothing
-- held" sooner. The reply reports it brought to now.
local function refund(b)
  if b.mode == 'refund' and redis.call('EXISTS', b.spent) == 1 then return reply(b, false) end
  for _, op in ipairs(b.ops) do op.kind.load(op) end
  for _, op in ipairs(b.ops) do
    if op.exists and op.kind.inplace and not op.kind.normalize(op) then return {-1, now} end
  end
  for _, op in ipairs(b.ops) do
    if op.exists then
      op.kind.give(op, b.cost, op.stamp)
      if op.kind.inplace then
        op.rem, op.reset = op.kind.status(op)
        persist(op)
      else
        if op.dirty then op.kind.save(op, true) end
        if op.kind == ALG.fixed_window and now >= op.c then
          op.rem, op.reset = op.limit, 0 -- the window has passed
        else
          op.kind.normalize(op) -- cannot miss: no window is opened
          op.rem, op.reset = op.kind.status(op)
        end
      end
    end
  end
  if b.mode == 'refund' then redis.call('SET', b.spent, '1', 'PX', ttl(now + b.keep)) end
  return reply(b, false)
end

-- decide runs a consume, peek or record: every rule is brought to now and
-- checked; a consume charges every admitting rule if all enforced rules
-- admit, a record charges them all. Only a charge keeps a bucket's state
-- as this decision saw it (see internal/algo).
local function decide(b)
  for _, op in ipairs(b.ops) do
    op.kind.load(op)
    if not op.kind.normalize(op) then return {-1, now} end
  end
  local record, allowed = b.mode == 'record', true
  for _, op in ipairs(b.ops) do
    if record then
      op.out = op.kind.take(op, b.cost)
      op.ok, op.never, op.retry = op.kind.check(op, 1)
    else
      op.ok, op.never, op.retry = op.kind.check(op, b.cost)
      if not op.ok and not op.shadow then allowed = false end
    end
  end
  local charge = allowed and b.mode == 'consume'
  for _, op in ipairs(b.ops) do
    if charge and op.ok then op.out, op.took = op.kind.take(op, b.cost), true end
    op.rem, op.reset = op.kind.status(op)
    if record or op.took or op.kind.inplace then persist(op) end
  end
  return reply(b, charge)
end

local function run(b)
  settime(b.now)
  if b.mode == 'reset' then return reset(b) end
  if b.mode == 'refund' or b.mode == 'compensate' then return refund(b) end
  return decide(b)
end

-- The call: every batch, in order. One batch's error does not stop the
-- others: it becomes that batch's reply.
prefetch()
local out, i, k = {}, 1, 1
while i <= #ARGV do
  local b
  b, i, k = parse(i, k)
  local ok, r = pcall(run, b)
  if not ok then
    if type(r) == 'table' and r.err then r = r.err else r = 'ERR ' .. tostring(r) end
    r = {err = r}
  end
  out[#out + 1] = r
end
flush()
return out
