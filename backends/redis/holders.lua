-- holders: the helpers every script but cancel starts with (scripts.c
-- puts this text before each of them, and once at the top of the library
-- of Redis 7 functions), and the per-key steps the single-key and the
-- multi-key scripts share, so both keep one layout.
-- A key held EXCLUSIVE is one hash: t = tok_t(sha1hex(token)), f = fence,
-- ttl = last TTL, [o = owner], [n = holds when > 1], [x = sealed token and
-- 'i:' .. sha1hex(idem) = t when granted with an Idempotency-Key], with a
-- PEXPIREAT expiry (excl_expire()). A key held SHARED is the same hash
-- with m = 's', l = limit
-- ('0': none), 'h:' .. digest = a holder's record and 'i:' .. sha1hex(idem)
-- = that holder's digest, beside a sorted set digest -> expiry (Redis's
-- unix ms); both keys expire with the holder that expires last. The grant
-- time (Redis's unix ms) is a in the hash (g when an older lockd granted
-- it: its key counter may have no expiry), or the record's 7th field.
-- Two structures for the whole prefix (redis.c): the index of the held
-- lockd keys (read in key order by list; a member is the key, NUL and the
-- fence of the grant that made it held; its buckets below), and counts,
-- the holders counted by the second they expire in (held_put()). A script
-- that changes holders sets gk's index and counts to its KEYS naming them
-- first; gk.expired collects the greatest fence of the holders reap()
-- found expired. A function of the library finds gk as the last call left
-- it: it sets every field first.
-- Constant arguments are strings: Redis 7.0 formats each number it is
-- passed with snprintf("%.17g"), a third of a microsecond each here.
local gk = {index = false, counts = false, expired = 0, now = 0}
local function clock()
  local t = redis.call('TIME')
  gk.now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  return gk.now
end
-- An exclusive holder's token as its hash keeps it (t): the first 20 hex
-- digits (80 bits) of the token's SHA-1, where an older lockd kept all
-- 40. Half the bytes let the hash fit Redis's next smaller allocation (64
-- bytes, not 80, for a listpack with fence, TTL and grant time), and 80
-- bits leave nothing to guess: lockd's tokens are 128 random bits, and
-- finding another token with the same 80 bits takes some 2^80 SHA-1s.
-- tok_is() takes either form.
local function tok_t(h)
  return string.sub(h, 1, 20)
end
local function tok_is(t, h)
  return t == tok_t(h) or t == h
