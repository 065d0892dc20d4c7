-- newer(a, b): a byte-wise greater than b (nil b: true). Checkpoint ids are compared
-- byte by byte: Lua's own string operators follow the server's collation locale.
local function newer(a, b)
  if not b then return true end
  local n = math.min(#a, #b)
  for i = 1, n do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then return x > y end
  end
  return #a > #b
end
