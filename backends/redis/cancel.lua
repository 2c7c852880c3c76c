-- cancel: take a waiter out of a key's queue.
-- KEYS and ARGV by name, in the order lockd sends them.
local queue_key = KEYS[1]
local deadlines_key = KEYS[2]
local lock_key = KEYS[3]
local mwait_key = KEYS[4]
local uid = ARGV[1]
local channel = ARGV[2]
local key = ARGV[3]
local n = redis.call('ZREM', queue_key, uid)
redis.call('HDEL', deadlines_key, uid)
-- free, or shared (a shared waiter behind may now fit): tell the others,
-- and the multi-key waiters that found the key queued (their mark)
if n > 0 and redis.call('HEXISTS', lock_key, 't') == 0 and
   (redis.call('ZCARD', queue_key) > 0 or
    redis.call('EXISTS', mwait_key) == 1) then
  redis.call('PUBLISH', channel, key)
end
return n
