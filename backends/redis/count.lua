-- count: the live holders (for /metrics), the sum of the seconds still
-- ahead in the counts (holders.lua's held_put()); the seconds passed go,
-- and batch members of the index are sampled for keys left free.
-- KEYS and ARGV by name, in the order lockd sends them.
gk.counts = KEYS[1]
gk.index = KEYS[2]
local batch = tonumber(ARGV[1])
local now = clock()
local all = redis.call('HGETALL', gk.counts)
local n, old = 0, {}
for i = 1, #all, 2 do
  if tonumber(all[i]) * 1000 > now then
    n = n + tonumber(all[i + 1])
  elseif #old < batch then
    old[#old + 1] = all[i]
  end
end
if old[1] then redis.call('HDEL', gk.counts, unpack(old)) end
held_prune(batch)
if n < 0 then n = 0 end
return n
