-- renew_multi: move the expiry of every key a token holds, or of none.
-- KEYS: three per lockd key, in the request's order: lock, exp, fence
-- (unused: a renew leaves a key's counter, if any, to its expiry); then
-- the index and the holders' counts.
-- ARGV by name, in the order lockd sends them.
local token = ARGV[1]
local ttl_ms = ARGV[2]
local not_after = ARGV[3]
local n = (#KEYS - 2) / 3
gk.index = KEYS[#KEYS - 1]
gk.counts = KEYS[#KEYS]
local now = clock()
if now > tonumber(not_after) then return {-2} end
local h = redis.sha1hex(token)
-- the first key (by index) the token does not hold stops it all
for i = 1, n do
  local s = holds(KEYS[3 * i - 2], KEYS[3 * i - 1], h, now)
  if s ~= 1 then return {s, i - 1} end
end
local out = {1, 0, 0}
for i = 1, n do
  local r = renew_one(KEYS[3 * i - 2], KEYS[3 * i - 1], h, ttl_ms, false,
                      now)
  if r[1] ~= 1 then
    return redis.error_reply('ERR lockd renew_multi: a holder went')
  end
  if i == 1 or r[3] < out[2] then out[2] = r[3] end
  if i == 1 or r[4] < out[3] then out[3] = r[4] end
  out[3 + i] = r[2]
end
return out
