-- renew: move the expiry of a lock the token holds.
-- KEYS and ARGV by name, in the order lockd sends them.
local lock_key = KEYS[1]
local token = ARGV[1]
local ttl_ms = ARGV[2]
local not_after = ARGV[3]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if now > tonumber(not_after) then return {-2} end
local cur = redis.call('HMGET', lock_key, 't', 'f', 'ttl')
if not cur[1] then return {0} end
if cur[1] ~= redis.sha1hex(token) then return {-1} end
local ttl = ttl_ms
if ttl == '0' then
  ttl = cur[3]
else
  redis.call('HSET', lock_key, 'ttl', ttl)
end
redis.call('PEXPIRE', lock_key, ttl)
return {1, tonumber(cur[2]), tonumber(ttl), now + tonumber(ttl)}
