-- renew: move the expiry of a holder, one more hold with a re-entry.
-- KEYS and ARGV by name, in the order lockd sends them.
local lock_key = KEYS[1]
local exp_key = KEYS[2]
gk.counts = KEYS[3]
-- KEYS[4], the key's fence counter: a renew leaves it, if any, to its
-- expiry
gk.index = KEYS[5]
local token = ARGV[1]
local ttl_ms = ARGV[2]
local reenter = ARGV[3] == '1'
local not_after = ARGV[4]
local now = clock()
if now > tonumber(not_after) then return {-2} end
return renew_one(lock_key, exp_key, redis.sha1hex(token), ttl_ms, reenter,
                 now)
