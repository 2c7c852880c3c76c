-- list: the held keys of a lex range of the index, in key order.
-- KEYS and ARGV by name, in the order lockd sends them.
local index_key = KEYS[1]
-- the held set, named as the index is (the prefix's 'held' for 'index')
local held_key = string.sub(index_key, 1, -6) .. 'held'
local prefix = ARGV[1]
local min = ARGV[2]
local max = ARGV[3]
local limit = tonumber(ARGV[4])
local budget = tonumber(ARGV[5])
local now = clock()
-- the lock keys are not in KEYS: the index names them (redis.c). A
-- member is the key, NUL and its last fence, or the key alone (an older
-- lockd's); a key may have both, one after the other. After a cursor
-- (min '(' key) the key's own fenced member comes first: skipped.
local members = redis.call('ZRANGEBYLEX', index_key, min, max, 'LIMIT', 0,
                           budget)
local out = {1, 0, false, now}
local n = 0
local seen = false
if string.sub(min, 1, 1) == '(' then seen = string.sub(min, 2) end
for i, m in ipairs(members) do
  local z = string.find(m, '\0', 1, true)
  local k = m
  if z then k = string.sub(m, 1, z - 1) end
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
      if i < #members or #members == budget then out[2] = 1 end
      return out
    end
  elseif redis.call('EXISTS', lock_key) == 0 and
         (not z or not redis.call('ZSCORE', held_key, lock_key)) then
    -- expired by Redis's PX, so no script took it out. A fenced member
    -- whose exclusive holder left its held member stays, for a takeover
    -- to tell the fence, until the held set's prune or the next grant
    redis.call('ZREM', index_key, m)
  end
end
if #members == budget then out[2] = 1 end
return out
