-- KEYS[1], KEYS[2] the record; ARGV[1] a fresh id, ARGV[2] ttl ms, ARGV[3] the m: field, ARGV[4] the
-- checkpoint written onto, ARGV[5] the writer's f: field -> 1 when entries were
-- dropped, else 0. Fences the thread (no store until unfenced) and drops it when an
-- entry of a newer checkpoint exists (only those can include the checkpoint's writes).
local key, rec = KEYS[1], KEYS[2]
local ttl = tonumber(ARGV[2])
local created = redis.call('EXISTS', key) == 0
local dropped = 0
local top = redis.call('HGET', key, ARGV[3])
if top and newer(top, ARGV[4]) then
  drop(key, rec, ARGV[1], ttl)
  dropped = 1
end
if redis.call('HSETNX', key, ARGV[5], 1) == 1 then
  redis.call('HINCRBY', key, 'fence', 1)
end
redis.call('HSETNX', key, 'epoch', ARGV[1])
if redis.call('HSETNX', key, 'gen', ARGV[1]) == 1 then record(rec, ARGV[1], ttl) end
if created then redis.call('HSET', key, 'boot', server_boot()) end
if ttl > 0 then
  redis.call('PEXPIRE', key, ttl)
  redis.call('PEXPIRE', rec, ttl)
end
return dropped
