-- count: the live holders (for /metrics), and a few long-expired members
-- of the held set taken out, with their keys' index entries once free.
-- KEYS and ARGV by name, in the order lockd sends them.
gk.held = KEYS[1]
gk.index = KEYS[2]
local cut = tonumber(ARGV[1])
local batch = tonumber(ARGV[2])
local now = clock()
local n = redis.call('ZCOUNT', gk.held, '(' .. now, '+inf')
held_prune(batch, cut)
return n
