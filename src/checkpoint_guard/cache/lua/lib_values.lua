-- append_values(key, fields, first, out): appends the values of fields[first..] to
-- out; false when one is gone (the entry is incomplete: a miss, never a partial hit).
local function append_values(key, fields, first, out)
  for i = first, #fields, 500 do
    local batch = redis.call('HMGET', key, unpack(fields, i, math.min(i + 499, #fields)))
    for j = 1, #batch do
      if not batch[j] then return false end
      out[#out + 1] = batch[j]
    end
  end
  return true
end
