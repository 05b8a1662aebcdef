-- Consume a pre-issued token and claim its idempotency key in ONE atomic call (seed 2.4).
--
-- This file is a prelude: RedisIdempotencyStore runs it with claim.lua appended, so once the
-- token check lets the request through, the answer is exactly a plain claim's (MISS / HIT /
-- IN_PROGRESS / REUSED) and follows claim.lua as it evolves.
--
-- KEYS[1]          the idempotency key (the claim entry of claim.lua)
-- KEYS[2]          the token's key, idem:{<same hash tag>}:tok:<id>: same slot as KEYS[1]
-- KEYS[3]          the quota ledger of outstanding tokens (issue_tokens.lua), same slot
-- KEYS[4]          the ledger of the principal's outstanding tokens (issue_tokens.lua), same slot
-- ARGV[1..n-4]     claim.lua's arguments
-- ARGV[n-3]        the token's value while unused: "p:<principal>"
-- ARGV[n-2]        its value once consumed by this operation: "u:<KEYS[1]>"
-- ARGV[n-1]        how long (ms) that mark lives: the result's retention
-- ARGV[n]          the width (ms) of the ledger's expiry buckets
--
-- A token key goes: absent (expired, or never issued) -> "p:<principal>" (issued, unused) ->
-- "u:<claim key>" (consumed by the operation that claim key names). Consuming marks the
-- token instead of deleting it, so the same operation may claim again after its lease expired
-- or was released (a crash or a 5xx before commit: its retries must work like any key's),
-- while any other operation is refused.
--
-- Returns {"TOKEN_USED"} (consumed by another operation) or {"TOKEN_UNKNOWN"} (absent), or
-- falls through to claim.lua.

local n = #ARGV
local token_key, unused, used, mark_ms = KEYS[2], ARGV[n - 3], ARGV[n - 2], ARGV[n - 1]
local token = redis.call('GET', token_key)
if token == unused then
  -- consumed: no longer outstanding, so it leaves its expiry bucket of both quota ledgers
  local expires_at = redis.call('PEXPIRETIME', token_key)
  if expires_at > 0 then
    local bucket = math.floor(expires_at / tonumber(ARGV[n]))
    for ledger = 3, 4 do
      if tonumber(redis.call('HGET', KEYS[ledger], bucket) or '0') > 0 then
        redis.call('HINCRBY', KEYS[ledger], bucket, -1)
      end
    end
  end
  redis.call('SET', token_key, used, 'PX', mark_ms)
elseif token ~= used and redis.call('EXISTS', KEYS[1]) == 0 then
  if token then
    return {'TOKEN_USED'}
  end
  return {'TOKEN_UNKNOWN'}
end
