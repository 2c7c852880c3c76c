-- acquire_multi: n keys EXCLUSIVE under one token, all of them or none.
-- KEYS: seven per lockd key, in the request's order (rk() names them),
-- then the index and the holders' counts.
-- ARGV by name, in the order lockd sends them; the n lockd keys (for
-- PUBLISH) come before the not-after time.
local token = ARGV[1]
local ttl_ms = ARGV[2]
local has_owner = ARGV[3] == '1'
local owner = ARGV[4]
local channel = ARGV[5]
local mark_ms = tonumber(ARGV[6])
local floor = ARGV[7] == '1'
local n = (#KEYS - 2) / 7
gk.index = KEYS[#KEYS - 1]
gk.counts = KEYS[#KEYS]
local not_after = ARGV[8 + n]
local now = clock()
if now > tonumber(not_after) then return {-2} end
local h = redis.sha1hex(token)

-- key i's Redis keys: 1 lock, 2 fence, 3 queue, 4 qdl, 5 exp, 6 mwait,
-- 7 its slot's fence counter
local function rk(i, j) return KEYS[(i - 1) * 7 + j] end

-- (1) each key as the single acquire finds it: expired shared holders
-- reaped, dead places dropped; held by a holder or by a queued waiter (a
-- multi-key acquire never goes before one), or ours already: a retry
-- whose reply was lost gets its grant again
local held, mine, retry = {}, {}, 0
for i = 1, n do
  local lock_key, exp_key = rk(i, 1), rk(i, 5)
  local cur = redis.call('HMGET', lock_key, 't', 'm')
  local reaped = false
  if cur[2] then
    reaped = reap(lock_key, exp_key, now)
    if reaped then cur = redis.call('HMGET', lock_key, 't', 'm') end
  end
  local head = live_head(rk(i, 3), rk(i, 4), now)
  if reaped and head then redis.call('PUBLISH', channel, ARGV[7 + i]) end
  if tok_is(cur[1], h) then
    mine[i] = true
  elseif cur[1] or cur[2] or head then
    held[#held + 1] = i
    if cur[1] or cur[2] then
      local left = first_left(lock_key, exp_key, cur[1], now)
      if retry == 0 or left < retry then retry = left end
    end
  end
end

-- (2) held: nothing granted. Each held key is marked, so that its release
-- or its queue's last cancel is published (release_one(), cancel.lua)
-- although this waiter keeps no place; its next try, at the retry hint
-- at the latest, comes before the mark goes and sets it again. A
-- mark_ms of 0 marks nothing.
if held[1] then
  local out = {0, retry}
  for _, i in ipairs(held) do
    local mk = rk(i, 6)
    if mark_ms > 0 and redis.call('PTTL', mk) < retry + mark_ms then
      redis.call('SET', mk, '1', 'PX', retry + mark_ms)
    end
    out[#out + 1] = i - 1
  end
  return out
end

-- (3) grant every key as the single acquire grants one. The fences are
-- drawn first: an exhausted counter must stop the grant before any write
-- but theirs (a slot counter raised by a grant that then does not happen
-- costs nothing: fences need only increase). Keys of one slot draw from
-- one slot counter, one after the other.
local fences, before = {}, {}
for i = 1, n do
  if not mine[i] then
    fences[i], before[i] = fence_next(rk(i, 2), rk(i, 7), floor)
    if not fences[i] then
      return redis.error_reply('ERR lockd fence counter exhausted')
    end
  end
end
local ttl = tonumber(ttl_ms)
local out = {1, ttl, now + ttl}
for i = 1, n do
  local lock_key = rk(i, 1)
  if mine[i] then
    out[3 + i] = tonumber(redis.call('HGET', lock_key, 'f'))
    local left = first_left(lock_key, nil, true, now)
    if now + left < out[3] then out[3] = now + left end
  else
    fence_clear(rk(i, 2), before[i])
    local ms, hi = expired_free(before[i], ARGV[7 + i])
    local f = fences[i]
    local fs = string.format('%.0f', f)
    if has_owner then
      redis.call('HSET', lock_key, 't', tok_t(h), 'f', fs, 'ttl', ttl_ms,
                 'o', owner, 'a', now)
    else
      redis.call('HSET', lock_key, 't', tok_t(h), 'f', fs, 'ttl', ttl_ms,
                 'a', now)
    end
    excl_expire(lock_key, ttl)
    held_put(now + ttl)
    index_put(ARGV[7 + i], fs, ms, hi)
    held_prune_some(f, ARGV[7 + i])
    out[3 + i] = f
  end
end
return out
