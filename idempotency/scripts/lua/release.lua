-- Give up a claim (failure before commit, or a 5xx that must not be stored as final).
--
-- KEYS[1]  the idempotency key
-- ARGV[1]  owner token given to claim
--
-- Deletes the key only while it is in progress and owned by the caller, so a slow request
-- whose lease expired cannot delete the claim (or the result) of the request that followed.
-- Returns 1 when deleted, 0 otherwise.

local key = KEYS[1]
local stored = redis.call('HMGET', key, 'st', 'own')
if stored[1] ~= 'p' or stored[2] ~= ARGV[1] then
  return 0
end
redis.call('DEL', key)
return 1
