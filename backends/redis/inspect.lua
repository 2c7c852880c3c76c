-- inspect: a lock's mode, holders, fences, times left and owners.
-- KEYS by name, in the order lockd sends them.
local lock_key = KEYS[1]
local exp_key = KEYS[2]
local shown = 100
local cur = redis.call('HMGET', lock_key, 't', 'f', 'o', 'n', 'm', 'l')
local now = clock()
if cur[1] then
  local left = first_left(lock_key, exp_key, true, now)
  local f = tonumber(cur[2])
  return {1, 0, 0, 1, f, now + left, now,
          f, now + left, tonumber(cur[4] or '1'), cur[3]}
end
if not cur[5] then return {0} end
-- read only: the expired are left out, not reaped
local live = redis.call('ZRANGEBYSCORE', exp_key, '(' .. now, '+inf',
                        'WITHSCORES')
local hs = {}
for i = 1, #live, 2 do
  local r = rec_get(lock_key, live[i])
  if r then hs[#hs + 1] = {r[1], tonumber(live[i + 1]), r[3], r[4]} end
end
if #hs == 0 then return {0} end
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
