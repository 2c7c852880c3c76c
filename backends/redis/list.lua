-- list: the held keys of a lex range of the index, in key order.
-- KEYS and ARGV by name, in the order lockd sends them.
local index_key = KEYS[1]
local prefix = ARGV[1]
local min = ARGV[2]
local max = ARGV[3]
local limit = tonumber(ARGV[4])
local budget = tonumber(ARGV[5])
local now = clock()
-- the lock keys are not in KEYS: the index names them (redis.c)
local keys = redis.call('ZRANGEBYLEX', index_key, min, max, 'LIMIT', 0,
                        budget)
local out = {1, 0, false, now}
local n = 0
for i, k in ipairs(keys) do
  out[3] = k
  local lock_key = prefix .. 'lock:{' .. k .. '}'
  local s = look(lock_key, prefix .. 'exp:{' .. k .. '}', now, 0)
  if s then
    n = n + 1
    out[#out + 1] = k
    out[#out + 1] = s[2]
    out[#out + 1] = s[5]
    out[#out + 1] = s[6]
    out[#out + 1] = s[4]
    out[#out + 1] = s[2] == 0 and s[11] or false
    if n == limit then
      if i < #keys or #keys == budget then out[2] = 1 end
      return out
    end
  elseif redis.call('EXISTS', lock_key) == 0 then
    -- expired by Redis's PX, so no script took it out
    redis.call('ZREM', index_key, k)
  end
end
if #keys == budget then out[2] = 1 end
return out
