-- Claim an idempotency key, atomically (seed 2.1, 2.3, 4.2).
--
-- KEYS[1]  the idempotency key (a HASH; only this key is touched, so it is Cluster-safe)
-- ARGV[1]  fingerprint under the caller's current version
-- ARGV[2]  the caller's current fingerprint version
-- ARGV[3]  owner token (who may finish or release the claim)
-- ARGV[4]  lease in milliseconds (how long a crashed owner can block the key)
-- ARGV[5]  JSON of per-field hashes for mismatch forensics, or ""
-- ARGV[6]  "version:fingerprint,..." for every version the caller can compute, so an entry
--          stored under another version is compared under that version (rolling deploys)
--
-- Returns one of
--   {"MISS"}                                            the caller now owns the key
--   {"REUSED", stored_fp, stored_field_hashes, stored_fpv}  same key, different payload
--   {"HIT", stored_response, stored_fpv, stored_fp}     finished earlier
--   {"IN_PROGRESS", remaining_lease_ms}                 another request holds the lease
-- The payload check comes first: a reused key is an error whatever state the original is in.
-- A claim held by this very owner is answered MISS again: the owner token is new per request,
-- so that is the same call re-sent (a client library retries a call whose reply was lost).

local key = KEYS[1]
local fp, fpv, owner, lease_ms, fh, alt = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6]

local stored = redis.call('HMGET', key, 'st', 'fp', 'fpv', 'res', 'fh', 'own')
local st, sfp, sfpv, res, sfh, sown = stored[1], stored[2], stored[3], stored[4], stored[5], stored[6]

if not st then
  if fh ~= '' then
    redis.call('HSET', key, 'st', 'p', 'own', owner, 'fp', fp, 'fpv', fpv, 'fh', fh)
  else
    redis.call('HSET', key, 'st', 'p', 'own', owner, 'fp', fp, 'fpv', fpv)
  end
  redis.call('PEXPIRE', key, lease_ms)
  return {'MISS'}
end

-- The fingerprint the caller computes under the stored version, or false if it cannot.
local expected = false
if sfpv == fpv then
  expected = fp
else
  for pair in string.gmatch(alt, '[^,]+') do
    local colon = string.find(pair, ':', 1, true)
    if colon and string.sub(pair, 1, colon - 1) == sfpv then
      expected = string.sub(pair, colon + 1)
      break
    end
  end
end

if not expected or expected ~= sfp then
  return {'REUSED', sfp or '', sfh or '', sfpv or ''}
end
if st == 'd' then
  return {'HIT', res or '', sfpv, sfp}
end
if sown == owner then
  return {'MISS'}
end
return {'IN_PROGRESS', redis.call('PTTL', key)}
