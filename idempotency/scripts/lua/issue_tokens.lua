-- Issue pre-issued tokens under the tenant's quota of outstanding tokens, atomically (seed 2.4).
--
-- KEYS[1]      the quota ledger, idem:{<tag>}:tokq: a HASH of expiry bucket -> tokens issued
--              and not consumed that expire in it (bucket = expiry ms // ARGV[4])
-- KEYS[2..]    the new tokens' keys, idem:{<tag>}:tok:<id>, all under the ledger's hash tag
-- ARGV[1]      the most tokens that may be outstanding under this ledger; -1: no limit
-- ARGV[2]      the tokens' time to live in milliseconds
-- ARGV[3]      their value while unused: "p:<principal>"
-- ARGV[4]      the width of an expiry bucket in milliseconds
--
-- Returns {1, outstanding, expires_at_ms} once the tokens are stored, or {0, outstanding,
-- retry_after_ms} when they would exceed the limit (nothing is written then but the pruning).
--
-- Why the count stays right: a bucket is dropped once its whole width has passed (its tokens
-- have expired), and claim_token.lua takes one off a token's bucket when it consumes it. A
-- bucket still holding tokens that expired inside it counts them until it ends: the count is
-- never low, and at most one bucket's width high.

local ledger = KEYS[1]
local limit, ttl_ms, unused, width = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3], tonumber(ARGV[4])
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)

local outstanding, first_end, expired = 0, nil, {}
local buckets = redis.call('HGETALL', ledger)
for i = 1, #buckets, 2 do
  local ends = (tonumber(buckets[i]) + 1) * width
  if ends <= now then
    expired[#expired + 1] = buckets[i]
  else
    outstanding = outstanding + tonumber(buckets[i + 1])
    if first_end == nil or ends < first_end then
      first_end = ends
    end
  end
end
if #expired > 0 then
  redis.call('HDEL', ledger, unpack(expired))
end

local count = #KEYS - 1
if limit >= 0 and outstanding + count > limit then
  return {0, outstanding, (first_end or now) - now}
end

local expires_at = now + ttl_ms
local bucket = math.floor(expires_at / width)
redis.call('HINCRBY', ledger, bucket, count)
local ledger_ends = (bucket + 1) * width
if redis.call('PEXPIRETIME', ledger) < ledger_ends then
  redis.call('PEXPIREAT', ledger, ledger_ends)
end
for i = 2, #KEYS do
  redis.call('SET', KEYS[i], unused, 'PXAT', expires_at)
end
return {1, outstanding + count, expires_at}
