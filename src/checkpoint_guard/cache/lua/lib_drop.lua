-- drop(key, fresh, ttl): deletes every entry of the hash but its fences ('fence' and
-- the 'f:' fields); a new epoch and generation. The field scan runs only when a
-- fence stands (rare), otherwise a drop is one DEL.
local function drop(key, fresh, ttl)
  local kept = {}
  if redis.call('HEXISTS', key, 'fence') == 1 then
    local fields = redis.call('HKEYS', key)
    for i = 1, #fields do
      local f = fields[i]
      if f == 'fence' or string.sub(f, 1, 2) == 'f:' then
        kept[#kept + 1] = f
        kept[#kept + 1] = redis.call('HGET', key, f)
      end
    end
  end
  redis.call('DEL', key)
  if #kept > 0 then redis.call('HSET', key, unpack(kept)) end
  redis.call('HSET', key, 'epoch', fresh, 'gen', fresh)
  if ttl > 0 then redis.call('PEXPIRE', key, ttl) end
end
