-- dask.lua: a Wireshark dissector for the Dask `distributed` wire protocol
-- (TCP and TLS-decrypted TCP; see man dask-caps(1) and the project README).
--
--   wireshark -X lua_script:dask.lua capture.pcap
--   tshark -X lua_script:dask.lua -r capture.pcap -Y dask.op -T fields -e dask.op
--
-- or copy it into the personal plugins folder (~/.local/lib/wireshark/plugins/).
--
-- One Dask message on TCP (all integers little-endian u64):
--   L | n | len[0] .. len[n-1] | frame 0 .. frame n-1
-- Frame 0 is msgpack; maps {"__Serialized__": k} / {"__Pickled__": k} in it
-- stand for objects whose msgpack sub-header is frame k and whose data are
-- the next "num-sub-frames" frames. L counts everything after itself in
-- Dask up to 2023.10 and only a prefix of the frames since 2023.11, so a
-- message is always delimited by n and the length table, and L is only
-- checked (it must end on a frame boundary).
--
-- Messages are reassembled across TCP segments (pinfo.desegment_len), and a
-- segment may hold several. The dissector is registered on the TCP port of
-- the preference dask.port (default 8786, the scheduler's) and as a
-- heuristic (short name dask_tcp) that recognises a connection by its first
-- message, so workers on random ports are found too.
--
-- It decodes msgpack itself, within fixed bounds (nesting, items shown), as
-- Wireshark's msgpack dissector is registered for UDP only and lacks the bin
-- types Dask uses. Pickles are never run: the type of an object is read
-- from its by-reference class pickle ("type-serialized") by looking at its
-- opcodes only. Frame data is not decompressed.

local dask = Proto("dask", "Dask distributed protocol")

local DEFAULT_PORT = 8786
local MAX_FRAMES = 1048576          -- frames in one message (dask-caps --max-frames)
local MAX_MESSAGE = 2147483647      -- bytes Wireshark can reassemble into one PDU
local MAX_DEPTH = 1024              -- msgpack nesting (dask-caps --max-msgpack-depth)
local REPR_BYTES = 40               -- as dask-caps names object paths

----------------------------------------------------------------------------
-- Fields

local F = {
  length = ProtoField.uint64("dask.length", "Length field L", base.DEC),
  nframes = ProtoField.uint64("dask.nframes", "Number of frames", base.DEC),
  frame_table = ProtoField.none("dask.frame_table", "Frame table"),
  frame_length = ProtoField.uint64("dask.frame_length", "Frame length", base.DEC),
  message_length = ProtoField.uint64("dask.message_length", "Message length", base.DEC),
  short_length = ProtoField.bool("dask.short_length", "Short first length (Dask 2023.11 and later)"),
  frame = ProtoField.uint32("dask.frame", "Frame", base.DEC),
  op = ProtoField.string("dask.op", "Operation"),
  batch = ProtoField.uint32("dask.batch", "Batched messages", base.DEC),
  handshake = ProtoField.none("dask.handshake", "Handshake"),
  hs_compression = ProtoField.string("dask.handshake.compression", "Compression"),
  hs_python = ProtoField.string("dask.handshake.python", "Python"),
  hs_pickle = ProtoField.int32("dask.handshake.pickle_protocol", "Pickle protocol", base.DEC),
  object = ProtoField.string("dask.object", "Object"),
  obj_placeholder = ProtoField.string("dask.object.placeholder", "Placeholder"),
  obj_header_frame = ProtoField.uint32("dask.object.header_frame", "Sub-header frame", base.DEC),
  obj_serializer = ProtoField.string("dask.object.serializer", "Serializer"),
  obj_type = ProtoField.string("dask.object.type", "Type"),
  obj_frame = ProtoField.uint32("dask.object.frame", "Data frame", base.DEC),
  obj_codec = ProtoField.string("dask.object.codec", "Codec"),
  obj_frame_length = ProtoField.uint64("dask.object.frame_length", "Wire bytes", base.DEC),
  loose_frame = ProtoField.uint32("dask.loose_frame", "Frame no object claims", base.DEC),
  msgpack = ProtoField.string("dask.msgpack", "msgpack"),
  error = ProtoField.string("dask.error", "Error"),
}
local field_list = {}
for _, f in pairs(F) do field_list[#field_list + 1] = f end
dask.fields = field_list

local E = {
  malformed = ProtoExpert.new("dask.malformed", "Malformed Dask message", expert.group.MALFORMED,
                              expert.severity.ERROR),
  prelude = ProtoExpert.new("dask.bad_prelude", "Not a Dask message prelude", expert.group.MALFORMED,
                            expert.severity.WARN),
  too_large = ProtoExpert.new("dask.too_large", "Message too large to reassemble",
                              expert.group.UNDECODED, expert.severity.WARN),
  truncated_tree = ProtoExpert.new("dask.tree_truncated", "msgpack tree shortened", expert.group.COMMENTS_GROUP,
                                   expert.severity.NOTE),
}
dask.experts = { E.malformed, E.prelude, E.too_large, E.truncated_tree }

dask.prefs.port = Pref.uint("TCP port", DEFAULT_PORT, "TCP port of Dask schedulers (workers are found by the heuristic)")
dask.prefs.tree_items = Pref.uint("msgpack items shown", 400,
                                  "Most msgpack values shown per message in the detail tree (decoding is not limited by it)")

----------------------------------------------------------------------------
-- Little helpers

-- A u64 at `off` of `tvb`, little-endian, as a Lua number, or nil when it
-- does not fit a double exactly (2^53).
local function le_u64(tvb, off)
  local v = tvb(off, 8):le_uint64()
  if v:higher() >= 2097152 then return nil end
  return v:higher() * 4294967296 + v:lower()
end

local function py_str_repr(s, max)
  if #s > max then return "'" .. s:sub(1, max) .. "'..." end
  return "'" .. s .. "'"
end

local function py_bytes_repr(s, max)
  local n = math.min(#s, max)
  local parts = { "b'" }
  for i = 1, n do
    local c = s:byte(i)
    if c == 92 or c == 39 then
      parts[#parts + 1] = "\\" .. string.char(c)
    elseif c >= 32 and c < 127 then
      parts[#parts + 1] = string.char(c)
    else
      parts[#parts + 1] = string.format("\\x%02x", c)
    end
  end
  parts[#parts + 1] = "'"
  if #s > n then parts[#parts + 1] = "...(" .. #s .. " bytes)" end
  return table.concat(parts)
end

----------------------------------------------------------------------------
-- msgpack: a bounded decoder over a Lua string.
--
-- A value is a table {k = kind, off = 0-based offset in the string, len =
-- its encoded size, v = ...}: kind "nil", "bool", "int" (v a number, or a
-- decimal string past 2^53), "float", "str" (v the string), "bin" and
-- "ext" (boff/blen: where the bytes are; xtype), "array" (v a list),
-- "map" (v a list of {key, val}). Errors are raised as {msgpack = text,
-- at = offset} and caught by decode().

local function mp_fail(at, why) error({ msgpack = why, at = at }, 0) end

local function be_uint(s, pos, n)  -- pos 1-based, n <= 6 bytes exactly
  local v = 0
  for i = 0, n - 1 do v = v * 256 + s:byte(pos + i) end
  return v
end

local function be_u64(s, pos)  -- number, or decimal string when >= 2^53
  local hi, lo = be_uint(s, pos, 4), be_uint(s, pos + 4, 4)
  if hi < 2097152 then return hi * 4294967296 + lo end
  return tostring(UInt64.new(lo, hi))
end

local function be_i64(s, pos)
  local hi, lo = be_uint(s, pos, 4), be_uint(s, pos + 4, 4)
  if hi >= 2147483648 then
    local shi = hi - 4294967296
    if shi >= -2097152 then return shi * 4294967296 + lo end
    return tostring(Int64.new(lo, hi))
  end
  if hi < 2097152 then return hi * 4294967296 + lo end
  return tostring(Int64.new(lo, hi))
end

local function be_float(s, pos, n)
  -- IEEE 754 by hand (no string.unpack in Lua 5.2).
  local b = { s:byte(pos, pos + n - 1) }
  local sign = b[1] >= 128 and -1 or 1
  local exp, mant, ebits, mbits
  if n == 4 then
    exp = (b[1] % 128) * 2 + math.floor(b[2] / 128)
    mant = ((b[2] % 128) * 256 + b[3]) * 256 + b[4]
    ebits, mbits = 255, 8388608
  else
    exp = (b[1] % 128) * 16 + math.floor(b[2] / 16)
    mant = (b[2] % 16)
    for i = 3, 8 do mant = mant * 256 + b[i] end
    ebits, mbits = 2047, 4503599627370496
  end
  local bias = (n == 4) and 127 or 1023
  if exp == ebits then
    if mant == 0 then return sign * math.huge end
    return 0 / 0
  elseif exp == 0 then
    return sign * (mant / mbits) * 2 ^ (1 - bias)
  end
  return sign * (1 + mant / mbits) * 2 ^ (exp - bias)
end

local decode_value

local function mp_need(s, pos, n, what)
  if n > #s - pos + 1 then
    mp_fail(pos - 1, string.format("%s needs %d bytes, %d left", what, n, #s - pos + 1))
  end
end

local function decode_container(s, pos, start, count, is_map, depth)
  if depth >= MAX_DEPTH then mp_fail(start - 1, "nesting deeper than " .. MAX_DEPTH) end
  -- Every element takes at least one byte: a count larger than what is
  -- left is an error before anything is allocated.
  local per = is_map and 2 or 1
  if count * per > #s - pos + 1 then
    mp_fail(start - 1, string.format("%s of %.0f %s in %d bytes", is_map and "map" or "array",
                                     count, is_map and "entries" or "elements", #s - pos + 1))
  end
  local items = {}
  for i = 1, count do
    if is_map then
      local key, val
      key, pos = decode_value(s, pos, depth + 1)
      val, pos = decode_value(s, pos, depth + 1)
      items[i] = { key, val }
    else
      items[i], pos = decode_value(s, pos, depth + 1)
    end
  end
  return { k = is_map and "map" or "array", off = start - 1, len = pos - start, v = items }, pos
end

decode_value = function(s, pos, depth)
  mp_need(s, pos, 1, "msgpack value")
  local start = pos
  local b = s:byte(pos)
  pos = pos + 1
  local function scalar(kind, v, size)
    return { k = kind, v = v, off = start - 1, len = size }, start + size
  end
  local function bytes(kind, header, blen, xtype)
    mp_need(s, start + header, blen, kind)
    return { k = kind, off = start - 1, len = header + blen, boff = start + header, blen = blen,
             xtype = xtype }, start + header + blen
  end
  local function str(header, slen)
    mp_need(s, start + header, slen, "str")
    return { k = "str", v = s:sub(start + header, start + header + slen - 1), off = start - 1,
             len = header + slen }, start + header + slen
  end
  if b <= 0x7f then return scalar("int", b, 1) end
  if b >= 0xe0 then return scalar("int", b - 256, 1) end
  if b >= 0x80 and b <= 0x8f then return decode_container(s, pos, start, b - 0x80, true, depth) end
  if b >= 0x90 and b <= 0x9f then return decode_container(s, pos, start, b - 0x90, false, depth) end
  if b >= 0xa0 and b <= 0xbf then return str(1, b - 0xa0) end
  if b == 0xc0 then return scalar("nil", nil, 1) end
  if b == 0xc2 then return scalar("bool", false, 1) end
  if b == 0xc3 then return scalar("bool", true, 1) end
  if b == 0xc4 or b == 0xc5 or b == 0xc6 then
    local w = (b == 0xc4) and 1 or (b == 0xc5) and 2 or 4
    mp_need(s, pos, w, "bin length")
    return bytes("bin", 1 + w, be_uint(s, pos, w))
  end
  if b == 0xc7 or b == 0xc8 or b == 0xc9 then
    local w = (b == 0xc7) and 1 or (b == 0xc8) and 2 or 4
    mp_need(s, pos, w + 1, "ext length")
    local xt = s:byte(pos + w)
    return bytes("ext", 2 + w, be_uint(s, pos, w), xt >= 128 and xt - 256 or xt)
  end
  if b == 0xca then mp_need(s, pos, 4, "float32"); return scalar("float", be_float(s, pos, 4), 5) end
  if b == 0xcb then mp_need(s, pos, 8, "float64"); return scalar("float", be_float(s, pos, 8), 9) end
  if b >= 0xcc and b <= 0xcf then
    local w = ({ [0xcc] = 1, [0xcd] = 2, [0xce] = 4, [0xcf] = 8 })[b]
    mp_need(s, pos, w, "uint")
    return scalar("int", w == 8 and be_u64(s, pos) or be_uint(s, pos, w), 1 + w)
  end
  if b >= 0xd0 and b <= 0xd3 then
    local w = ({ [0xd0] = 1, [0xd1] = 2, [0xd2] = 4, [0xd3] = 8 })[b]
    mp_need(s, pos, w, "int")
    local v
    if w == 8 then
      v = be_i64(s, pos)
    else
      v = be_uint(s, pos, w)
      if v >= 2 ^ (8 * w - 1) then v = v - 2 ^ (8 * w) end
    end
    return scalar("int", v, 1 + w)
  end
  if b >= 0xd4 and b <= 0xd8 then
    local blen = ({ [0xd4] = 1, [0xd5] = 2, [0xd6] = 4, [0xd7] = 8, [0xd8] = 16 })[b]
    mp_need(s, pos, 1, "ext type")
    local xt = s:byte(pos)
    return bytes("ext", 2, blen, xt >= 128 and xt - 256 or xt)
  end
  if b == 0xd9 or b == 0xda or b == 0xdb then
    local w = (b == 0xd9) and 1 or (b == 0xda) and 2 or 4
    mp_need(s, pos, w, "str length")
    return str(1 + w, be_uint(s, pos, w))
  end
  if b == 0xdc or b == 0xdd then
    local w = (b == 0xdc) and 2 or 4
    mp_need(s, pos, w, "array length")
    return decode_container(s, pos + w, start, be_uint(s, pos, w), false, depth)
  end
  if b == 0xde or b == 0xdf then
    local w = (b == 0xde) and 2 or 4
    mp_need(s, pos, w, "map length")
    return decode_container(s, pos + w, start, be_uint(s, pos, w), true, depth)
  end
  mp_fail(start - 1, string.format("byte 0x%02x starts no msgpack value", b))
end

-- Decodes one value spanning all of `s`; returns value or nil, error text,
-- 0-based offset of the error.
local function decode(s)
  local ok, value, pos = pcall(decode_value, s, 1, 0)
  if not ok then
    if type(value) == "table" and value.msgpack then return nil, value.msgpack, value.at end
    error(value, 0)
  end
  if pos <= #s then return nil, string.format("%d trailing bytes after the msgpack value", #s - pos + 1), pos - 1 end
  return value
end

local function find(map, key)
  if map == nil or map.k ~= "map" then return nil end
  for _, kv in ipairs(map.v) do
    if kv[1].k == "str" and kv[1].v == key then return kv[2] end
  end
  return nil
end

local function bin_bytes(s, v) return s:sub(v.boff, v.boff + v.blen - 1) end

local function nonneg_int(v)
  if v ~= nil and v.k == "int" and type(v.v) == "number" and v.v >= 0 then return v.v end
  return nil
end

-- A Python-like rendering, the way dask-caps names paths and values.
local function repr(s, v, max)
  local k = v.k
  if k == "nil" then return "None" end
  if k == "bool" then return v.v and "True" or "False" end
  if k == "int" then return type(v.v) == "number" and string.format("%.0f", v.v) or v.v end
  if k == "float" then return string.format("%.17g", v.v) end
  if k == "str" then return py_str_repr(v.v, max) end
  if k == "bin" then return py_bytes_repr(bin_bytes(s, v), max) end
  if k == "ext" then return "ExtType(" .. v.xtype .. ", " .. py_bytes_repr(bin_bytes(s, v), max) .. ")" end
  local parts = {}
  if k == "array" then
    for i, e in ipairs(v.v) do parts[i] = repr(s, e, max) end
    return "(" .. table.concat(parts, ", ") .. (#v.v == 1 and ",)" or ")")
  end
  for i, kv in ipairs(v.v) do parts[i] = repr(s, kv[1], max) .. ": " .. repr(s, kv[2], max) end
  return "{" .. table.concat(parts, ", ") .. "}"
end

----------------------------------------------------------------------------
-- The class a by-reference pickle names ("type-serialized"): its value
-- must be one GLOBAL or STACK_GLOBAL. Only opcodes are looked at.

local function pickle_class(p)
  local pos, stack, memo, memo_n = 1, {}, {}, 0
  local function need(n) return pos + n - 1 <= #p end
  local function le(n)
    local v = 0
    for i = n - 1, 0, -1 do v = v * 256 + p:byte(pos + i) end
    return v
  end
  local function line()
    local e = p:find("\n", pos, true)
    if e == nil then return nil end
    local l = p:sub(pos, e - 1)
    pos = e + 1
    return l
  end
  while pos <= #p do
    local op = p:byte(pos)
    pos = pos + 1
    if op == 0x80 then                     -- PROTO
      if not need(1) then return nil end
      pos = pos + 1
    elseif op == 0x95 then                 -- FRAME
      if not need(8) then return nil end
      pos = pos + 8
    elseif op == 0x8c or op == 0x58 or op == 0x8d or op == 0x55 or op == 0x54 then
      local w = (op == 0x8c or op == 0x55) and 1 or (op == 0x8d) and 8 or 4
      if not need(w) then return nil end
      local n = le(w)
      pos = pos + w
      if not need(n) then return nil end
      stack[#stack + 1] = { str = p:sub(pos, pos + n - 1) }
      pos = pos + n
    elseif op == 0x94 then                 -- MEMOIZE
      if #stack == 0 then return nil end
      memo[memo_n] = stack[#stack]
      memo_n = memo_n + 1
    elseif op == 0x71 or op == 0x72 then   -- BINPUT, LONG_BINPUT
      local w = op == 0x71 and 1 or 4
      if not need(w) or #stack == 0 then return nil end
      memo[le(w)] = stack[#stack]
      pos = pos + w
    elseif op == 0x68 or op == 0x6a then   -- BINGET, LONG_BINGET
      local w = op == 0x68 and 1 or 4
      if not need(w) then return nil end
      local v = memo[le(w)]
      if v == nil then return nil end
      stack[#stack + 1] = v
      pos = pos + w
    elseif op == 0x63 then                 -- GLOBAL
      local module, name = line(), nil
      if module ~= nil then name = line() end
      if name == nil then return nil end
      stack[#stack + 1] = { global = module ~= "" and (module .. "." .. name) or name }
    elseif op == 0x93 then                 -- STACK_GLOBAL
      local name, module = stack[#stack], stack[#stack - 1]
      if name == nil or module == nil or name.str == nil or module.str == nil then return nil end
      stack[#stack] = nil
      stack[#stack] = { global = module.str ~= "" and (module.str .. "." .. name.str) or name.str }
    elseif op == 0x2e then                 -- STOP
      if #stack == 1 and stack[1].global then return stack[1].global end
      return nil
    else
      return nil
    end
  end
  return nil
end

----------------------------------------------------------------------------
-- The message model (as dask-caps reads it)

-- Placeholders anywhere in frame 0, with the path that names them.
local function find_placeholders(s, v, path, out)
  if v.k == "map" then
    for _, key in ipairs({ "__Serialized__", "__Pickled__" }) do
      local idx = nonneg_int(find(v, key))
      if idx ~= nil and idx > 0 then
        out[#out + 1] = { kind = key, index = idx, path = path == "" and "<root>" or path }
        return
      end
    end
    for _, kv in ipairs(v.v) do
      local sub
      if path == "" then
        sub = kv[1].k == "str" and kv[1].v or repr(s, kv[1], REPR_BYTES)
      else
        sub = path .. "[" .. repr(s, kv[1], REPR_BYTES) .. "]"
      end
      find_placeholders(s, kv[2], sub, out)
    end
  elseif v.k == "array" then
    for i, e in ipairs(v.v) do find_placeholders(s, e, path .. "[" .. (i - 1) .. "]", out) end
  end
end

-- serializer and type of a sub-header (describe_header of dask-caps).
local function header_kind(s, header)
  local serializer, typ
  local sv = find(header, "serializer")
  if sv ~= nil and sv.k == "str" then serializer = sv.v end
  local ts = find(header, "type-serialized")
  if ts ~= nil and ts.k == "bin" then
    typ = pickle_class(bin_bytes(s, ts))
  elseif ts ~= nil and ts.k == "str" then
    typ = ts.v
  end
  if typ == nil then
    local t = find(header, "type")
    if t ~= nil and t.k == "str" then typ = t.v end
  end
  return serializer, typ
end

local function compression_text(s, v)
  if v == nil or v.k == "nil" then return "null" end
  if v.k == "bool" and v.v == false then return "false" end
  if v.k == "str" then return v.v end
  return repr(s, v, REPR_BYTES)
end

----------------------------------------------------------------------------
-- The detail tree of a msgpack value, at most `budget.left` items.

local function add_msgpack_tree(parent, tvb, base, s, v, label, budget, depth)
  if budget.left <= 0 then
    budget.cut = true
    return
  end
  budget.left = budget.left - 1
  local range = tvb(base + v.off, v.len)
  local k = v.k
  local text
  if k == "map" or k == "array" then
    text = string.format("%s%s (%d)", label, k, #v.v)
  elseif k == "bin" then
    text = string.format("%sbin (%d bytes)", label, v.blen)
  else
    text = label .. repr(s, v, 64)
  end
  local item = parent:add(F.msgpack, range, text)
  item:set_text(text)
  if (k == "map" or k == "array") and depth < 32 then
    for i, e in ipairs(v.v) do
      if budget.left <= 0 then
        budget.cut = true
        break
      end
      if k == "map" then
        local key = e[1].k == "str" and e[1].v or repr(s, e[1], 64)
        add_msgpack_tree(item, tvb, base, s, e[2], key .. ": ", budget, depth + 1)
      else
        add_msgpack_tree(item, tvb, base, s, e, "[" .. (i - 1) .. "] ", budget, depth + 1)
      end
    end
  end
end

----------------------------------------------------------------------------
-- One message

-- Reads the prelude at `off`. Returns "more", bytes needed (when the table
-- is not all there yet); "bad", reason; "large", reason (a valid prelude of
-- a message Wireshark cannot reassemble); or "ok", info.
local function read_prelude(tvb, off)
  local avail = tvb:len() - off
  if avail < 16 then return "more", 16 - avail end
  local L = le_u64(tvb, off)
  local n = le_u64(tvb, off + 8)
  if n == nil or n < 1 or n > MAX_FRAMES then
    return "bad", "frame count " .. tostring(tvb(off + 8, 8):le_uint64()) .. " is not 1.." .. MAX_FRAMES
  end
  local table_end = 16 + 8 * n
  if avail < table_end then return "more", table_end - avail end
  if L == nil then return "bad", "length field " .. tostring(tvb(off, 8):le_uint64()) .. " is too large" end
  local lengths, sum, prefix_ok = {}, 0, (L == 8 + 8 * n)
  for i = 0, n - 1 do
    local len = le_u64(tvb, off + 16 + 8 * i)
    if len == nil then
      return "bad", "frame " .. i .. " length " .. tostring(tvb(off + 16 + 8 * i, 8):le_uint64()) .. " is too large"
    end
    lengths[i] = len
    sum = sum + len
    if sum > 4503599627370496 then return "bad", "frame lengths add up past 2^52 bytes" end
    if L == 8 + 8 * n + sum then prefix_ok = true end
  end
  if not prefix_ok then
    return "bad", string.format("length field %.0f does not end on a frame boundary (8 + 8n = %.0f, all frames %.0f)",
                                L, 8 + 8 * n, 8 + 8 * n + sum)
  end
  local total = table_end + sum
  if total > MAX_MESSAGE then return "large", string.format("a message of %.0f bytes", total) end
  return "ok", { L = L, n = n, lengths = lengths, total = total, full = (L == 8 + 8 * n + sum) }
end

local function add_object(parent, tvb, s_of, frame_start, lengths, obj, is_element)
  local item
  local header_range = tvb(frame_start[obj.index], lengths[obj.index])
  item = parent:add(F.object, header_range, obj.path)
  item:add(F.obj_placeholder, header_range, obj.kind)
  item:add(F.obj_header_frame, header_range, obj.index)
  local s = s_of(obj.index)
  local serializer, typ
  if obj.kind == "__Serialized__" then serializer, typ = header_kind(s, obj.header) end
  if obj.element_header then serializer, typ = header_kind(s, obj.element_header) end
  if serializer ~= nil then item:add(F.obj_serializer, header_range, serializer) end
  if typ ~= nil then item:add(F.obj_type, header_range, typ) end
  local summary = { obj.path, obj.kind }
  if serializer then summary[#summary + 1] = "serializer=" .. serializer end
  if typ then summary[#summary + 1] = "type=" .. typ end
  item:set_text("Object " .. table.concat(summary, "  "))

  if not is_element then
    -- Per-frame codecs: the "compression" list, one entry per data frame.
    local list = find(obj.header, "compression")
    local codecs, problem = {}, nil
    if list ~= nil then
      if list.k ~= "array" then
        problem = "\"compression\" is not a list"
      elseif #list.v ~= obj.m then
        problem = string.format("\"compression\" has %d entries for %d frames", #list.v, obj.m)
      else
        for i, c in ipairs(list.v) do
          if c.k == "str" or c.k == "nil" or (c.k == "bool" and c.v == false) then
            codecs[i] = compression_text(s, c)
          else
            problem = "\"compression\" entry " .. (i - 1) .. " is " .. repr(s, c, REPR_BYTES)
          end
        end
      end
    end
    if problem then
      codecs = {}
      item:add_proto_expert_info(E.malformed, problem)
    end
    for i = 1, obj.m do
      local f = obj.index + i
      local fr = tvb(frame_start[f], lengths[f])
      local codec = codecs[i] or "null"
      local fi = item:add(F.obj_frame, fr, f)
      fi:add(F.obj_codec, fr, codec)
      fi:add(F.obj_frame_length, fr, UInt64.new(lengths[f]))
      fi:set_text(string.format("Data frame %d: %s, %.0f bytes", f, codec, lengths[f]))
    end

    -- Collections: one sub-header per element (their frames are the object's).
    local ic = find(obj.header, "is-collection")
    local subs = find(obj.header, "sub-headers")
    if obj.kind == "__Serialized__" and ic ~= nil and ic.k == "bool" and ic.v and subs ~= nil and subs.k == "array" then
      for i, sh in ipairs(subs.v) do
        local key = find(sh, "key")
        local path = obj.path .. "[" .. (key and repr(s, key, REPR_BYTES) or tostring(i - 1)) .. "]"
        add_object(item, tvb, s_of, frame_start, lengths,
                   { kind = obj.kind, index = obj.index, path = path, header = obj.header, element_header = sh }, true)
      end
    end
  else
    local ic = find(obj.element_header, "is-collection")
    local subs = find(obj.element_header, "sub-headers")
    if ic ~= nil and ic.k == "bool" and ic.v and subs ~= nil and subs.k == "array" then
      for i, sh in ipairs(subs.v) do
        local key = find(sh, "key")
        local path = obj.path .. "[" .. (key and repr(s, key, REPR_BYTES) or tostring(i - 1)) .. "]"
        add_object(item, tvb, s_of, frame_start, lengths,
                   { kind = obj.kind, index = obj.index, path = path, header = obj.header, element_header = sh }, true)
      end
    end
  end
  return item, summary
end

-- Dissects the complete message at `off` (prelude `p`); returns its one-line summary.
local function dissect_message(tvb, off, p, pinfo, tree)
  local mt = tree:add(dask, tvb(off, p.total))
  mt:add_le(F.length, tvb(off, 8))
  mt:add_le(F.nframes, tvb(off + 8, 8))
  mt:add(F.message_length, tvb(off, p.total), UInt64.new(p.total))
  if not p.full then mt:add(F.short_length, tvb(off, 8), true) end
  local ft = mt:add(F.frame_table, tvb(off + 16, 8 * p.n))
  ft:set_text(string.format("Frame table: %d frame%s", p.n, p.n == 1 and "" or "s"))
  local frame_start, at = {}, off + 16 + 8 * p.n
  for i = 0, p.n - 1 do
    local li = ft:add_le(F.frame_length, tvb(off + 16 + 8 * i, 8))
    li:prepend_text("[" .. i .. "] ")
    frame_start[i] = at
    at = at + p.lengths[i]
  end

  -- Frame strings are read only for msgpack frames, once each.
  local strings = {}
  local function s_of(i)
    if strings[i] == nil then strings[i] = tvb:raw(frame_start[i], p.lengths[i]) end
    return strings[i]
  end
  local function frame_range(i)
    if p.lengths[i] == 0 then return tvb(frame_start[i], 0) end
    return tvb(frame_start[i], p.lengths[i])
  end
  local frame_items = {}
  for i = 0, p.n - 1 do
    frame_items[i] = mt:add(F.frame, frame_range(i), i)
  end
  frame_items[0]:set_text(string.format("Frame 0: message, %.0f bytes", p.lengths[0]))

  local summary
  local budget = { left = dask.prefs.tree_items, cut = false }
  local s0 = s_of(0)
  local root, why, at_err = decode(s0)
  if root == nil then
    mt:add(F.error, frame_range(0), "frame 0: " .. why .. " @" .. (frame_start[0] + at_err - off))
      :add_proto_expert_info(E.malformed, "frame 0: " .. why)
    mt:append_text(", unreadable")
    return "unreadable message"
  end
  add_msgpack_tree(frame_items[0], tvb, frame_start[0], s0, root, "", budget, 0)

  local ops = {}
  local op = find(root, "op")
  if op ~= nil and op.k == "str" then
    mt:add(F.op, tvb(frame_start[0] + op.off, op.len), op.v)
    ops[1] = op.v
    summary = op.v
  elseif root.k == "array" then
    mt:add(F.batch, tvb(frame_start[0] + root.off, root.len), #root.v)
    for _, e in ipairs(root.v) do
      local eop = find(e, "op")
      if eop ~= nil and eop.k == "str" then
        mt:add(F.op, tvb(frame_start[0] + eop.off, eop.len), eop.v)
        ops[#ops + 1] = eop.v
      end
    end
    summary = "batch[" .. table.concat(ops, ",") .. "]"
  end

  if root.k == "map" and op == nil and (find(root, "pickle-protocol") or find(root, "compression")) then
    local hs = mt:add(F.handshake, frame_range(0))
    local parts = {}
    local c = find(root, "compression")
    if c ~= nil then
      local text = compression_text(s0, c)
      hs:add(F.hs_compression, tvb(frame_start[0] + c.off, c.len), text)
      parts[#parts + 1] = "compression=" .. text
    end
    local py = find(root, "python")
    if py ~= nil then
      local text
      if py.k == "array" then
        local vs = {}
        for i, e in ipairs(py.v) do vs[i] = repr(s0, e, REPR_BYTES) end
        text = table.concat(vs, ".")
      else
        text = repr(s0, py, REPR_BYTES)
      end
      hs:add(F.hs_python, tvb(frame_start[0] + py.off, py.len), text)
      parts[#parts + 1] = "python=" .. text
    end
    local pp = find(root, "pickle-protocol")
    if pp ~= nil then
      local range = tvb(frame_start[0] + pp.off, pp.len)
      if pp.k == "int" and type(pp.v) == "number" and pp.v >= -2147483648 and pp.v <= 2147483647 then
        hs:add(F.hs_pickle, range, pp.v)
      else
        hs:add_proto_expert_info(E.malformed, "pickle-protocol " .. repr(s0, pp, REPR_BYTES))
      end
      parts[#parts + 1] = "pickle-protocol=" .. repr(s0, pp, REPR_BYTES)
    end
    hs:set_text("Handshake: " .. table.concat(parts, " "))
    summary = "handshake " .. table.concat(parts, " ")
  end

  -- Objects: each placeholder's sub-header frame and data frames, checked
  -- as dask-caps does (inside the message, no frame held twice).
  local found = {}
  find_placeholders(s0, root, "", found)
  table.sort(found, function(a, b) return a.index < b.index end)
  local claimed = { [0] = true }
  local problem
  for _, obj in ipairs(found) do
    local where = obj.kind .. " at " .. obj.path
    if obj.index >= p.n then
      problem = string.format("%s points at frame %.0f of %d", where, obj.index, p.n)
      break
    end
    if claimed[obj.index] then
      problem = string.format("%s points at frame %.0f, which another object already holds", where, obj.index)
      break
    end
    local s = s_of(obj.index)
    local header, hwhy = decode(s)
    if header == nil then
      problem = "frame " .. obj.index .. ": " .. hwhy
      break
    end
    if header.k ~= "map" then
      problem = "frame " .. obj.index .. ": sub-header of " .. where .. " is a msgpack " .. header.k .. ", not a map"
      break
    end
    local m = nonneg_int(find(header, "num-sub-frames"))
    if m == nil then
      problem = "frame " .. obj.index .. ": sub-header of " .. where .. " has no integer \"num-sub-frames\""
      break
    end
    if m > p.n - 1 - obj.index then
      problem = string.format("frame %d: \"num-sub-frames\" %.0f runs past the last frame (%d frames)", obj.index, m, p.n)
      break
    end
    claimed[obj.index] = true
    for f = obj.index + 1, obj.index + m do
      if claimed[f] then
        problem = "frame " .. f .. " belongs to two objects (" .. where .. ")"
        break
      end
      claimed[f] = true
    end
    if problem then break end
    obj.header, obj.m = header, m
    add_msgpack_tree(frame_items[obj.index], tvb, frame_start[obj.index], s, header, "", budget, 0)
    frame_items[obj.index]:set_text(string.format("Frame %d: sub-header of %s, %.0f bytes", obj.index, obj.path, p.lengths[obj.index]))
    for f = obj.index + 1, obj.index + m do
      frame_items[f]:set_text(string.format("Frame %d: data of %s, %.0f bytes", f, obj.path, p.lengths[f]))
    end
  end
  if problem then
    mt:add(F.error, frame_range(0), problem):add_proto_expert_info(E.malformed, problem)
    mt:append_text(", unreadable")
    return (summary or "message") .. " (unreadable)"
  end
  local objects = {}
  for _, obj in ipairs(found) do
    add_object(mt, tvb, s_of, frame_start, p.lengths, obj, false)
    objects[#objects + 1] = obj.path
  end
  for i = 1, p.n - 1 do
    if not claimed[i] then
      mt:add(F.loose_frame, frame_range(i), i)
      frame_items[i]:set_text(string.format("Frame %d: no object claims it, %.0f bytes", i, p.lengths[i]))
    end
  end
  if budget.cut then mt:add_proto_expert_info(E.truncated_tree, "msgpack tree shortened (preference dask.tree_items)") end

  summary = summary or (root.k == "map" and "reply" or ("reply " .. repr(s0, root, 24)))
  if #objects > 0 then summary = summary .. " [" .. table.concat(objects, ", ") .. "]" end
  mt:append_text(string.format(", %s, %d frame%s, %.0f bytes", summary, p.n, p.n == 1 and "" or "s", p.total))
  return summary
end

----------------------------------------------------------------------------
-- The TCP dissector: every complete message in the segment, reassembly for
-- the rest.

function dask.dissector(tvb, pinfo, tree)
  local total = tvb:len()
  local off = 0
  local summaries = {}
  while off < total do
    local state, p = read_prelude(tvb, off)
    if state == "more" then
      pinfo.desegment_offset = off
      pinfo.desegment_len = p
      break
    elseif state == "bad" then
      if off == 0 then return 0 end  -- not ours (or not in step): leave it to others
      tree:add(dask, tvb(off)):add_proto_expert_info(E.prelude, p)
      off = total
      break
    elseif state == "large" then
      -- The rest of this connection cannot be followed.
      tree:add(dask, tvb(off)):add_proto_expert_info(E.too_large, p)
      off = total
      break
    end
    if total - off < p.total then
      pinfo.desegment_offset = off
      pinfo.desegment_len = p.total - (total - off)
      break
    end
    summaries[#summaries + 1] = dissect_message(tvb, off, p, pinfo, tree)
    off = off + p.total
  end
  if #summaries > 0 then
    pinfo.cols.protocol = "Dask"
    pinfo.cols.info = table.concat(summaries, "; ")
  end
  return total
end

-- The heuristic: a whole valid prelude at the start of the segment and
-- frame 0 starting with a msgpack map or array (a handshake, a request or
-- a batch).
local function heuristic(tvb, pinfo, tree)
  if tvb:len() < 25 then return false end
  local state, p = read_prelude(tvb, 0)
  if state ~= "ok" then return false end
  local first_frame = 16 + 8 * p.n
  if p.lengths[0] < 1 or tvb:len() <= first_frame then return false end
  local b = tvb(first_frame, 1):uint()
  if not ((b >= 0x80 and b <= 0x9f) or b == 0xdc or b == 0xdd or b == 0xde or b == 0xdf) then return false end
  pinfo.conversation = dask
  dask.dissector(tvb, pinfo, tree)
  return true
end

local registered_port = nil
local function register_port()
  local tcp_port = DissectorTable.get("tcp.port")
  if registered_port ~= nil then tcp_port:remove(registered_port, dask) end
  registered_port = dask.prefs.port
  if registered_port ~= 0 then tcp_port:add(registered_port, dask) end
end

function dask.prefs_changed()
  if registered_port ~= dask.prefs.port then register_port() end
end

register_port()
dask:register_heuristic("tcp", heuristic)
