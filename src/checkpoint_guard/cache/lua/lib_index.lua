-- index(key, pointer, hint_segment, hint_known, out): appends one entry's index to
-- out: seed field or '-', segment, n, first, the pointer's tag, then the chunk fields
-- at positions first..n of the segment (the caller checks the tag against them).
-- The caller already holds positions 1..hint_known of
-- hint_segment (they never change within an epoch), so first = hint_known + 1 for
-- that segment and 1 otherwise: a warm read costs O(new chunks), not O(thread).
-- false when the entry is missing or incomplete. Needs held_seed (lib_live).
local function index(key, pointer, hseg, hknown, out)
  local p = redis.call('HGET', key, pointer)
  if not p then return false end
  local seg, n, tag = string.match(p, '^(%x+),(%d+),(.*)$')
  if not seg then return false end
  n = tonumber(n)
  local seedf = held_seed(key, seg)
  if not seedf then return false end
  local first = 1
  if seg == hseg then first = math.min(hknown, n) + 1 end
  out[#out + 1] = seedf
  out[#out + 1] = seg
  out[#out + 1] = n
  out[#out + 1] = first
  out[#out + 1] = tag
  -- in batches, stopping at the first missing position: the work is bounded by the
  -- fields that exist, whatever n a corrupt pointer claims
  for i = first, n, 500 do
    local names = {}
    for j = i, math.min(i + 499, n) do names[#names + 1] = 'q:' .. seg .. ':' .. j end
    local batch = redis.call('HMGET', key, unpack(names))
    for j = 1, #batch do
      if not batch[j] then return false end
      out[#out + 1] = batch[j]
    end
  end
  return true
end
