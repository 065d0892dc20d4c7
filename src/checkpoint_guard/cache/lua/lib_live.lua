-- held_seed(key, seg): the seed field of segment seg ('-' for a segment without
-- one), or false when the segment is unknown or its seed value was dropped (extend
-- keeps at most MAX_SEEDS seed values per namespace and channel): every entry of
-- such a segment, and of its forks, reads as a miss, and nothing extends it.
local function held_seed(key, seg)
  local seedf = redis.call('HGET', key, 's:' .. seg)
  if not seedf then return false end
  if seedf ~= '-' and redis.call('HEXISTS', key, seedf) == 0 then return false end
  return seedf
end
-- live(key, p, seen): whether pointer value p ('segment,n,tag') names a segment
-- held_seed holds; seen memoizes it per segment (probes of one chain share a few).
local function live(key, p, seen)
  if not p then return false end
  local seg = string.match(p, '^(%x+),%d+,')
  if seg == nil then return false end
  if seen[seg] == nil then seen[seg] = held_seed(key, seg) ~= false end
  return seen[seg]
end
