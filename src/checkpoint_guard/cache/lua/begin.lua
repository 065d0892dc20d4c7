-- KEYS[1], KEYS[2] the thread's record (lib_boot); ARGV[1] a fresh id, ARGV[2] ttl ms, ARGV[3] the namespace's m: field,
-- ARGV[4] g, ARGV[5..] pointer fields to probe, in groups of g (one per channel,
-- nearest ancestor first) -> {gen, epoch, known, one flag per probed field: 0 when
-- its entry's segment is not live (see held_seed), the pointer's value for the first
-- live one of its group (the entry a miss extends: the caller needs its tag), else 1}.
-- Creates the generation and epoch when missing, so a reader always holds a real
-- token (a lost hash never matches it again).
local key, rec = KEYS[1], KEYS[2]
local boot = booted(key, rec)
if redis.call('HSETNX', key, 'gen', ARGV[1]) == 1 then
  redis.call('HSET', key, 'boot', boot)
  redis.call('HSETNX', key, 'epoch', ARGV[1])
  local ttl = tonumber(ARGV[2])
  if ttl > 0 then redis.call('PEXPIRE', key, ttl) end
  record(rec, ARGV[1], ttl)
end
local out = {redis.call('HGET', key, 'gen'), redis.call('HGET', key, 'epoch'),
             redis.call('HEXISTS', key, ARGV[3])}
local seen, anchored = {}, {}
local g = math.max(tonumber(ARGV[4]), 1)
for i = 5, #ARGV, 500 do
  local batch = redis.call('HMGET', key, unpack(ARGV, i, math.min(i + 499, #ARGV)))
  for j = 1, #batch do
    local flag = 0
    if live(key, batch[j], seen) then
      local group = math.floor((i + j - 6) / g)
      flag = 1
      if not anchored[group] then
        anchored[group] = true
        flag = batch[j]
      end
    end
    out[#out + 1] = flag
  end
end
return out
