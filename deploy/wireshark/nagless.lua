-- nagless.lua: marks what `nagless doctor` found in a capture on the frames Wireshark shows.
--
-- Each stall (a small write Nagle held until a delayed ACK released it) is marked on the held
-- segment and on the ACK that released it, as expert info (Analyze > Expert Information) and
-- as fields a display filter can use:
--
--   nagless              the protocol: present on every marked frame
--   nagless.stall        true on the held segment and the releasing ACK of a stall
--   nagless.kind         what was found: "stall" (more kinds come as data, see below)
--   nagless.role         "held" (the held write) or "release" (the ACK that released it)
--   nagless.delay        the ACK's delay beyond the round trip: the time the write lost, ms
--   nagless.direction    "client->server" or "server->client" (which way the held write went)
--   nagless.sender       the held write's sender, ip:port
--   nagless.held_len     payload bytes of the held write
--   nagless.pattern      request-split, header-then-body, tiny-trailing-frame, small-writes,
--                        event-stream, tls-first-answer, relay-hop
--   nagless.flow         the flow's number in the doctor's report (`--flow N`)
--   nagless.peer_frame   the other frame of the pair (the ACK for a held write, and back)
--
-- It reads the doctor's JSON (docs/doctor-json.md), made for the same capture file:
--
--   nagless doctor --json --every-stall --top 0 slow.pcap > slow.nagless.json
--   NAGLESS_FINDINGS=slow.nagless.json wireshark slow.pcap
--   NAGLESS_FINDINGS=slow.nagless.json tshark -r slow.pcap -X lua_script:nagless.lua -Y nagless.stall
--
-- or with the path in the preference "nagless.findings" (Edit > Preferences > Protocols >
-- NAGLESS, or `-o nagless.findings:FILE`). Frame numbers are the doctor's: 1-based, in
-- capture order, as Wireshark numbers them (pcap and pcapng alike).
--
-- Kinds are data, not code: besides each flow's `stalls`, every entry of a flow's `findings`
-- array (if the doctor emits one) is marked the same way: {"kind": "...", "frames":
-- [{"frame": N, "role": "..."}], "delay_ms": D, "direction": "...", "summary": "..."}. A new
-- verdict (an ACK-clocked stretch, say) needs no change here: its frames get nagless.kind
-- set to its kind, and expert info with its summary.
--
-- Install: copy to ~/.local/lib/wireshark/plugins/ (Wireshark 4.x on Linux; see Help >
-- About > Folders), or load it for one run with `-X lua_script:PATH`.

local nagless = Proto("nagless", "nagless doctor findings")

local f = {
    stall = ProtoField.bool("nagless.stall", "Nagle/delayed-ACK stall"),
    kind = ProtoField.string("nagless.kind", "Kind"),
    role = ProtoField.string("nagless.role", "Role"),
    delay = ProtoField.double("nagless.delay", "Delay (ms)"),
    direction = ProtoField.string("nagless.direction", "Direction"),
    sender = ProtoField.string("nagless.sender", "Sender"),
    held_len = ProtoField.uint32("nagless.held_len", "Held bytes"),
    pattern = ProtoField.string("nagless.pattern", "Pattern"),
    flow = ProtoField.uint32("nagless.flow", "Flow (nagless doctor --flow)"),
    peer = ProtoField.framenum("nagless.peer_frame", "Other frame"),
    summary = ProtoField.string("nagless.summary", "Summary"),
}
nagless.fields = { f.stall, f.kind, f.role, f.delay, f.direction, f.sender, f.held_len,
    f.pattern, f.flow, f.peer, f.summary }

local e_held = ProtoExpert.new("nagless.held", "Nagle held this write until a delayed ACK",
    expert.group.SEQUENCE, expert.severity.WARN)
local e_release = ProtoExpert.new("nagless.release", "This delayed ACK released a held write",
    expert.group.SEQUENCE, expert.severity.WARN)
local e_finding = ProtoExpert.new("nagless.finding", "nagless doctor finding",
    expert.group.SEQUENCE, expert.severity.NOTE)
nagless.experts = { e_held, e_release, e_finding }

nagless.prefs.findings = Pref.string("Findings file",
    "", "JSON written by `nagless doctor --json --every-stall --top 0 CAPTURE` "
    .. "(the environment variable NAGLESS_FINDINGS is used when this is empty)")

