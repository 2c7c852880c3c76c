-- release: give back one hold (or all), tell the waiters at the last.
-- KEYS and ARGV by name, in the order lockd sends them.
local lock_key = KEYS[1]
local queue_key = KEYS[2]
local exp_key = KEYS[3]
local mwait_key = KEYS[4]
gk.index = KEYS[5]
gk.counts = KEYS[6]
local fence_key = KEYS[7]
local token = ARGV[1]
local all = ARGV[2] == '1'
local channel = ARGV[3]
local key = ARGV[4]
return release_one(lock_key, queue_key, exp_key, mwait_key, fence_key,
                   redis.sha1hex(token), all, channel, key)
