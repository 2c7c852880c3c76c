-- holders: the helpers every script but cancel starts with (scripts.c
-- puts this text before each of them), and the per-key steps the
-- single-key and the multi-key scripts share, so both keep one layout.
-- A key held EXCLUSIVE is one hash: t = sha1hex(token), f = fence,
-- ttl = last TTL, [o = owner], [n = holds when > 1], [x = sealed token and
-- 'i:' .. sha1hex(idem) = t when granted with an Idempotency-Key], with a
-- PX expiry. A key held SHARED is the same hash with m = 's', l = limit
-- ('0': none), 'h:' .. digest = a holder's record and 'i:' .. sha1hex(idem)
-- = that holder's digest, beside a sorted set digest -> expiry (Redis's
-- unix ms); both keys expire with the holder that expires last.
if redis.replicate_commands then redis.replicate_commands() end
local function clock()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
-- a shared holder's record: {fence, last ttl, holds, owner or false,
-- idem digest or false, sealed token or false}
local function rec_get(lock_key, d)
  local v = redis.call('HGET', lock_key, 'h:' .. d)
  if not v then return nil end
  return cmsgpack.unpack(v)
end
local function rec_put(lock_key, d, r)
  redis.call('HSET', lock_key, 'h:' .. d, cmsgpack.pack(r))
end
local function rec_drop(lock_key, exp_key, d)
  local r = rec_get(lock_key, d)
  if r and r[5] then redis.call('HDEL', lock_key, 'i:' .. r[5]) end
  redis.call('HDEL', lock_key, 'h:' .. d)
  redis.call('ZREM', exp_key, d)
end
-- after the shared holders changed: the key is free when none is left,
-- else both keys expire with the last holder
local function settle(lock_key, exp_key)
  local last = redis.call('ZRANGE', exp_key, -1, -1, 'WITHSCORES')
  if not last[1] then
    redis.call('DEL', lock_key, exp_key)
    return
  end
  redis.call('PEXPIREAT', lock_key, last[2])
  redis.call('PEXPIREAT', exp_key, last[2])
end
-- drop the shared holders whose TTL passed by now; true if any went
local function reap(lock_key, exp_key, now)
  local gone = redis.call('ZRANGEBYSCORE', exp_key, '-inf', now)
  if not gone[1] then return false end
  for _, d in ipairs(gone) do rec_drop(lock_key, exp_key, d) end
  settle(lock_key, exp_key)
  return true
end
-- the time until the first holder's TTL passes (>= 1)
local function first_left(lock_key, exp_key, excl, now)
  local left
  if excl then
    left = redis.call('PTTL', lock_key)
  else
    local first = redis.call('ZRANGE', exp_key, 0, 0, 'WITHSCORES')
    left = first[2] and tonumber(first[2]) - now or 1
  end
  if left < 1 then left = 1 end
  return left
end
-- a place in a queue: 'deadline' (exclusive) or 'deadline s limit'
local function place(v)
  if not v then return 0, nil end
  local dl, l = string.match(v, '^(%d+) s (%d+)$')
  if dl then return tonumber(dl), l end
  return tonumber(v) or 0, nil
end
-- the queue's head once the dead places are dropped from it (nil: nobody
-- waits); a place is dead once its deadline and a grace passed: its lockd
-- would have cancelled it, so it is gone
local grace = 1000
local function live_head(queue_key, deadlines_key, now)
  local head = redis.call('LINDEX', queue_key, 0)
  while head do
    local dl = place(redis.call('HGET', deadlines_key, head))
    if dl + grace >= now then break end
    redis.call('LPOP', queue_key)
    redis.call('HDEL', deadlines_key, head)
    head = redis.call('LINDEX', queue_key, 0)
  end
  return head
