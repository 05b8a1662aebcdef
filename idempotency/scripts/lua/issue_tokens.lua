-- Issue pre-issued tokens under the tenant's quota of outstanding tokens and the principal's
-- share of it, atomically (seed 2.4).
--
-- KEYS[1]      the tenant's quota ledger, idem:{<tag>}:tokq: a HASH of expiry bucket -> tokens
--              issued and not consumed that expire in it (bucket = expiry ms // ARGV[4])
-- KEYS[2]      the principal's ledger, idem:{<tag>}:tokq:<principal hash>, the same shape,
--              counting only the tokens of that principal
-- KEYS[3..]    the new tokens' keys, idem:{<tag>}:tok:<id>, all under the ledgers' hash tag
-- ARGV[1]      the most tokens that may be outstanding under the tenant's ledger; -1: no limit
-- ARGV[2]      the tokens' time to live in milliseconds
-- ARGV[3]      their value while unused: "p:<principal>"
-- ARGV[4]      the width of an expiry bucket in milliseconds
-- ARGV[5]      the most tokens that may be outstanding under the principal's ledger; -1: none
-- ARGV[6]      the most tokens the tenant's ledger may hold after an issue by this caller, a
--              share of ARGV[1] for a caller held to one (a guest: public keys open guest
--              sessions at will, each a principal, so guests together stop there and the rest
--              stays the merchant's); -1 or absent: ARGV[1] alone
--
-- Returns {1, outstanding, expires_at_ms} once the tokens are stored (outstanding: the
-- tenant's), or {0, outstanding, retry_after_ms, refused_by} when they would exceed a limit,
-- refused_by "principal" (checked first), "tenant" or "tenant_share" (the tenant's ledger
-- under ARGV[6]), outstanding and retry_after_ms that ledger's (nothing is written then but the pruning).
--
-- Why the counts stay right: a bucket is dropped once its whole width has passed (its tokens
-- have expired), and claim_token.lua takes one off a token's bucket in both ledgers when it
-- consumes it. A bucket still holding tokens that expired inside it counts them until it
-- ends: a count is never low, and at most one bucket's width high.

local limit, ttl_ms, unused, width = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3], tonumber(ARGV[4])
local principal_limit = tonumber(ARGV[5])
local share_limit = tonumber(ARGV[6] or -1)
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)

-- The ledger's outstanding count and the end of its earliest bucket, dropping ended buckets.
local function outstanding_in(ledger)
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
  return outstanding, first_end
end

local count = #KEYS - 2
local mine, mine_first_end = outstanding_in(KEYS[2])
if principal_limit >= 0 and mine + count > principal_limit then
  return {0, mine, (mine_first_end or now) - now, 'principal'}
end
local outstanding, first_end = outstanding_in(KEYS[1])
if limit >= 0 and outstanding + count > limit then
  return {0, outstanding, (first_end or now) - now, 'tenant'}
end
if share_limit >= 0 and outstanding + count > share_limit then
  return {0, outstanding, (first_end or now) - now, 'tenant_share'}
end

local expires_at = now + ttl_ms
local bucket = math.floor(expires_at / width)
local ledger_ends = (bucket + 1) * width
for ledger = 1, 2 do
  redis.call('HINCRBY', KEYS[ledger], bucket, count)
  if redis.call('PEXPIRETIME', KEYS[ledger]) < ledger_ends then
    redis.call('PEXPIREAT', KEYS[ledger], ledger_ends)
  end
end
for i = 3, #KEYS do
  redis.call('SET', KEYS[i], unused, 'PXAT', expires_at)
end
return {1, outstanding + count, expires_at}
