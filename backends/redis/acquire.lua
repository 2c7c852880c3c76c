-- acquire: grant the lock, or take or keep a place in the queue.
-- KEYS and ARGV by name, in the order lockd sends them.
local lock_key = KEYS[1]
local fence_key = KEYS[2]
local queue_key = KEYS[3]
local deadlines_key = KEYS[4]
local token = ARGV[1]
local ttl_ms = ARGV[2]
local has_owner = ARGV[3]
local owner = ARGV[4]
local uid = ARGV[5]
local wait_left = ARGV[6]
local instance = ARGV[7]
local channel = ARGV[8]
local key = ARGV[9]
local not_after = ARGV[10]
if redis.replicate_commands then redis.replicate_commands() end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if now > tonumber(not_after) then return {-2} end
local grace = 1000
local head = redis.call('LINDEX', queue_key, 0)
while head do
  local dl = tonumber(redis.call('HGET', deadlines_key, head) or '0')
  if dl + grace >= now then break end
  redis.call('LPOP', queue_key)
  redis.call('HDEL', deadlines_key, head)
  head = redis.call('LINDEX', queue_key, 0)
end
if uid ~= '' then
  local left = tonumber(wait_left)
  if redis.call('HEXISTS', deadlines_key, uid) == 0 then
    redis.call('RPUSH', queue_key, uid)
    if not head then head = uid end
  end
  redis.call('HSET', deadlines_key, uid, string.format('%.0f', now + left))
  if redis.call('PTTL', queue_key) < left + grace then
    redis.call('PEXPIRE', queue_key, left + grace)
    redis.call('PEXPIRE', deadlines_key, left + grace)
  end
end
local h = redis.sha1hex(token)
local cur = redis.call('HMGET', lock_key, 't', 'f', 'ttl')
if cur[1] then
  local pttl = redis.call('PTTL', lock_key)
  if cur[1] == h then
    if uid ~= '' then
      redis.call('LREM', queue_key, 0, uid)
      redis.call('HDEL', deadlines_key, uid)
    end
    return {1, tonumber(cur[2]), tonumber(cur[3]), now + pttl}
  end
  return {0, pttl, 0, 0}
end
if head and head ~= uid then
  local dl = tonumber(redis.call('HGET', deadlines_key, head) or '0')
  local hint = dl + grace - now
  if hint < 1 then hint = 1 end
  local ours = 0
  if string.sub(head, 1, string.len(instance)) == instance then
    ours = 1
  elseif hint > 200 then
    hint = 200
  end
  return {0, hint, 1, ours}
end
if uid ~= '' then
  redis.call('LPOP', queue_key)
  redis.call('HDEL', deadlines_key, uid)
  if redis.call('LLEN', queue_key) > 0 then
    redis.call('PUBLISH', channel, key)
  end
end
local f = tonumber(redis.call('GET', fence_key) or '0')
if f >= 9007199254740991 then
  return redis.error_reply('ERR lockd fence counter exhausted')
end
f = redis.call('INCR', fence_key)
local fs = string.format('%.0f', f)
if has_owner == '1' then
  redis.call('HSET', lock_key, 't', h, 'f', fs, 'ttl', ttl_ms, 'o', owner)
else
  redis.call('HSET', lock_key, 't', h, 'f', fs, 'ttl', ttl_ms)
end
redis.call('PEXPIRE', lock_key, ttl_ms)
return {1, f, tonumber(ttl_ms), now + tonumber(ttl_ms)}
