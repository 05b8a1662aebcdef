-- Put back a finished result that the database still has but Redis lost (crash after
-- commit, eviction, failover, expiry: seed chapter 1).
--
-- KEYS[1]  the idempotency key
-- ARGV[1]  fingerprint
-- ARGV[2]  fingerprint version
-- ARGV[3]  serialised StoredResponse
-- ARGV[4]  TTL in milliseconds
-- ARGV[5]  JSON of per-field hashes, or ""
--
-- Creates the entry only if the key is absent: a live claim or result is never overwritten
-- (an expired lease has already made the key absent). Returns 1 when created, 0 otherwise.

local key = KEYS[1]
if redis.call('EXISTS', key) == 1 then
  return 0
end
if ARGV[5] ~= '' then
  redis.call('HSET', key, 'st', 'd', 'fp', ARGV[1], 'fpv', ARGV[2], 'res', ARGV[3], 'fh', ARGV[5])
else
  redis.call('HSET', key, 'st', 'd', 'fp', ARGV[1], 'fpv', ARGV[2], 'res', ARGV[3])
end
redis.call('PEXPIRE', key, ARGV[4])
return 1
