-- release: give back one hold (or all), tell the waiters at the last.
-- KEYS and ARGV by name, in the order lockd sends them.
local lock_key = KEYS[1]
local queue_key = KEYS[2]
local exp_key = KEYS[3]
local token = ARGV[1]
local all = ARGV[2] == '1'
local channel = ARGV[3]
local key = ARGV[4]
local h = redis.sha1hex(token)
local cur = redis.call('HMGET', lock_key, 't', 'n', 'm')
if cur[1] then
  if cur[1] ~= h then return {-1} end
  local n = tonumber(cur[2] or '1')
  if n > 1 and not all then
    redis.call('HSET', lock_key, 'n', n - 1)
    return {1, n - 1}
  end
  redis.call('DEL', lock_key)
  if redis.call('LLEN', queue_key) > 0 then
    redis.call('PUBLISH', channel, key)
  end
  return {1, 0}
end
if not cur[3] then return {0} end
local reaped = reap(lock_key, exp_key, clock())
local r = rec_get(lock_key, h)
local res
if not r then
  res = {-1}
  if redis.call('EXISTS', lock_key) == 0 then res = {0} end
elseif r[3] > 1 and not all then
  r[3] = r[3] - 1
  rec_put(lock_key, h, r)
  return {1, r[3]}
else
  rec_drop(lock_key, exp_key, h)
  settle(lock_key, exp_key)
  res = {1, 0}
  reaped = true
end
if reaped and redis.call('LLEN', queue_key) > 0 then
  redis.call('PUBLISH', channel, key)
end
return res
