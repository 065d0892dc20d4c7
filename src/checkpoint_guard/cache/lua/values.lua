-- KEYS[1], KEYS[2] the record; ARGV[1] epoch, ARGV[2..] fields -> their values | nil (epoch changed or a
-- value gone).
booted(KEYS[1], KEYS[2])
if redis.call('HGET', KEYS[1], 'epoch') ~= ARGV[1] then return nil end
local out = {}
if not append_values(KEYS[1], ARGV, 2, out) then return nil end
return out
