-- release: free a lock the token holds, tell the waiters.
-- KEYS and ARGV by name, in the order lockd sends them.
local lock_key = KEYS[1]
local queue_key = KEYS[2]
local token = ARGV[1]
local channel = ARGV[2]
local key = ARGV[3]
local cur = redis.call('HGET', lock_key, 't')
if not cur then return 0 end
if cur ~= redis.sha1hex(token) then return -1 end
redis.call('DEL', lock_key)
if redis.call('LLEN', queue_key) > 0 then
  redis.call('PUBLISH', channel, key)
end
return 1
