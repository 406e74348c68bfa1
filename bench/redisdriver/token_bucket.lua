-- Token bucket for one request of several items, all-or-nothing, in one
-- EVALSHA: read every bucket, refill it, decide, and write and expire it.
--
-- KEYS[i]  the bucket of item i (a hash: tokens, ts)
-- ARGV[1]  now: microseconds since the Unix epoch, on the caller's clock
-- ARGV[2+4(i-1) ..]  capacity, limit, period (microseconds), cost of item i
--
-- Returns one {decision, remaining, now} per item: decision 1 allowed,
-- 0 denied, 2 allowed by its bucket but refunded because another item was
-- denied; now is the time the bucket was decided at.
--
-- Callers' clocks differ, so now is clamped to be no earlier than the time
-- stored in the bucket: time never goes back and no bucket refills twice.
-- Tokens are kept as integers scaled by the period (token-microseconds):
-- refilling for e microseconds adds exactly e*limit, so the bucket decides
-- exactly, like quorate's integer state machine, instead of drifting by
-- floating-point rounding. Numbers stay below 2^53, where Lua's doubles are
-- exact integers (the driver checks capacity * period).
local now0 = tonumber(ARGV[1])
local state = {}
local out = {}
local all = true
for i, key in ipairs(KEYS) do
  local a = 2 + (i - 1) * 4
  local capacity, limit = tonumber(ARGV[a]), tonumber(ARGV[a + 1])
  local period, cost = tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3])
  local full = capacity * period
  local s = state[key]
  if s == nil then
    local v = redis.call('HMGET', key, 'tokens', 'ts')
    s = {tokens = tonumber(v[1]), ts = tonumber(v[2]), full = full, limit = limit}
    state[key] = s
  end
  local now = now0
  if s.ts ~= nil and now < s.ts then
    now = s.ts
  end
  if s.tokens == nil then
    s.tokens = full -- a new bucket starts full
  else
    s.tokens = math.min(full, s.tokens + (now - s.ts) * limit)
  end
  s.ts = now
  local need = cost * period
  if s.tokens >= need then
    s.tokens = s.tokens - need
    out[i] = {1, need, now}
  else
    all = false
    out[i] = {0, 0, now}
  end
end
for i, key in ipairs(KEYS) do
  local s = state[key]
  if not all and out[i][1] == 1 then
    s.tokens = s.tokens + out[i][2] -- give the charge back
    out[i][1] = 2
  end
  local period = tonumber(ARGV[2 + (i - 1) * 4 + 2])
  out[i][2] = math.floor(s.tokens / period)
end
for key, s in pairs(state) do
  redis.call('HSET', key, 'tokens', string.format('%d', s.tokens), 'ts', string.format('%d', s.ts))
  -- Expire when the bucket would be full again: from then on a missing
  -- key and a full bucket are the same.
  local ms = math.ceil((s.full - s.tokens) / s.limit / 1000) + 1
  redis.call('PEXPIRE', key, ms)
end
return out
