-- Sliding-window counter for one request of several items, all-or-nothing,
-- in one EVALSHA: read every bucket, roll its windows forward, decide, and
-- write and expire it.
--
-- KEYS[i]  the bucket of item i (a hash: start, cur, prev, ts)
-- ARGV[1]  now: microseconds since the Unix epoch, on the caller's clock
-- ARGV[2+3(i-1) ..]  limit, period (microseconds), cost of item i
--
-- Returns one {decision, remaining, now} per item, as token_bucket.lua.
--
-- Windows are aligned to the Unix epoch; a request fits while
-- cur + cost + prev * (period - elapsed) / period <= limit, compared
-- exactly in integers (prev * (period - elapsed) <= room * period). now is
-- clamped to be no earlier than the time stored in the bucket.
local now0 = tonumber(ARGV[1])
local state = {}
local out = {}
local all = true
for i, key in ipairs(KEYS) do
  local a = 2 + (i - 1) * 3
  local limit, period, cost = tonumber(ARGV[a]), tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2])
  local s = state[key]
  if s == nil then
    local v = redis.call('HMGET', key, 'start', 'cur', 'prev', 'ts')
    s = {start = tonumber(v[1]), cur = tonumber(v[2]) or 0, prev = tonumber(v[3]) or 0,
         ts = tonumber(v[4]), period = period}
    state[key] = s
  end
  local now = now0
  if s.ts ~= nil and now < s.ts then
    now = s.ts
  end
  local start = now - now % period
  if s.start == nil or s.start == start then
    -- same window (or a new bucket)
  elseif s.start + period == start then
    s.prev, s.cur = s.cur, 0
  else
    s.prev, s.cur = 0, 0
  end
  s.start, s.ts = start, now
  local room = limit - s.cur - cost
  local left = period - (now - start)
  if room >= 0 and s.prev * left <= room * period then
    s.cur = s.cur + cost
    out[i] = {1, cost, now}
  else
    all = false
    out[i] = {0, 0, now}
  end
  out[i][4] = limit
  out[i][5] = left
end
for i, key in ipairs(KEYS) do
  local s = state[key]
  if not all and out[i][1] == 1 then
    s.cur = s.cur - out[i][2] -- give the charge back
    out[i][1] = 2
  end
  local weighted = math.ceil(s.prev * out[i][5] / s.period)
  out[i][2] = math.max(0, out[i][4] - s.cur - weighted)
  out[i][4], out[i][5] = nil, nil
end
for key, s in pairs(state) do
  redis.call('HSET', key, 'start', string.format('%d', s.start), 'cur', string.format('%d', s.cur),
    'prev', string.format('%d', s.prev), 'ts', string.format('%d', s.ts))
  -- Both counts have slid out two periods after the window started.
  redis.call('PEXPIRE', key, math.ceil((s.start + 2 * s.period - s.ts) / 1000) + 1)
end
return out
