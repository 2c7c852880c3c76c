-- renew: move the expiry of a holder, one more hold with a re-entry.
-- KEYS and ARGV by name, in the order lockd sends them.
local lock_key = KEYS[1]
local exp_key = KEYS[2]
local token = ARGV[1]
local ttl_ms = ARGV[2]
local reenter = ARGV[3] == '1'
local not_after = ARGV[4]
local holds_max = 1000000
local now = clock()
if now > tonumber(not_after) then return {-2} end
local h = redis.sha1hex(token)
local cur = redis.call('HMGET', lock_key, 't', 'f', 'ttl', 'n', 'm', 'l')
if cur[1] then
  if cur[1] ~= h then return {-1} end
  local n = tonumber(cur[4] or '1')
  if reenter then
    if n >= holds_max then return {-3} end
    n = n + 1
    redis.call('HSET', lock_key, 'n', n)
  end
  local ttl = ttl_ms
  if ttl == '0' then
    ttl = cur[3]
  else
    redis.call('HSET', lock_key, 'ttl', ttl)
  end
  redis.call('PEXPIRE', lock_key, ttl)
  return {1, tonumber(cur[2]), tonumber(ttl), now + tonumber(ttl), 0, 0, n}
end
if not cur[5] then return {0} end
reap(lock_key, exp_key, now)
local r = rec_get(lock_key, h)
if not r then
  if redis.call('EXISTS', lock_key) == 0 then return {0} end
  return {-1}
end
if reenter then
  if r[3] >= holds_max then return {-3} end
  r[3] = r[3] + 1
end
if ttl_ms ~= '0' then r[2] = tonumber(ttl_ms) end
rec_put(lock_key, h, r)
redis.call('ZADD', exp_key, now + r[2], h)
settle(lock_key, exp_key)
return {1, r[1], r[2], now + r[2], 1, tonumber(cur[6]), r[3]}
