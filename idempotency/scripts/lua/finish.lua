-- Store the finished response, but only if the caller still holds the lease.
--
-- KEYS[1]  the idempotency key
-- ARGV[1]  owner token given to claim
-- ARGV[2]  serialised StoredResponse (binary-safe)
-- ARGV[3]  TTL of the finished entry in milliseconds (>= max retry window + processing time)
-- ARGV[4]  the answer's Location ("" when it has none), kept as 'loc': claim_audit.lua names
--          the resource of a replay's audit from it
--
-- Returns 1 when stored; 0 when the lease was lost (expired, released or taken over). The
-- caller only logs a 0: the database transaction is the durable truth and answers replays.
--
-- The per-field hashes ('fh') go with the owner: once finished, the committed record holds
-- them for a REUSED answer, and a finished entry stays under 1 KB (its reply keeps the hash
-- out of Redis's compact encoding, so every field costs a table entry).

local key = KEYS[1]
local stored = redis.call('HMGET', key, 'st', 'own')
if stored[1] ~= 'p' or stored[2] ~= ARGV[1] then
  return 0
end
redis.call('HSET', key, 'st', 'd', 'res', ARGV[2], 'loc', ARGV[4])
redis.call('HDEL', key, 'own', 'fh')
redis.call('PEXPIRE', key, ARGV[3])
return 1
