-- KEYS[1]; ARGV[1] a fresh id, ARGV[2] ttl ms, ARGV[3] the namespace's m: field,
-- ARGV[4..] pointer fields to probe -> {gen, epoch, known, 1|0 per probed field: 1
-- when its entry's segment is live (see held_seed)}.
-- Creates the generation and epoch when missing, so a reader always holds a real
-- token (a lost hash never matches it again).
local key = KEYS[1]
local boot = booted(key)
if redis.call('HSETNX', key, 'gen', ARGV[1]) == 1 then
  redis.call('HSET', key, 'boot', boot)
  redis.call('HSETNX', key, 'epoch', ARGV[1])
  local ttl = tonumber(ARGV[2])
  if ttl > 0 then redis.call('PEXPIRE', key, ttl) end
end
local out = {redis.call('HGET', key, 'gen'), redis.call('HGET', key, 'epoch'),
             redis.call('HEXISTS', key, ARGV[3])}
local seen = {}
for i = 4, #ARGV, 500 do
  local batch = redis.call('HMGET', key, unpack(ARGV, i, math.min(i + 499, #ARGV)))
  for j = 1, #batch do out[#out + 1] = live(key, batch[j], seen) and 1 or 0 end
end
return out
