-- KEYS[1]; ARGV[1] a fresh generation, ARGV[2] ttl ms, ARGV[3] the writer's f: field:
-- this writer's fence goes and a new generation starts (stores of readers that took
-- the old one fail). -> the fences left.
local key = KEYS[1]
local left = 0
if redis.call('HDEL', key, ARGV[3]) == 1 then
  left = redis.call('HINCRBY', key, 'fence', -1)
  if left <= 0 then redis.call('HDEL', key, 'fence') end
end
redis.call('HSET', key, 'gen', ARGV[1])
redis.call('HSETNX', key, 'epoch', ARGV[1])
local ttl = tonumber(ARGV[2])
if ttl > 0 then redis.call('PEXPIRE', key, ttl) end
return left
