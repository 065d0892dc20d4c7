-- KEYS[1] thread hash, KEYS[2] its record; ARGV[1] pointer field; ARGV[2] the epoch whose values the
-- caller holds ('' for none); ARGV[3] the segment it knows positions of, ARGV[4] how
-- many, ARGV[5] the most values to return with the index. -> {epoch, index(...)} |
-- nil, followed, when the caller holds nothing of this epoch and the entry has at
-- most ARGV[5] values, by the values of the seed and of every chunk field: a cold
-- reader of a short entry gets everything in one round trip. A long entry's values
-- are fetched by the caller with a plain HMGET: passed through this script they
-- cost more (Lua copies every value twice) than the second round trip.
local key = KEYS[1]
booted(key, KEYS[2])
local epoch = redis.call('HGET', key, 'epoch')
if not epoch then return nil end
local cold = epoch ~= ARGV[2]
local out = {epoch}
local hseg, hknown = ARGV[3], tonumber(ARGV[4])
if cold then hseg, hknown = '', 0 end
if not index(key, ARGV[1], hseg, hknown, out) then return nil end
if not cold then return out end
local fields = {}
if out[2] ~= '-' then fields[1] = out[2] end
for i = 7, #out do fields[#fields + 1] = out[i] end
if #fields > tonumber(ARGV[5]) then return out end
if not append_values(key, fields, 1, out) then return nil end
return out
