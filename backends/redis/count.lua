-- count: the live holders (for /metrics), and a few long-expired members
-- of the held set taken out, with their keys' index entries once free.
-- KEYS and ARGV by name, in the order lockd sends them.
local held_key = KEYS[1]
local index_key = KEYS[2]
local cut = tonumber(ARGV[1])
local stale_ms = tonumber(ARGV[2])
local batch = tonumber(ARGV[3])
local now = clock()
local n = redis.call('ZCOUNT', held_key, '(' .. now, '+inf')
local old = redis.call('ZRANGEBYSCORE', held_key, '-inf', now - stale_ms,
                       'LIMIT', 0, batch)
for _, m in ipairs(old) do
  redis.call('ZREM', held_key, m)
  local z = string.find(m, '\0', 1, true)
  local lock_key = m
  if z then lock_key = string.sub(m, 1, z - 1) end
  if redis.call('EXISTS', lock_key) == 0 then
    redis.call('ZREM', index_key, string.sub(lock_key, cut + 1, -2))
  end
end
return n
