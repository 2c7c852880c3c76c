-- acquire: grant the lock, or take or keep a place in the queue.
-- KEYS and ARGV by name, in the order lockd sends them.
local lock_key = KEYS[1]
local fence_key = KEYS[2]
local queue_key = KEYS[3]
local deadlines_key = KEYS[4]
local exp_key = KEYS[5]
gk.index = KEYS[6]
gk.counts = KEYS[7]
local mwait_key = KEYS[8]
local slot_key = KEYS[9]
local token = ARGV[1]
local ttl_ms = ARGV[2]
local has_owner = ARGV[3]
local owner = ARGV[4]
local uid = ARGV[5]
local wait_left = ARGV[6]
local instance = ARGV[7]
local channel = ARGV[8]
local key = ARGV[9]
local shared = ARGV[10] == '1'
local limit = ARGV[11]
local idem = ARGV[12]
local floor = ARGV[13] == '1'
local mark_ms = tonumber(ARGV[14])
local not_after = ARGV[15]
local now = clock()
if now > tonumber(not_after) then return {-2} end
local h = redis.sha1hex(token)

local function leave_queue()
  if uid == '' then return end
  if redis.call('ZREM', queue_key, uid) > 0 then
    redis.call('HDEL', deadlines_key, uid)
    if redis.call('ZCARD', queue_key) > 0 then
      redis.call('PUBLISH', channel, key)
    end
  end
end

-- not granted: a try-once acquire with mark_ms marks the key for the
-- retry hint + mark_ms, as acquire_multi does, so that a release of it
-- is published to a waiter that keeps no place in its queue
local function refused(hint, behind, ours)
  if uid == '' and mark_ms > 0 and
     redis.call('PTTL', mwait_key) < hint + mark_ms then
    redis.call('SET', mwait_key, '1', 'PX', hint + mark_ms)
  end
  return {0, hint, behind, ours}
end

-- the token, sealed with a key stream drawn from the Idempotency-Key:
-- Redis keeps only sha1hex(idem), so the token is not there in clear
local function seal(tok)
  local ks, j, out = '', 0, {}
  while #ks < #tok do
    j = j + 1
    ks = ks .. string.gsub(redis.sha1hex(j .. ':' .. idem), '..',
      function(c) return string.char(tonumber(c, 16)) end)
  end
  for i = 1, #tok do
    out[i] = string.char(bit.bxor(string.byte(tok, i), string.byte(ks, i)))
  end
  return table.concat(out)
end

-- reap the shared holders that expired
local cur = redis.call('HMGET', lock_key, 't', 'm', 'l')
local reaped = false
if cur[2] then
  reaped = reap(lock_key, exp_key, now)
  if reaped then cur = redis.call('HMGET', lock_key, 't', 'm', 'l') end
end

-- (1) the Idempotency-Key names a live grant: answer it again
local ih = false
if idem ~= '' then
  ih = redis.sha1hex(idem)
  local d = redis.call('HGET', lock_key, 'i:' .. ih)
  if d and cur[1] then
    if shared then return {-4} end
    local e = redis.call('HMGET', lock_key, 'f', 'n', 'x')
    local left = first_left(lock_key, exp_key, true, now)
    leave_queue()
    return {1, tonumber(e[1]), left, now + left, 0, 0,
            tonumber(e[2] or '1'), 1, seal(e[3])}
  elseif d and cur[2] then
    if not shared or cur[3] ~= limit then return {-4} end
    local r = rec_get(lock_key, d)
    local left = tonumber(redis.call('ZSCORE', exp_key, d)) - now
    if left < 1 then left = 1 end
    leave_queue()
    return {1, r[1], left, now + left, 1, tonumber(cur[3]), r[3], 1,
            seal(r[6])}
  end
end

-- the same token again: a retry whose reply was lost gets its grant
if tok_is(cur[1], h) then
  local e = redis.call('HMGET', lock_key, 'f', 'ttl', 'n')
  local left = first_left(lock_key, exp_key, true, now)
  leave_queue()
  return {1, tonumber(e[1]), tonumber(e[2]), now + left, 0, 0,
          tonumber(e[3] or '1'), 0}
end
if cur[2] then
  local r = rec_get(lock_key, h)
  if r then
    local left = tonumber(redis.call('ZSCORE', exp_key, h)) - now
    leave_queue()
    return {1, r[1], r[2], now + left, 1, tonumber(cur[3]), r[3], 0}
  end