end
-- someone to tell when the key may have become free: a queued waiter, or
-- a multi-key waiter, which keeps no place but marks the keys it found
-- held (acquire_multi.lua)
local function waited(queue_key, mwait_key)
  return redis.call('LLEN', queue_key) > 0 or
         redis.call('EXISTS', mwait_key) == 1
end
-- whether digest h holds the key: 1, 0 (nobody does) or -1 (others do)
local function holds(lock_key, exp_key, h, now)
  local cur = redis.call('HMGET', lock_key, 't', 'm')
  if cur[1] then
    if cur[1] == h then return 1 end
    return -1
  end
  if not cur[2] then return 0 end
  reap(lock_key, exp_key, now)
  if rec_get(lock_key, h) then return 1 end
  if redis.call('EXISTS', lock_key) == 0 then return 0 end
  return -1
end
-- renew h's hold: {1, fence, ttl, expires_at, mode, limit, holds}, {0}
-- free, {-1} another token, {-3} holds at holds_max (LOCK_HOLDS_MAX).
-- A TTL of '0' keeps the stored one.
local holds_max = 1000000
local function renew_one(lock_key, exp_key, h, ttl_ms, reenter, now)
  local cur = redis.call('HMGET', lock_key, 't', 'f', 'ttl', 'n', 'm', 'l')
  if cur[1] then
    if cur[1] ~= h then return {-1} end
    local n = tonumber(cur[4] or '1')
    if reenter then
      if n >= holds_max then return {-3} end
      n = n + 1
      redis.call('HSET', lock_key, 'n', n)
    end
    local ttl = ttl_ms
    if ttl == '0' then
      ttl = cur[3]
    else
      redis.call('HSET', lock_key, 'ttl', ttl)
    end
    redis.call('PEXPIRE', lock_key, ttl)
    return {1, tonumber(cur[2]), tonumber(ttl), now + tonumber(ttl), 0, 0, n}
  end
  if not cur[5] then return {0} end
  reap(lock_key, exp_key, now)
  local r = rec_get(lock_key, h)
  if not r then
    if redis.call('EXISTS', lock_key) == 0 then return {0} end
    return {-1}
  end
  if reenter then
    if r[3] >= holds_max then return {-3} end
    r[3] = r[3] + 1
  end
  if ttl_ms ~= '0' then r[2] = tonumber(ttl_ms) end
  rec_put(lock_key, h, r)
  redis.call('ZADD', exp_key, now + r[2], h)
  settle(lock_key, exp_key)
  return {1, r[1], r[2], now + r[2], 1, tonumber(cur[6]), r[3]}
end
-- give back one of h's holds (every one with all): {1, holds left}, {0}
-- free, {-1} another token; published with key when a holder went and
-- someone waits
local function release_one(lock_key, queue_key, exp_key, mwait_key, h, all,
                           channel, key)
  local cur = redis.call('HMGET', lock_key, 't', 'n', 'm')
  if cur[1] then
    if cur[1] ~= h then return {-1} end
    local n = tonumber(cur[2] or '1')
    if n > 1 and not all then
      redis.call('HSET', lock_key, 'n', n - 1)
      return {1, n - 1}
    end
    redis.call('DEL', lock_key)
    if waited(queue_key, mwait_key) then
      redis.call('PUBLISH', channel, key)
    end
    return {1, 0}
  end
  if not cur[3] then return {0} end
  local reaped = reap(lock_key, exp_key, clock())
  local r = rec_get(lock_key, h)
  local res
  if not r then
    res = {-1}
    if redis.call('EXISTS', lock_key) == 0 then res = {0} end
  elseif r[3] > 1 and not all then
    r[3] = r[3] - 1
    rec_put(lock_key, h, r)
    return {1, r[3]}
  else
    rec_drop(lock_key, exp_key, h)
    settle(lock_key, exp_key)
    res = {1, 0}
    reaped = true
  end
  if reaped and waited(queue_key, mwait_key) then
    redis.call('PUBLISH', channel, key)
  end
  return res
end
