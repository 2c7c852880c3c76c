-- holders: the helpers acquire, renew, release and inspect start with
-- (scripts.c puts this text before each of them).
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
