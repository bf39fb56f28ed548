-- floodgate: apply batches of rule operations, each in one atomic step.
--
-- ARGV holds one or more batches (decisions), one after another: a head,
-- "mode now cost ticket ops" in one argument (mode consume, peek, record,
-- refund, reset, or compensate: a refund that keeps no spent-ticket record;
-- now in µs, or -1 for the server's TIME); then per op its rule, such as
-- "gcra limit=100 window=60000000 burst=20" (see args.lua), and for refunds
-- the stamp; a refund ends with how long (µs) its ticket is remembered
-- spent (algo.TicketLifetime). KEYS holds each batch's keys in the same
-- order: each op's state key (a concurrency op has a second, its lease
-- set), then, for a refund, its spent-ticket key. A refund of no ops
-- records its ticket spent and gives nothing back.
--
-- The reply is one flat array: the server's time (µs) if the call read
-- it, else -1; then batch after batch, each applied atomically and
-- independently of the others, exactly as alone: allowed and now, then per
-- op status, retry, remaining, reset and stamp (status 0 refused, 1
-- admitted, 2 admitted and charged, 3 never: the cost exceeds the limit;
-- a refund is "allowed" when its ticket was not spent before);
-- or -1 and now when now is not in the window an aligned fixed window's key
-- names (nothing has changed; the caller names the keys at now and
-- retries); or the batch's error, alone; an aligned consume's is its own
-- (see aligned.lua). The caller knows each batch's length from what it
-- sent. Integers, not text: Redis writes a reply's integers in C,
-- string.format costs about 0.3 µs a number. Each number still costs the
-- server about 800 instructions, and each table of a reply about 8,000,
-- more than the numbers in it: hence one array, and nothing the caller
-- can work out.

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

-- reply adds a batch's element (see above).
local function status(op)
  if op.took then return 2 elseif op.ok then return 1 elseif op.never then return 3 end
  return 0
end
local function reply(b, allowed)
  local ops, n = b.ops, nout
  out[n + 1], out[n + 2] = allowed and 1 or 0, now
  n = n + 2
  for j = 1, #ops do local op = ops[j]
    out[n + 1], out[n + 2], out[n + 3], out[n + 4], out[n + 5] = status(op), op.retry, op.rem, op.reset, op.out
    n = n + 5
  end
  nout = n
end

local function reset(b)
  for j = 1, #b.ops do local op = b.ops[j]
    op.kind.forget(op)
    op.ok, op.rem = true, op.limit
  end
  return reply(b, false)
end

-- refund gives back to the stored state (normalized only for in-place
-- kinds, see algo.Give), which keeps its TTL: it can only reach "nothing
-- held" sooner, and records a refund's ticket spent. The compensation of
-- a reservation ends the holds it took. The reply reports it brought to
-- now.
local function refund(b)
  if b.mode == 'refund' and redis.call('EXISTS', b.spent) == 1 then return reply(b, false) end
  for j = 1, #b.ops do
    local op = b.ops[j]
    op.kind.load(op)
  end
  for j = 1, #b.ops do local op = b.ops[j]
    if op.kind.missed and op.kind.missed(op) then return miss() end
    if op.exists and op.kind.inplace and not op.kind.normalize(op) then return miss() end
  end
  for j = 1, #b.ops do local op = b.ops[j]
    if op.kind.holds and op.held then
      holds.take(op, op.ticket) -- live: a lapsed one goes with the others
      persist(op)
      op.rem, op.reset = op.kind.status(op)
    elseif op.exists then
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
  return reply(b, true)
end