-- A small JSON reader (objects, arrays, strings, numbers, true/false/null): enough for the
-- doctor's output, with no library Wireshark may lack.
local function json_decode(s)
    local pos = 1
    local value
    local function ws()
        pos = s:find("[^ \t\r\n]", pos) or #s + 1
    end
    local function err(what)
        error(string.format("nagless: bad findings JSON at byte %d: %s", pos, what))
    end
    local escapes = { b = "\b", f = "\f", n = "\n", r = "\r", t = "\t" }
    local function str()
        pos = pos + 1
        local out = {}
        while true do
            local c = s:sub(pos, pos)
            if c == "" then err("unterminated string") end
            if c == '"' then pos = pos + 1; return table.concat(out) end
            if c == "\\" then
                local n = s:sub(pos + 1, pos + 1)
                if n == "u" then
                    local code = tonumber(s:sub(pos + 2, pos + 5), 16) or 63
                    out[#out + 1] = code < 128 and string.char(code) or "?"
                    pos = pos + 6
                else
                    out[#out + 1] = escapes[n] or n
                    pos = pos + 2
                end
            else
                out[#out + 1] = c
                pos = pos + 1
            end
        end
    end
    function value()
        ws()
        local c = s:sub(pos, pos)
        if c == "{" then
            local t = {}
            pos = pos + 1
            ws()
            if s:sub(pos, pos) == "}" then pos = pos + 1; return t end
            while true do
                ws()
                if s:sub(pos, pos) ~= '"' then err("key expected") end
                local k = str()
                ws()
                if s:sub(pos, pos) ~= ":" then err("':' expected") end
                pos = pos + 1
                t[k] = value()
                ws()
                local d = s:sub(pos, pos)
                pos = pos + 1
                if d == "}" then return t end
                if d ~= "," then err("',' or '}' expected") end
            end
        elseif c == "[" then
            local t = {}
            pos = pos + 1
            ws()
            if s:sub(pos, pos) == "]" then pos = pos + 1; return t end
            while true do
                t[#t + 1] = value()
                ws()
                local d = s:sub(pos, pos)
                pos = pos + 1
                if d == "]" then return t end
                if d ~= "," then err("',' or ']' expected") end
            end
        elseif c == '"' then
            return str()
        elseif s:sub(pos, pos + 3) == "true" then
            pos = pos + 4; return true
        elseif s:sub(pos, pos + 4) == "false" then
            pos = pos + 5; return false
        elseif s:sub(pos, pos + 3) == "null" then
            pos = pos + 4; return nil
        else
            local num = s:match("^-?%d+%.?%d*[eE]?[-+]?%d*", pos)
            if not num or num == "" then err("value expected") end
            pos = pos + #num
            return tonumber(num)
        end
    end
    return value()
end

-- Marks by frame number: a list of {kind, role, delay, direction, sender, held_len, pattern,
-- flow, peer, summary}.
local marks = nil
local loaded_from = nil

local function add(frame, m)
    if type(frame) ~= "number" then return end
    local list = marks[frame]
    if not list then list = {}; marks[frame] = list end
    list[#list + 1] = m
end

local function load()
    local path = nagless.prefs.findings
    if path == nil or path == "" then path = os.getenv("NAGLESS_FINDINGS") end
    if path == nil or path == "" then marks = {}; return end
    if marks and loaded_from == path then return end
    marks, loaded_from = {}, path
    local fh, why = io.open(path, "rb")
    if not fh then
        io.stderr:write("nagless: cannot read findings " .. path .. ": " .. tostring(why) .. "\n")
        return
    end
    local text = fh:read("*a")
    fh:close()
    local ok, doc = pcall(json_decode, text)
    if not ok or type(doc) ~= "table" then
        io.stderr:write("nagless: " .. tostring(doc) .. "\n")
        return
    end
    for _, flow in ipairs(doc.flows or {}) do
        for _, st in ipairs(flow.stalls or {}) do
            local held = st.held and st.held.frame
            local ack = st.ack and st.ack.frame
            local base = {
                kind = st.kind or "stall",
                delay = (st.stalled_us or 0) / 1000,
                direction = st.direction,
                sender = st.sender,
                held_len = st.held_len,
                pattern = st.pattern,
                flow = flow.index,
            }
            local h, a = {}, {}
            for k, v in pairs(base) do h[k] = v; a[k] = v end
            h.role, h.peer = "held", ack
            a.role, a.peer = "release", held
            add(held, h)
            add(ack, a)
        end
        -- Findings of any other kind, as data.
        for _, fd in ipairs(flow.findings or {}) do
            for _, fr in ipairs(fd.frames or {}) do
                add(fr.frame, {
                    kind = fd.kind or "finding",
                    role = fr.role,
                    delay = fd.delay_ms,
                    direction = fd.direction,
                    summary = fd.summary,
                    flow = flow.index,
                })
            end
        end
    end
end

function nagless.init()
    marks = nil
    loaded_from = nil
end

function nagless.dissector(tvb, pinfo, tree)
    if not marks then load() end
    local list = marks[pinfo.number]
    if not list then return end
    for _, m in ipairs(list) do
        local t = tree:add(nagless, tvb(0, 0))
        t:append_text(string.format(": %s (%s)", m.kind, m.role or "-"))
        if m.kind == "stall" then t:add(f.stall, true) end
        t:add(f.kind, m.kind)
        if m.role then t:add(f.role, m.role) end
        if m.delay then t:add(f.delay, m.delay) end
        if m.direction then t:add(f.direction, m.direction) end
        if m.sender then t:add(f.sender, m.sender) end
        if m.held_len then t:add(f.held_len, m.held_len) end
        if m.pattern then t:add(f.pattern, m.pattern) end
        if m.flow then t:add(f.flow, m.flow) end
        if m.peer then t:add(f.peer, m.peer) end
        if m.summary then t:add(f.summary, m.summary) end
        if m.kind == "stall" and m.role == "held" then
            t:add_proto_expert_info(e_held, string.format(
                "Nagle held this %d-byte write %.1f ms until the delayed ACK in frame %d (%s)",
                m.held_len or 0, m.delay or 0, m.peer or 0, m.pattern or "?"))
        elseif m.kind == "stall" then
            t:add_proto_expert_info(e_release, string.format(
                "This ACK came %.1f ms late and released the write held in frame %d",
                m.delay or 0, m.peer or 0))
        else
            t:add_proto_expert_info(e_finding, string.format("nagless %s: %s",
                m.kind, m.summary or m.role or ""))
        end
    end
end

register_postdissector(nagless)
