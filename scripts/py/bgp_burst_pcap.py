"""The BGP burst in a capture of scripts/bench-bird: speaker A's byte stream rebuilt from its
data segments, cut into BGP messages; prints the burst (first UPDATE segment to the
End-of-RIB), the time from B's last data segment before it to the burst's end, A's data
segments, and a RESULT line.
usage: bgp_burst_pcap.py CAPTURE A_ADDRESS TAG PREFIX"""
import struct, sys, socket, statistics as st
path, a_ip, tag, prefix = sys.argv[1:5]
raw = open(path, 'rb').read()
magic = raw[:4]
end = '<' if magic in (b'\xd4\xc3\xb2\xa1', b'\x4d\x3c\xb2\xa1') else '>'
nano = magic in (b'\x4d\x3c\xb2\xa1', b'\xa1\xb2\x3c\x4d')
linktype = struct.unpack(end + 'I', raw[20:24])[0]
off, segs, peer = 24, [], []   # (time, seq, payload) from A; times of data segments from B
while off + 16 <= len(raw):
    ts, tf, incl, _ = struct.unpack(end + 'IIII', raw[off:off+16]); off += 16
    pkt = raw[off:off+incl]; off += incl
    t = ts + tf / (1e9 if nano else 1e6)
    if linktype == 1: pkt = pkt[14:]            # Ethernet (lo)
    elif linktype == 113: pkt = pkt[16:]        # Linux cooked
    elif linktype == 276: pkt = pkt[20:]
    if not pkt or pkt[0] >> 4 != 4 or pkt[9] != 6: continue
    ihl = (pkt[0] & 15) * 4; tot = struct.unpack('!H', pkt[2:4])[0]
    tcp = pkt[ihl:tot]; doff = (tcp[12] >> 4) * 4
    pl = tcp[doff:]
    if socket.inet_ntoa(pkt[12:16]) != a_ip:
        if pl: peer.append(ts + tf / (1e9 if nano else 1e6))
        continue
    if pl: segs.append((t, struct.unpack('!I', tcp[4:8])[0], pl))
if not segs: sys.exit("no data from A in capture")
# rebuild A's byte stream; note which segment carries each byte range (skip retransmits)
base = segs[0][1]; stream = bytearray(); owner = []; retx = 0
for i, (t, seq, pl) in enumerate(segs):
    rel = (seq - base) & 0xffffffff
    if rel + len(pl) <= len(stream): retx += 1; continue
    if rel > len(stream): sys.exit("gap in A's stream (capture dropped packets?)")
    new = pl[len(stream) - rel:]
    stream += new; owner += [i] * len(new)
msgs, p = [], 0             # (type, len, first_seg, last_seg, nprefixes)
while p + 19 <= len(stream):
    L, typ = struct.unpack('!HB', stream[p+16:p+19])
    if p + L > len(stream): break
    npfx = 0
    if typ == 2:
        m = stream[p+19:p+L]; wl = struct.unpack('!H', m[:2])[0]
        al = struct.unpack('!H', m[2+wl:4+wl])[0]; nl = m[4+wl+al:]; q = 0
        while q < len(nl): q += 1 + (nl[q] + 7) // 8; npfx += 1
    msgs.append((typ, L, owner[p], owner[p+L-1], npfx)); p += L
ups = [m for m in msgs if m[0] == 2 and m[4] > 0]
eor = [m for m in msgs if m[0] == 2 and m[1] == 23]
if not ups: sys.exit("no UPDATE with NLRI from A")
first = ups[0][2]; last = (eor[0] if eor else ups[-1])[3]
burst = [s for s in range(first, last + 1) if segs[s][2]]
sizes = [len(segs[s][2]) for s in burst]
per_seg = {}
for m in ups: per_seg[m[3]] = per_seg.get(m[3], 0) + 1
gaps = [segs[b][0] - segs[a][0] for a, b in zip(burst, burst[1:])]
dur = segs[last][0] - segs[first][0]
pfx = [m[4] for m in ups]
print(f"prefix           : {prefix or '(native)'}")
print(f"burst_us         : {dur*1e6:.0f}   (first UPDATE segment -> {'End-of-RIB' if eor else 'last UPDATE'} from A)")
print(f"updates          : {len(ups)}  prefixes: {sum(pfx)} (per UPDATE min/max {min(pfx)}/{max(pfx)})  update bytes: {sum(m[1] for m in ups)} (each {min(m[1] for m in ups)}..{max(m[1] for m in ups)})")
prev = [t for t in peer if t <= segs[first][0]]
if prev: print(f"since_peer_us    : {(segs[last][0]-prev[-1])*1e6:.0f}   (B's last data segment before the burst -> end of burst)")
print(f"end_of_rib       : {'yes' if eor else 'no'}")
print(f"data_segments    : {len(burst)}  (A->B, with payload, in the burst; retransmits in capture: {retx})")
print(f"segment_bytes    : min {min(sizes)} median {st.median(sizes):.0f} max {max(sizes)}")
print(f"updates/segment  : max {max(per_seg.values())}, mean {len(ups)/len(burst):.2f}")
if gaps: print(f"inter-seg gap us : median {st.median(gaps)*1e6:.0f} max {max(gaps)*1e6:.0f}")
since = f" since_peer_us={(segs[last][0]-prev[-1])*1e6:.0f}" if prev else ""
print(f"RESULT {tag} burst_us={dur*1e6:.0f}{since} updates={len(ups)} segments={len(burst)} eor={int(bool(eor))}")