-- decide runs a consume, peek or record: every rule is brought to now and
-- checked; a consume charges every admitting rule if all enforced rules
-- admit, a record charges them all. Only a charge keeps a bucket's state
-- as this decision saw it (see internal/algo).
local function decide(b)
  for j = 1, #b.ops do local op = b.ops[j]
    op.kind.load(op)
    if not op.kind.normalize(op) then return miss() end
  end
  local record, allowed = b.mode == 'record', true
  for j = 1, #b.ops do local op = b.ops[j]
    if record then
      op.out = op.kind.take(op, b.cost)
      op.ok, op.never, op.retry = op.kind.check(op, 1)
    else
      op.ok, op.never, op.retry = op.kind.check(op, b.cost)
      if not op.ok and not op.shadow then allowed = false end
    end
  end
  local charge = allowed and (b.mode == 'consume' or b.mode == 'reserve')
  for j = 1, #b.ops do local op = b.ops[j]
    if charge and op.ok then op.out, op.took = op.kind.take(op, b.cost), true end
    op.rem, op.reset = op.kind.status(op)
    if record or op.took or op.kind.inplace then persist(op) end
  end
  return reply(b, charge)
end

-- settle ends a reservation's hold on each op's key and charges the units
-- used (the batch's cost) in its place, into the window named by the op's
-- stamp while it is the key's current one; a hold that has lapsed is
-- charged for all the same. A ticket is settled once (b.spent records
-- it; a settlepart is a part of a settle that recorded it, see
-- store/redis/moving.go). Without a ticket (0) it ends the oldest live
-- hold, whoever took it, and charges the current window. Only fixed
-- windows are charged. An op's status says whether a hold was found (1)
-- or not (0); the rest of its reply is a peek at 1.
local function settle(b)
  local once = b.mode == 'settle' and b.ticket ~= '0'
  if once and redis.call('EXISTS', b.spent) == 1 then return reply(b, false) end
  for j = 1, #b.ops do local op = b.ops[j]
    op.kind.load(op)
    if op.kind.missed and op.kind.missed(op) then return miss() end
  end
  for j = 1, #b.ops do local op = b.ops[j]
    if op.kind.window then
      local found = false
      if op.kind.holds then
        if b.ticket == '0' then found = holds.oldest(op) else found = holds.take(op, b.ticket) end
      end
      op.kind.normalize(op) -- cannot miss; opens a window only in memory
      -- With a ticket, the units are charged while the window the hold was
      -- taken in is the key's current one: one that opens now is, if the
      -- hold was taken now (the key was reset since). A charge writes even
      -- when nothing was used: a window left counting and holding nothing
      -- is then forgotten.
      local charge = b.ticket == '0' or op.stamp == op.a
      if charge then op.kind.take(op, b.cost) end
      if found or charge then persist(op) end
      local _
      op.ok, op.rem, op.reset = found, op.kind.status(op)
      _, _, op.retry = op.kind.check(op, 1)
    end
  end
  if once then redis.call('SET', b.spent, '1', 'PX', ttl(now + b.keep)) end
  return reply(b, true)
end

local function run(b)
  prefetch()
  settime(b.now)
  if b.mode == 'reset' then return reset(b) end
  if b.mode == 'refund' or b.mode == 'compensate' then return refund(b) end
  if b.mode == 'settle' or b.mode == 'settlepart' then return settle(b) end
  return decide(b)
end

-- call is the library's function: every batch, in order. One batch's
-- error does not stop the others: it becomes that batch's element, an
-- error reply such as "ERR ..." (Redis writes it into the array as an
-- error). Its name, FUNCTION, is the library's, which carries its version.
local function call(keys, args)
  begin(keys, args)
  local i, k = 1, 1
  while i <= #ARGV do
    local s, ok, err = spec(ARGV[i])
    if s then
      ok, err = pcall(consume, s, k)
      i, k = i + 1, k + s.n
    else
      local b
      b, i, k = parse(i, k)
      ok, err = pcall(run, b)
    end
    if not ok then
      if type(err) == 'table' and err.err then err = err.err else err = 'ERR ' .. tostring(err) end
      nout = nout + 1
      out[nout] = {err = (string.gsub(err, '\n', ' '))}
    end
  end
  flush()
  return finish()
end
redis.register_function(FUNCTION, call)
