-- count: the live holders (for /metrics), the sum of the seconds still
-- ahead in the counts (holders.lua's held_put()); then seconds passed go
-- and the index is sampled for keys left free, as grants do, with batch.
-- KEYS and ARGV by name, in the order lockd sends them.
gk.counts = KEYS[1]
gk.index = KEYS[2]
local batch = tonumber(ARGV[1])
local now = clock()
local all = redis.call('HGETALL', gk.counts)
local n = 0
for i = 1, #all, 2 do
  local s = tonumber(all[i])
  if s and s * 1000 > now then n = n + tonumber(all[i + 1]) end
end
held_prune(batch)
if n < 0 then n = 0 end
return n