end

-- (2) shared under another limit: at once, nothing changed
if shared and cur[2] and cur[3] ~= limit then return {-3} end

-- drop the dead places at the head, take or keep ours
local head = live_head(queue_key, deadlines_key, now)
if uid ~= '' then
  local left = tonumber(wait_left)
  if redis.call('HEXISTS', deadlines_key, uid) == 0 then
    queue_push(queue_key, uid)
    if not head then head = uid end
  end
  local v = string.format('%.0f', now + left)
  if shared then v = v .. ' s ' .. limit end
  redis.call('HSET', deadlines_key, uid, v)
  if redis.call('PTTL', queue_key) < left + grace then
    redis.call('PEXPIRE', queue_key, left + grace)
    redis.call('PEXPIRE', deadlines_key, left + grace)
  end
end
if reaped and head then redis.call('PUBLISH', channel, key) end

-- (3) what the holders alone allow
local nlimit = tonumber(limit)
local count = 0
if cur[2] then count = redis.call('ZCARD', exp_key) end
local allow
if cur[1] then
  allow = false
elseif not cur[2] then
  allow = true
else
  allow = shared and (nlimit == 0 or count < nlimit)
end
if not allow then
  return refused(first_left(lock_key, exp_key, cur[1], now), 0, 0)
end

-- (4) the queue: who goes first
local blocked = false
if uid == '' or not shared then
  blocked = head and head ~= uid
elseif head ~= uid then
  -- a shared waiter goes with the shared waiters ahead of it, if all of
  -- them fit under the limit; an exclusive one ahead stops it
  local pos = redis.call('ZRANK', queue_key, uid)
  local n = 0
  if not pos then
    blocked = true
  else
    for _, id in ipairs(redis.call('ZRANGE', queue_key, 0, pos - 1)) do
      local dl, l = place(redis.call('HGET', deadlines_key, id))
      if dl + grace >= now then
        if l ~= limit then
          blocked = true
          break
        end
        n = n + 1
      end
    end
  end
  if not blocked and nlimit > 0 and count + n >= nlimit then
    blocked = true
  end
end
if blocked then
  local dl = place(redis.call('HGET', deadlines_key, head))
  local hint = dl + grace - now
  if hint < 1 then hint = 1 end
  local ours = 0
  if string.sub(head, 1, string.len(instance)) == instance then
    ours = 1
  elseif hint > 200 then
    hint = 200
  end
  return refused(hint, 1, ours)
end

-- (5) grant
if uid ~= '' then
  redis.call('ZREM', queue_key, uid)
  redis.call('HDEL', deadlines_key, uid)
  if redis.call('ZCARD', queue_key) > 0 then
    redis.call('PUBLISH', channel, key)
  end
end
local f, p = fence_next(fence_key, slot_key, floor)
if not f then
  return redis.error_reply('ERR lockd fence counter exhausted')
end
fence_clear(fence_key, p)
local fs = string.format('%.0f', f)
local ttl = tonumber(ttl_ms)
-- the grant that makes the key held writes its member (after a takeover
-- in place of the expired holder's); a shared holder joining others
-- leaves it
if not cur[2] then index_put(key, fs, expired_free(p, key)) end
if not shared then
  if has_owner == '1' then
    redis.call('HSET', lock_key, 't', tok_t(h), 'f', fs, 'ttl', ttl_ms,
               'o', owner, 'a', now)
  else
    redis.call('HSET', lock_key, 't', tok_t(h), 'f', fs, 'ttl', ttl_ms,
               'a', now)
  end
  if ih then
    redis.call('HSET', lock_key, 'x', seal(token), 'i:' .. ih, tok_t(h))
  end
  excl_expire(lock_key, ttl)
  held_put(now + ttl)
  held_prune_some(f, key)
  return {1, f, ttl, now + ttl, 0, 0, 1, 0, gk.expired}
end
if not cur[2] then redis.call('HSET', lock_key, 'm', 's', 'l', limit) end
rec_put(lock_key, h, {f, ttl, 1, has_owner == '1' and owner,
                      ih, ih and seal(token), now})
if ih then redis.call('HSET', lock_key, 'i:' .. ih, h) end
redis.call('ZADD', exp_key, now + ttl, h)
held_put(now + ttl)
settle(lock_key, exp_key)
held_prune_some(f, key)
return {1, f, ttl, now + ttl, 1, nlimit, 1, 0, gk.expired}
