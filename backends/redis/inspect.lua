-- inspect: a lock's mode, holders, fences, times left and owners.
-- KEYS by name, in the order lockd sends them.
local lock_key = KEYS[1]
local exp_key = KEYS[2]
return look(lock_key, exp_key, clock(), 100) or {0}
