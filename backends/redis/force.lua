-- force: an operator frees a key whatever its holders and hold counts.
-- KEYS and ARGV by name, in the order lockd sends them.
local lock_key = KEYS[1]
local exp_key = KEYS[2]
local queue_key = KEYS[3]
local mwait_key = KEYS[4]
gk.index = KEYS[5]
gk.counts = KEYS[6]
local fence_key = KEYS[7]
local channel = ARGV[1]
local key = ARGV[2]
local now = clock()
-- what goes, as inspect shows it; the expired are reaped, not counted
local out = look(lock_key, exp_key, now, 100)
local cur = redis.call('HMGET', lock_key, 't', 'm')
if cur[2] then reap(lock_key, exp_key, now) end
if not out then return {0} end
if cur[1] then
  held_drop(excl_expiry(lock_key))
else
  local es = redis.call('ZRANGE', exp_key, 0, -1, 'WITHSCORES')
  for i = 2, #es, 2 do held_drop(tonumber(es[i])) end
end
-- the next grant's fence is greater: its slot's counter stays
redis.call('DEL', lock_key, exp_key)
fence_drop(fence_key)
index_drop(key)
if waited(queue_key, mwait_key) then redis.call('PUBLISH', channel, key) end
return out
