-- inspect: a lock's fence, time left and owner.
-- KEYS by name, in the order lockd sends them.
local lock_key = KEYS[1]
local cur = redis.call('HMGET', lock_key, 'f', 'o')
if not cur[1] then return {0} end
local pttl = redis.call('PTTL', lock_key)
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
return {1, tonumber(cur[1]), pttl, now + pttl, cur[2]}
