-- KEYS[1], KEYS[2] the record; ARGV[1] a fresh generation, ARGV[2] ttl ms, ARGV[3] the writer's f: field:
-- this writer's fence goes and a new generation starts (stores of readers that took
-- the old one fail); when its fence is already gone (the hash was lost while the write
-- ran: eviction, expiry, FLUSHDB), the thread is dropped too. -> the fences left.
local key, rec = KEYS[1], KEYS[2]
local left = 0
if redis.call('HDEL', key, ARGV[3]) == 1 then
  left = redis.call('HINCRBY', key, 'fence', -1)
  if left <= 0 then redis.call('HDEL', key, 'fence') end
else
  -- the fence went with the hash while the write ran, so a reader may have stored
  -- an entry computed before the write landed: drop it (speed, never correctness)
  drop(key, rec, ARGV[1], tonumber(ARGV[2]))
end
redis.call('HSET', key, 'gen', ARGV[1])
redis.call('HSETNX', key, 'epoch', ARGV[1])
local ttl = tonumber(ARGV[2])
if ttl > 0 then redis.call('PEXPIRE', key, ttl) end
record(rec, ARGV[1], ttl)
return left
