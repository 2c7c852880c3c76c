-- list: the held keys of a lex range of the index, in key order.
-- KEYS and ARGV by name, in the order lockd sends them.
gk.index = KEYS[1]
local prefix = ARGV[1]
local min = ARGV[2]
local max = ARGV[3]
local limit = tonumber(ARGV[4])
local budget = tonumber(ARGV[5])
local now = clock()
-- the lock keys are not in KEYS: the index names them (redis.c). A
-- member is the key, NUL and its last fence; a key may have more than
-- one (an earlier holder's stayed), one after the other, in one bucket.
-- The page reads the bucket its start falls in, then the next ones (the
-- directory in order) while the range and the budget last: at most
-- budget members and buckets in all (a bucket that gives none costs one),
-- and one read of the directory per bucket.
local hi
if min == '-' then
  hi = ix_hi_after('-')
else
  hi = ix_hi(string.sub(min, 2))
end
-- whether the buckets after hi's may hold keys of the range
local function more_after(h)
  return h and (max == '+' or lex_lt(h, string.sub(max, 2)))
end
local out = {1, 0, false, now}
local n, left = 0, budget
local seen = false
if string.sub(min, 1, 1) == '(' then seen = string.sub(min, 2) end
-- the least key of the bucket read (false: the page's first, which may
-- start before the page)
local from = false
while true do
  local b = ix_name(hi)
  local members = redis.call('ZRANGEBYLEX', b, min, max, 'LIMIT', 0, left)
  left = left - #members
  if not members[1] then
    -- a bucket with nothing in the range costs the budget one: a page may
    -- end on it and resume from its start, where no key is (its first
    -- key, if any, is past the range or after the page). A hi left in the
    -- directory once its bucket went (ix_removed()) is dropped here
    left = left - 1
    if from then out[3] = from end
    ix_gone(b, hi)
  end
  local gone = {}
  for i, m in ipairs(members) do
    local k = ix_key(m)
    out[3] = k
    local s = false
    local lock_key = prefix .. 'lock:{' .. k .. '}'
    if k ~= seen then
      seen = k
      s = look(lock_key, prefix .. 'exp:{' .. k .. '}', now, 0)
    end
    if s then
      n = n + 1
      out[#out + 1] = k
      out[#out + 1] = s[2]
      out[#out + 1] = s[5]
      out[#out + 1] = s[6]
      out[#out + 1] = s[4]
      out[#out + 1] = s[2] == 0 and s[11] or false
      if n == limit then
        if i < #members or left == 0 or more_after(hi) then out[2] = 1 end
        break
      end
    elseif redis.call('EXISTS', lock_key) == 0 then
      -- expired by Redis's clock, so no script took it out (a takeover
      -- after this reports no fence taken over)
      gone[#gone + 1] = m
    end
  end
  if gone[1] then
    redis.call('ZREM', b, unpack(gone))
    ix_gone(b, hi)
  end
  if n == limit then return out end
  if left == 0 then
    out[2] = 1
    return out
  end
  if not more_after(hi) then return out end
  from = hi
  hi = ix_hi_after('(' .. hi)
end
