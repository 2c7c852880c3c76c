-- refence: write back a fence a majority of servers agreed on (redlock).
-- KEYS: three per lockd key, in the caller's order: lock, fence, and the
-- fence counter of its slot.
-- ARGV: the token, then the fence of each key.
-- Each key's counters become at least its fence, and a holder of the key
-- under the token (exclusive or shared) gets that fence; answers {the
-- number of keys the token holds}. One script: all keys or none.
local n = #KEYS / 3
local h = redis.sha1hex(ARGV[1])
local count = 0
for i = 1, n do
  local lock_key, fence_key = KEYS[3 * i - 2], KEYS[3 * i - 1]
  local slot_key = KEYS[3 * i]
  local f = tonumber(ARGV[1 + i])
  local fs = string.format('%.0f', f)
  if tonumber(redis.call('GET', slot_key) or '0') < f then
    redis.call('SET', slot_key, fs)
  end
  if tonumber(redis.call('GET', fence_key) or '0') < f then
    local left = redis.call('PTTL', lock_key)
    if left < 0 then left = 0 end
    fence_keep(fence_key, f, left + retain, true)
  end
  local cur = redis.call('HMGET', lock_key, 't', 'm')
  if tok_is(cur[1], h) then
    redis.call('HSET', lock_key, 'f', fs)
    count = count + 1
  elseif cur[2] then
    local r = rec_get(lock_key, h)
    if r then
      r[1] = f
      rec_put(lock_key, h, r)
      count = count + 1
    end
  end
end
return {count}
