-- KEYS[1], KEYS[2] the record; ARGV[1] a fresh id, ARGV[2] ttl ms: drop every
-- entry (fences stay).
drop(KEYS[1], KEYS[2], ARGV[1], tonumber(ARGV[2]))
return 1