end
-- Fences. A key's fence comes from its slot's counter (the
-- REDIS_BE_SLOT_FENCE key, shared by every key of the slot, so at most
-- 1,024 of them on one Redis and one per hash slot on a cluster: a
-- high-water mark at least every fence any key of the slot was granted),
-- so every fence of a key is greater than every earlier one of that key.
-- The key's last fence, which a takeover within `retain` ms of its
-- holder's expiry reports, is in its index member (index_put()); a key
-- has no counter of its own but one an older lockd wrote (which kept it
-- for ever, without an expiry, or its holder's TTL + retain) or redlock's
-- refence (a fence the servers agreed on): a grant takes such a counter
-- into the max and deletes it, since the slot's counter is past it then.
-- With floor (redlock), every fence is at least Redis's clock in whole
-- seconds, times a million, minus one: a server restarted without its
-- data cannot hand out a smaller fence than it did before, once a second
-- has passed (1.8e15 today, exact as a double below 2^53). Whole seconds,
-- so that servers whose counters agree grant the same fence within a
-- second (no write-back). Answers the fence (nil: exhausted, nothing
-- written) and the key counter's value before.
local retain = 60000
local fence_max = 9007199254740991
local function fence_next(fence_key, slot_key, floor)
  local p = tonumber(redis.call('GET', fence_key) or '0')
  local f
  if floor then
    f = tonumber(redis.call('GET', slot_key) or '0')
    if p > f then f = p end
    local t = redis.call('TIME')
    local us = tonumber(t[1]) * 1000000 - 1
    if us > f then f = us end
    if f >= fence_max then return nil, p end
    f = f + 1
    redis.call('SET', slot_key, string.format('%.0f', f))
    return f, p
  end
  -- one call in the common case, the slot's counter ahead of the key's
  f = redis.call('INCR', slot_key)
  if f <= p then f = p + 1 end
  if f > fence_max then
    redis.call('DECR', slot_key)
    return nil, p
  end
  if f == p + 1 then
    redis.call('SET', slot_key, string.format('%.0f', f))
  end
  return f, p
end
-- the key's last fence f, kept ms (a holder's TTL + retain); shared: or as
-- long as it was to stay (another holder's). Only refence writes one.
local function fence_keep(fence_key, f, ms, shared)
  if shared then
    local left = redis.call('PTTL', fence_key)
    if left > ms then ms = left end
  end
  redis.call('SET', fence_key, string.format('%.0f', f), 'PX', ms)
end
-- a grant drew fence f past the key's counter p (> 0): the counter goes
local function fence_clear(fence_key, p)
  if p > 0 then redis.call('DEL', fence_key) end
end
-- the key is free: its counter goes (one with an expiry is at most its
-- slot's; an older lockd's, without one, stays until the next grant)
local function fence_drop(fence_key)
  if redis.call('PTTL', fence_key) >= 0 then
    redis.call('DEL', fence_key)
  end
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
-- The index is cut into buckets of at most ix_max members, each a sorted
-- set (score 0) small enough for Redis's compact encoding, a listpack
-- (zset-max-listpack-entries, 128 by default): a member costs its bytes
-- and a few more, where one of a single large set costs a skip-list node
-- and a dict entry besides (about 90 bytes more). A bucket is named by
-- its hi, the least key past it: gk.index '#' hi holds the keys from the
-- hi before it (or the first) to its own, listed in order in the
-- directory gk.index '@' (score 0); gk.index itself holds the keys from
-- the last hi on (all of them while the directory is empty). A key's
-- members are in the bucket of the least hi > key: one read of the
-- directory, O(log buckets), with the commands list already reads with.
-- A key's members sort together, right after the key itself, for no key
-- holds a control character. A bucket past ix_max gives its lower half
-- to a new bucket named by the first key it keeps; one left with fewer
-- than ix_min members goes into the next one when both fit with ix_min to
-- spare, and an empty one goes. A member of a key longer than
-- zset-max-listpack-value (64 bytes by default) makes its bucket a skip
-- list (Redis never turns one back): correct, only bigger. The last
-- bucket expires with counts, the others with the directory (ix_expire()).
local ix_max = 120
local ix_min = 16
local ix_half = ix_max / 2
local function ix_dir()
  return gk.index .. '@'
end
-- the bucket named by hi (false: gk.index, the last)
local function ix_name(hi)
  if hi then return gk.index .. '#' .. hi end
  return gk.index
end
-- the hi of the bucket of key (false: the last), or of the bucket after
-- hi's with '(' .. hi
local function ix_hi_after(spec)
  return redis.call('ZRANGEBYLEX', ix_dir(), spec, '+', 'LIMIT', '0', '1')[1]
         or false
end
local function ix_hi(key)
  return ix_hi_after('(' .. key)
end
-- byte order (Lua's < follows the locale Redis set for SORT)
local function lex_lt(a, b)
  for i = 1, math.min(#a, #b) do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then return x < y end
  end
  return #a < #b
end
-- the index lives ms more (held_put(), once a minute at most): the last
-- bucket at once; the others, a call each, expire with the directory, so
-- only when it has less than ms left, and then for ix_ahead more: a walk
-- every ten minutes at most (Redis's time: 46 ms at 1 M keys held, 16.7 k
-- buckets, so about 5 ms at 100 k). A bucket made since copies the
-- directory's expiry.
local ix_ahead = 10 * retain
local function ix_expire(ms)
  redis.call('PEXPIRE', gk.index, ms)
  local d = ix_dir()
  if redis.call('PTTL', d) >= ms then return end
  local his = redis.call('ZRANGE', d, 0, -1)
  for _, hi in ipairs(his) do
    redis.call('PEXPIRE', ix_name(hi), ms + ix_ahead)
  end
  if his[1] then redis.call('PEXPIRE', d, ms + ix_ahead) end
end
-- a bucket or the directory that was just made expires with from
local function ix_expire_as(k, from)
  local ms = redis.call('PTTL', from)
  if ms > 0 then redis.call('PEXPIRE', k, ms) end
end
-- the part of an index member before its NUL: the key
local function ix_key(m)
  local z = string.find(m, '\0', 1, true)
  if z then return string.sub(m, 1, z - 1) end
  return m
end
-- members ms into bucket b, in one call
local function ix_add(b, ms)
  local args = {}
  for _, m in ipairs(ms) do
    args[#args + 1] = '0'
    args[#args + 1] = m
  end
  redis.call('ZADD', b, unpack(args))
end
-- key's members in bucket b, key NUL fence (more than one when an earlier
-- holder's stayed)
local function ix_members(b, key)
  return redis.call('ZRANGEBYLEX', b, '[' .. key, '[' .. key .. '\0\255')
end
-- bucket b grew past ix_max: the keys before its middle one move to a new
-- bucket named by that key
local function ix_split(b)
  local k = ix_key(redis.call('ZRANGE', b, ix_half, ix_half)[1])
  local ms = redis.call('ZRANGEBYLEX', b, '-', '(' .. k)
  if not ms[1] then return end
  local nb = ix_name(k)
  ix_add(nb, ms)
  redis.call('ZREM', b, unpack(ms))
  local d = ix_dir()
  if redis.call('ZADD', d, '0', k) == 1 and redis.call('ZCARD', d) == 1 then
    ix_expire_as(d, b)
  end
  ix_expire_as(nb, d)
end
-- bucket b (named hi) may have gone (Redis drops an emptied set): its
-- name goes from the directory then
local function ix_gone(b, hi)
  if hi and redis.call('EXISTS', b) == 0 then
    redis.call('ZREM', ix_dir(), hi)
  end
end
-- members went from bucket b (named hi): an empty bucket goes, a small
-- one joins the next when both fit with ix_min to spare (so that keys
-- leaving in order gather in the buckets ahead). Looked at about
-- every fourth time (check: the fence plus the key's last byte is a
-- multiple of four, or the fence is not known): Redis drops an emptied
-- set by itself, and a hi left in the directory meanwhile routes no key
-- but to a bucket a grant makes again (or list drops it)
local function ix_removed(b, hi, check)
  if not hi or not check then return end
  local n = redis.call('ZCARD', b)
  if n >= ix_min then return end
  if n > 0 then
    local nb = ix_name(ix_hi_after('(' .. hi))
    local nn = redis.call('ZCARD', nb)
    if nn + n > ix_max - ix_min then return end
    ix_add(nb, redis.call('ZRANGE', b, 0, -1))
    if nn == 0 then ix_expire_as(nb, b) end
    redis.call('DEL', b)
  end
  redis.call('ZREM', ix_dir(), hi)
end
-- The holders are counted by the second their TTL passes in: gk.counts is
-- a hash, field = that second (the expiry in Redis's unix ms, divided by
-- 1000 and rounded up), value = how many holders expire in it. The count
-- is the sum of the seconds still ahead (count.lua): a holder counts
-- until the second it expires in has passed, at most a second past its
-- expiry, and an expiry by Redis's clock needs no call. A grant adds one
-- to its second, a renew moves one from the holder's second before
-- (exclusive: excl_expiry(); shared: its score) to the new one, a release
-- or reap takes one from a second still ahead. Seconds passed are
-- dropped a few at a time (held_prune()). The hash and the index stay
-- retain ms beyond the expiry of a second's first holder (a grant or renew
-- that makes the second moves that on, by retain more, so once a minute
-- at most), so beyond each holder's by retain less a second, and then go:
-- on a cluster they are per slot tag, next to the lock, and no other
-- script of that tag might come to take out what is left (scripts clock()
-- first)
local function held_sec(expires)
  return math.ceil(expires / 1000)
end
-- one holder less in the second of expires (a time, or nil or 0:
-- unknown) while that second is ahead of gk.now (a second passed may be
-- gone: it is not counted); a second left with none goes, and the hash
-- with its last one (a cluster's tag, the one key it had released)
local function held_drop(expires)
  if not gk.counts or not expires or expires <= 0 then return end
  local s = held_sec(expires)
  if s * 1000 > gk.now and
     redis.call('HINCRBY', gk.counts, s, '-1') == 0 then
    redis.call('HDEL', gk.counts, s)
  end
end
-- a holder expires at expires, before at before (nil: a new holder)
local function held_put(expires, before)
  if not gk.counts then return end
  local s = held_sec(expires)
  if before and before > 0 and held_sec(before) == s then return end
  held_drop(before)
  -- only a second's first holder looks at the expiry: the later ones of
  -- that second expire within a second of it, inside its retain
  if redis.call('HINCRBY', gk.counts, s, '1') > 1 then return end
  local ms = expires - gk.now + retain
  if redis.call('PTTL', gk.counts) < ms then
    redis.call('PEXPIRE', gk.counts, ms + retain)
    if gk.index then ix_expire(ms + retain) end
  end
end
-- An exclusive holder's expiry (0: none), by gk.now and PTTL: exact, for
-- every grant and renew sets it with PEXPIREAT at gk.now + TTL, but for
-- the time between TIME and PTTL (Redis 5 and 6 have no PEXPIRETIME),
-- which may end a millisecond later: then, once in a thousand renews,
-- the count is one high for a second
local function excl_expiry(lock_key)
  local left = redis.call('PTTL', lock_key)
  if left < 0 then return 0 end
  return gk.now + left
end
-- lock_key is exclusively held until gk.now + ttl (ms, string or number)
local function excl_expire(lock_key, ttl)
  redis.call('PEXPIREAT', lock_key, gk.now + tonumber(ttl))
end
-- the greatest fence in members ms (0: none)
local function index_fence(ms)
  local f = 0
  for _, m in ipairs(ms) do
    local z = string.find(m, '\0', 1, true)
    if z then
      local v = tonumber(string.sub(m, z + 1)) or 0
      if v > f then f = v end
    end
  end
  return f
end
-- the key is held, its last grant's fence fs: one member, key NUL fs (ms:
-- its members before, when known, in the bucket named by hi; hi nil:
-- not looked up)
local function index_put(key, fs, ms, hi)
  if not gk.index then return end
  local want = key .. '\0' .. fs
  if hi == nil then hi = ix_hi(key) end
  local b = ix_name(hi)
  for _, m in ipairs(ms) do
    if m ~= want then redis.call('ZREM', b, m) end
  end
  if redis.call('ZADD', b, '0', want) == 0 then return end
  local n = redis.call('ZCARD', b)
  if n == 1 then
    ix_expire_as(b, hi and ix_dir() or gk.counts)
  elseif n > ix_max then
    ix_split(b)
  end
end
-- the key is free: its members go; fs, its fence when known, finds them
-- in one call (a fence redlock wrote back is not the member's: then they
-- are looked up)
local function index_drop(key, fs)
  if not gk.index then return end
  local hi = ix_hi(key)
  local b = ix_name(hi)
  if not (fs and redis.call('ZREM', b, key .. '\0' .. fs) > 0) then
    local ms = ix_members(b, key)
    if not ms[1] then return end
    redis.call('ZREM', b, unpack(ms))
  end
  ix_removed(b, hi, not fs or (tonumber(fs) + string.byte(key, -1)) % 4 == 0)
end
-- Pruning. A member whose key is free stays when Redis expired its
-- holder (no script ran): the next grant of the key reads its fence as
-- the one it took over (expired_free()) and replaces it. Those of keys
-- not granted again go when a list passes them, or are sampled: batch
-- members in a row of a bucket, both picked by gk.now (the millisecond:
-- as good as random here; Redis 5 has no ZRANDMEMBER), each looked up,
-- and those of free keys taken out. Answers how many went.
local function ix_sample(batch)
  local pick = gk.now
  local d = ix_dir()
  local n = redis.call('ZCARD', d)
  local i, hi = pick % (n + 1), false
  if i < n then hi = redis.call('ZRANGE', d, i, i)[1] or false end
  local b = ix_name(hi)
  local m = redis.call('ZCARD', b)
  local j = 0
  if m > batch then j = math.floor(pick / 128) % (m - batch + 1) end
  local ms = redis.call('ZRANGE', b, j, j + batch - 1)
  local pre = string.sub(gk.index, 1, -5) .. 'lock:{'
  local gone = {}
  for _, x in ipairs(ms) do
    if redis.call('EXISTS', pre .. ix_key(x) .. '}') == 0 then
      gone[#gone + 1] = x
    end
  end
  if gone[1] then
    redis.call('ZREM', b, unpack(gone))
    ix_removed(b, hi, true)
  elseif not ms[1] then
    ix_gone(b, hi)
  end
  return #gone
end
-- Seconds passed of the counts go, batch / 2 at a time or so (HSCAN from
-- a cursor picked by gk.now: a small hash answers all of its fields).
-- What they still counted are holders that expired unreleased, each of
-- which may have left its index member: the counts' field 'x' (not a
-- second) adds them up, and while it is above 0 a sample of batch
-- members is looked at, which takes it down by the members it took out
-- (one at least). So with no lock left to expire no member is looked up;
-- with every one, a grant in 16 (by its fence, its key's last byte and
-- the millisecond: fences of a slot's first keys are small) samples 32,
-- two a grant, while a grant leaves at most one such member: they stay
-- fewer than the held keys'.
local function held_prune(batch)
  if not gk.counts or not gk.index then return end
  local fs = redis.call('HSCAN', gk.counts, gk.now % 1048576, 'COUNT',
                        batch / 2)[2]
  local old, debt, x = {}, 0, nil
  for i = 1, #fs, 2 do
    local s = tonumber(fs[i])
    if not s then
      x = tonumber(fs[i + 1])
    elseif s * 1000 <= gk.now then
      old[#old + 1] = fs[i]
      debt = debt + tonumber(fs[i + 1])
    end
  end
  if old[1] then redis.call('HDEL', gk.counts, unpack(old)) end
  if x == nil then x = tonumber(redis.call('HGET', gk.counts, 'x') or '0') end
  debt = debt + x
  if debt > 0 then
    local taken = ix_sample(batch)
    if taken < 1 then taken = 1 end
    debt = debt - taken
  end
  if debt > 0 then
    redis.call('HSET', gk.counts, 'x', debt)
  elseif x ~= 0 then
    redis.call('HDEL', gk.counts, 'x')
  end
end
local function held_prune_some(f, key)
  if (f + string.byte(key, -1) + gk.now) % 16 == 0 then held_prune(32) end
end
-- a grant of key, free (no holder: never held, released, or its holders
-- expired): a member left in the index means the holders expired (a
-- release takes it out), and the grant took over the key's last fence
-- (the member's, or f, its counter's; no grant came since). Answers the
-- key's index members and the hi of their bucket (for index_put())
local function expired_free(f, key)
  if not gk.index then return {} end
  local hi = ix_hi(key)
  local ms = ix_members(ix_name(hi), key)
  if ms[1] then
    local fi = index_fence(ms)
    if fi > f then f = fi end
    if f > gk.expired then gk.expired = f end
  end
  return ms, hi
end
local function rec_drop(lock_key, exp_key, d)
  local r = rec_get(lock_key, d)
  if r and r[5] then redis.call('HDEL', lock_key, 'i:' .. r[5]) end
  redis.call('HDEL', lock_key, 'h:' .. d)
  held_drop(tonumber(redis.call('ZSCORE', exp_key, d)))
  redis.call('ZREM', exp_key, d)
  return r
end
-- after the shared holders changed: the key is free when none is left,
-- else both keys expire with the last holder
local function settle(lock_key, exp_key)
  local last = redis.call('ZRANGE', exp_key, '-1', '-1', 'WITHSCORES')
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
  for _, d in ipairs(gone) do
    local r = rec_drop(lock_key, exp_key, d)
    if r and r[1] > gk.expired then gk.expired = r[1] end
  end
  settle(lock_key, exp_key)
  return true
end
-- the time until the first holder's TTL passes (>= 1)
local function first_left(lock_key, exp_key, excl, now)
  local left
  if excl then
    left = redis.call('PTTL', lock_key)
  else
    local first = redis.call('ZRANGE', exp_key, '0', '0', 'WITHSCORES')
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
-- A key's queue is a sorted set of waiter ids scored by arrival (the
-- last one's score plus 1): a place is found, ranked and dropped in
-- O(log n), so thousands of waiters leaving one key cost no more each than
-- a few (a list's LREM scanned the whole queue for every one of them).
local function queue_first(queue_key)
  return redis.call('ZRANGE', queue_key, '0', '0')[1]
end
local function queue_push(queue_key, uid)
  local last = redis.call('ZRANGE', queue_key, '-1', '-1', 'WITHSCORES')
  local n = 1
  if last[2] then n = tonumber(last[2]) + 1 end
  redis.call('ZADD', queue_key, n, uid)
end
-- the queue's head once the dead places are dropped from it (nil: nobody
-- waits); a place is dead once its deadline and a grace passed: its lockd
-- would have cancelled it, so it is gone
local grace = 1000
local function live_head(queue_key, deadlines_key, now)
  local head = queue_first(queue_key)
  while head do
    local dl = place(redis.call('HGET', deadlines_key, head))
    if dl + grace >= now then break end
    redis.call('ZREM', queue_key, head)
    redis.call('HDEL', deadlines_key, head)
    head = queue_first(queue_key)
  end
  return head
end
-- someone to tell when the key may have become free: a queued waiter, or
-- a multi-key waiter, which keeps no place but marks the keys it found
-- held (acquire_multi.lua). One call: Redis drops an emptied sorted set,
-- so the queue exists while someone is in it (both keys share {K}'s slot)
local function waited(queue_key, mwait_key)
  return redis.call('EXISTS', queue_key, mwait_key) > 0
end
-- whether digest h holds the key: 1, 0 (nobody does) or -1 (others do)
local function holds(lock_key, exp_key, h, now)
  local cur = redis.call('HMGET', lock_key, 't', 'm')
  if cur[1] then
    if tok_is(cur[1], h) then return 1 end
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
    if not tok_is(cur[1], h) then return {-1} end
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
    local before = excl_expiry(lock_key)
    excl_expire(lock_key, ttl)
    held_put(now + tonumber(ttl), before)
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
  held_put(now + r[2], tonumber(redis.call('ZSCORE', exp_key, h)))
  redis.call('ZADD', exp_key, now + r[2], h)
  settle(lock_key, exp_key)
  return {1, r[1], r[2], now + r[2], 1, tonumber(cur[6]), r[3]}
end
-- give back one of h's holds (every one with all): {1, holds left,
-- granted at (0 unknown; with none left)}, {0} free, {-1} another token;
-- published with key when a holder went and someone waits
local function release_one(lock_key, queue_key, exp_key, mwait_key,
                           fence_key, h, all, channel, key)
  local cur = redis.call('HMGET', lock_key, 't', 'n', 'm', 'a', 'g', 'f')
  if cur[1] then
    if not tok_is(cur[1], h) then return {-1} end
    local n = tonumber(cur[2] or '1')
    if n > 1 and not all then
      redis.call('HSET', lock_key, 'n', n - 1)
      return {1, n - 1, 0}
    end
    clock()
    held_drop(excl_expiry(lock_key))
    if cur[4] then
      -- granted by this lockd (or an older one that gave the counter an
      -- expiry): a counter, if any, goes in the same call
      redis.call('DEL', lock_key, fence_key)
    else
      redis.call('DEL', lock_key)
      fence_drop(fence_key)
    end
    index_drop(key, cur[6])
    if waited(queue_key, mwait_key) then
      redis.call('PUBLISH', channel, key)
    end
    return {1, 0, tonumber(cur[4] or cur[5] or '0')}
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
    return {1, r[3], 0}
  else
    rec_drop(lock_key, exp_key, h)
    settle(lock_key, exp_key)
    res = {1, 0, r[7] or 0}
    reaped = true
  end
  if redis.call('EXISTS', lock_key) == 0 then
    index_drop(key)
    fence_drop(fence_key)
  end
  if reaped and waited(queue_key, mwait_key) then
    redis.call('PUBLISH', channel, key)
  end
  return res
end
-- a key's holders as inspect shows them: {1, mode, limit, holder count,
-- greatest fence, last expiry, now, then fence, expires_at, holds, owner
-- or false of the first `shown` holders by fence} (an exclusive key shows
-- its one holder whatever `shown`), or nil when free. Read only: the
-- expired are left out, not reaped.
local function look(lock_key, exp_key, now, shown)
  local cur = redis.call('HMGET', lock_key, 't', 'f', 'o', 'n', 'm', 'l')
  if cur[1] then
    local left = first_left(lock_key, exp_key, true, now)
    local f = tonumber(cur[2])
    return {1, 0, 0, 1, f, now + left, now,
            f, now + left, tonumber(cur[4] or '1'), cur[3] or false}
  end
  if not cur[5] then return nil end
  local live = redis.call('ZRANGEBYSCORE', exp_key, '(' .. now, '+inf',
                          'WITHSCORES')
  local hs = {}
  for i = 1, #live, 2 do
    local r = rec_get(lock_key, live[i])
    if r then hs[#hs + 1] = {r[1], tonumber(live[i + 1]), r[3], r[4]} end
  end
  if #hs == 0 then return nil end
  table.sort(hs, function(a, b) return a[1] < b[1] end)
  local out = {1, 1, tonumber(cur[6]), #hs, hs[#hs][1],
               tonumber(live[#live]), now}
  for i = 1, math.min(#hs, shown) do
    local x = hs[i]
    out[#out + 1] = x[1]
    out[#out + 1] = x[2]
    out[#out + 1] = x[3]
    out[#out + 1] = x[4]
  end
  return out
end
