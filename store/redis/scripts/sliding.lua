-- sliding_window: a hash {bucket, n, buckets, [i] = units}: the newest
-- sub-bucket's number (now / (window / buckets)), the units n counted in
-- the last `buckets` sub-buckets, and each sub-bucket's units under its
-- ring index i = number % buckets. It expires when the last units age out.

local sliding = {inplace = true}
ALG.sliding_window = sliding

function sliding.load(op)
  local v = redis.call('HMGET', op.key, 'bucket', 'n', 'buckets')
  op.ring, op.changed, op.k, op.full, op.clear = {}, {}, nil, nil, nil
  if v[1] then
    op.a, op.b, op.k = tonumber(v[1]), tonumber(v[2]), tonumber(v[3])
    op.live, op.exists = true, true
  end
end

-- ring returns sub-bucket i's units, read on first use; setring sets them.
local function ring(op, i)
  local v = op.ring[i]
  if v == nil then
    v = 0
    if not op.full then v = tonumber(redis.call('HGET', op.key, tostring(i))) or 0 end
    op.ring[i] = v
  end
  return v
end
local function setring(op, i, v)
  op.ring[i], op.changed[i], op.dirty = v, true, true
end
-- loadring reads every sub-bucket at once.
local function loadring(op)
  if op.full then return end
  local all = redis.call('HGETALL', op.key)
  for j = 1, #all, 2 do
    local i = tonumber(all[j])
    if i ~= nil and op.ring[i] == nil then op.ring[i] = tonumber(all[j + 1]) end
  end
  op.full = true
end
local function clear(op, cur)
  op.clear, op.full, op.ring = true, true, {}
  op.a, op.b, op.live, op.dirty = cur, 0, true, true
end

local function width(op) return op.window / op.buckets end

function sliding.normalize(op)
  local cur = fdiv(now, width(op))
  if not op.live or op.k ~= op.buckets or cur - op.a >= op.buckets then
    clear(op, cur)
  elseif cur > op.a then -- (a clock that stepped back stays put)
    for bk = op.a + 1, cur do
      local i = fmod(bk, op.buckets)
      op.b = op.b - ring(op, i)
      setring(op, i, 0)
    end
    op.a, op.dirty = cur, true
  end
  return true
end

-- check walks the sub-buckets from the oldest for the retry time.
function sliding.check(op, n)
  if n > op.limit then return false, true, 0 end
  if op.b + n <= op.limit then return true, false, 0 end
  loadring(op)
  local sum = op.b
  for bk = op.a - op.buckets + 1, op.a do
    sum = sum - ring(op, fmod(bk, op.buckets))
    if sum + n <= op.limit then return false, false, (bk + op.buckets) * width(op) - now end
  end
  return false, false, (op.a + op.buckets) * width(op) - now
end

function sliding.take(op, n)
  local i = fmod(op.a, op.buckets)
  setring(op, i, addc(ring(op, i), n))
  op.b = addc(op.b, n)
  return op.a
end

function sliding.give(op, n, stamp)
  if stamp <= op.a and op.a - stamp < op.buckets then
    local i = fmod(stamp, op.buckets)
    local d = min(n, ring(op, i))
    setring(op, i, ring(op, i) - d)
    op.b = op.b - d
  end
end

function sliding.status(op)
  local rem = max(0, op.limit - op.b)
  if op.b <= 0 then return rem, 0 end
  for bk = op.a, op.a - op.buckets + 1, -1 do
    if ring(op, fmod(bk, op.buckets)) ~= 0 then return rem, (bk + op.buckets) * width(op) - now end
  end
  return rem, 0
end

function sliding.save(op, exp)
  if op.clear and op.exists then redis.call('DEL', op.key) end
  local set = {'bucket', op.a, 'n', op.b, 'buckets', op.buckets}
  local del = {}
  for i in pairs(op.changed) do
    local v = op.ring[i]
    if v ~= 0 then
      set[#set + 1], set[#set + 2] = tostring(i), v
    elseif not op.clear then
      del[#del + 1] = tostring(i)
    end
  end
  redis.call('HSET', op.key, unpack(set))
  for s = 1, #del, 1000 do
    redis.call('HDEL', op.key, unpack(del, s, min(s + 999, #del)))
  end
  redis.call('PEXPIRE', op.key, ttl(exp))
end

function sliding.forget(op) redis.call('DEL', op.key) end
