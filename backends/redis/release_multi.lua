-- release_multi: give back every hold a token has on each of n keys.
-- KEYS: five per lockd key, in the request's order: lock, queue, exp,
-- mwait, fence; then the index and the holders' counts. ARGV by name, in
-- the order lockd sends them; then the n lockd keys, for PUBLISH.
local token = ARGV[1]
local channel = ARGV[2]
local n = (#KEYS - 2) / 5
gk.index = KEYS[#KEYS - 1]
gk.counts = KEYS[#KEYS]
local h = redis.sha1hex(token)
local out = {1}
for i = 1, n do
  local b = (i - 1) * 5
  local r = release_one(KEYS[b + 1], KEYS[b + 2], KEYS[b + 3], KEYS[b + 4],
                        KEYS[b + 5], h, true, channel, ARGV[2 + i])
  if r[1] == 1 then out[#out + 1] = i - 1 end
end
if not out[2] then return {0} end
return out
