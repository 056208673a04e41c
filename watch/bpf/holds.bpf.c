// SPDX-License-Identifier: (MIT OR GPL-2.0)
/*
 * nagless watch's kernel half: follows the writes TCP holds back, and reports each one an ACK
 * released late enough to be a Nagle/delayed-ACK stall. Userspace (watch/src/ebpf.rs) judges
 * each report with nagless_stall_rule::judge, the rule `nagless doctor` applies.
 *
 * Only BTF tracepoints (tp_btf): they need BPF trampolines no more than tracepoints do, and
 * load where fentry/fexit are refused (kernel lockdown refuses those).
 *
 * - sock:sock_send_length (a send on a socket returned): bytes written but not sent
 *   (write_seq past snd_nxt) while earlier data is unacknowledged (packets_out > 0) and the
 *   congestion window has room (packets_out < snd_cwnd): TCP holds them (Nagle, or cork,
 *   which the release tells apart). And, flagged as the sender's own cork, a send on a
 *   socket with TCP_CORK on, or one that left bytes unsent with nothing in flight and the
 *   peer's window open to them (Nagle sends then: MSG_MORE held them): no ACK will release
 *   them, and they are reported when the kernel's ceiling (its probe timer, 200 ms or the
 *   retransmission timeout) sends them, cork_min_ns or more after they were written. The hold (time, bytes, the writer's pid,
 *   tid, uid, cgroup and name) is kept per socket.
 * - tcp:tcp_probe (a segment arrives on an established socket): for a socket holding a write,
 *   the time, so the release can be tied to the segment whose ACK let the bytes go.
 * - net:net_dev_queue (a packet goes to a device): a data segment of a socket holding a write.
 *   If no ACK moved snd_una since the hold began, the bytes left without one (TCP_NODELAY set,
 *   uncork, a timer): the hold is dropped. Otherwise an ACK released them: if the write waited,
 *   or the ACK came after the newest segment then in flight was sent, min_hold_ns or longer
 *   (the stall rule's shortest delayed ACK), it goes to userspace through the ring buffer with
 *   both times and how long after the last arriving segment the bytes left.
 *   A hold an ACK released sooner, of fewer bytes than the MSS, that left within
 *   clock_gap_ns of the last arriving segment (the ACK let it go, as on an ACK-clocked
 *   connection), is added up per socket instead: a count and the time held, in the clocks
 *   map, which userspace drains (reads and deletes) every refresh.
 * - tcp:tcp_destroy_sock: the socket's hold, if any, is dropped.
 *
 * Nothing runs per socket: per send (a few loads), per arriving segment and per packet sent
 * (one hash lookup, which misses unless the socket holds a write); a short hold's release
 * adds one lookup and two atomic adds.
 *
 * Apart from these, an iterator (iter/task_file, `waits`) that userspace runs once a refresh
 * walks every process's open files, and writes out each TCP socket whose time the kernel
 * counts moved since the jiffy userspace names (its chronos: busy, receive-window limited,
 * send-buffer limited, as tcp_info gives them, in jiffies), with the process that holds it:
 * the whole wait, per workload, without a socket listing (watch/src/ebpf/waits.rs). And
 * sock:inet_sock_set_state, when a program closes a socket (or shuts its sending side down):
 * the same counters then, with that program, into the `closes` ring buffer, which userspace
 * drains with the events (a socket closed between two walks keeps its counts). And whose
 * turn it is: sock:sock_recv_length (`turn_read`) and sock:sock_send_length (`send_done`) keep,
 * in each TCP socket's own storage, the time from its program's last write to its first read
 * of data after it (the peer's turn: a server answering, the round trip) and from its last
 * read to its first write (its own: a server's time to answer), which the walks read with
 * the rest (a lookup of the socket's storage per read and per write).
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>

char LICENSE[] SEC("license") = "Dual MIT/GPL";

/* Set by the loader to nagless_stall_rule::DELAYED_ACK_MIN_US (in ns). */
const volatile __u64 min_hold_ns = 30000000;
/* Set by the loader to the latest release after the ACK the stall rule allows at the sender
 * (nagless_stall_rule::release_window_us(0, 0).1, in ns). */
const volatile __u64 clock_gap_ns = 2000000;
/* Set by the loader to the shortest cork the kernel's ceiling ends
 * (nagless_stall_rule::CORK_CEILING_US - CORK_EARLY_US, in ns). */
const volatile __u64 cork_min_ns = 190000000;

#define TCP_NAGLE_CORK 2
#define TCP_ESTABLISHED 1
#define TCP_CLOSE_WAIT 8
#define AF_INET 2
#define AF_INET6 10
#define IPPROTO_TCP 6
#define SOCK_STREAM 1

/* Read, summed over CPUs, into watch/src/ebpf/counters.rs's `Counters`, member by member
 * (its test reads this enum). */
enum counter {
	HOLDS,       /* holds begun */
	RELEASED,    /* released by an ACK */
	SENT_NO_ACK, /* left without an ACK releasing them */
	REPORTED,    /* released late enough to be sent up */
	LOST,        /* ring buffer full: reports lost */
	CLOCKED,     /* short holds released by an ACK, added to the clocks map */
	CLOSES,      /* sockets' counters sent up as a program closed them */
	CLOSES_LOST, /* those lost to a full ring buffer */
	N_COUNTERS,
};

struct hold {
	__u64 start_ns;
	__u64 sent_ns; /* when the last segment before the hold was sent (0: unknown) */
	__u64 seg_ns; /* when the last segment arrived during the hold (0: none yet) */
	__u64 cgroup;
	__u64 cookie;
	__u32 end_seq; /* write_seq after the last held write */
	__u32 una;     /* snd_una when the hold began */
	__u32 held;    /* most bytes held at once */
	__u32 mss;
	__u32 pid, tid, uid;
	__u8 zero_window, loss;
	__u8 cork;     /* the sender corked it (MSG_MORE, TCP_CORK): its own hold, not Nagle's */
	__u8 _pad[1];
	char comm[16];
};

/* What userspace reads; watch/src/ebpf/event.rs mirrors it, offsets asserted. */
struct event {
	__u64 cookie;      /* 0: the socket's cookie */
	__u64 hold_ns;     /* 8: from the held write to its release */
	__u64 cgroup;      /* 16 */
	__u32 pid;         /* 24 */
	__u32 tid;         /* 28 */
	__u32 uid;         /* 32 */
	__u32 held;        /* 36 */
	__u32 mss;         /* 40 */
	__u32 min_rtt_us;  /* 44 */
	__u32 srtt_us;     /* 48: smoothed RTT, µs */
	__u16 family;      /* 52 */
	__u16 sport;       /* 54: host order */
	__u16 dport;       /* 56: host order */
	__u8 flags;        /* 58: FLAG_ZERO_WINDOW, FLAG_CORK */
	__u8 loss;         /* 59 */
	__u8 saddr[16];    /* 60: IPv4 in the first 4 bytes */
	__u8 daddr[16];    /* 76 */
	char comm[16];     /* 92 */
	__u32 gap_us;      /* 108: from the last arriving segment to the release (~0 if none) */
	__u64 wait_ns;     /* 112: from the last segment sent before the hold to the release */
	__u64 released_ns; /* 120: the release (bpf_ktime_get_ns: CLOCK_MONOTONIC) */
};
_Static_assert(sizeof(struct event) == 128, "event layout");

/* The event's flags: the peer's window was shut during the hold; the hold began with nothing
 * in flight (a cork: reported when the kernel's ceiling released it, cork_min_ns or later). */
#define FLAG_ZERO_WINDOW 1
#define FLAG_CORK 2

/* Per socket (by cookie): the short holds an ACK released since userspace last drained it;
 * watch/src/ebpf/clock.rs mirrors it, offsets asserted. */
struct clock {
	__u64 held_ns;    /* 0: the time they waited, summed */
	__u64 count;      /* 8 */
	__u64 cgroup;     /* 16: the writer's, at the first hold */
	__u32 pid;        /* 24 */
	__u32 uid;        /* 28 */
	__u16 family;     /* 32 */
	__u16 sport;      /* 34: host order */
	__u16 dport;      /* 36: host order */
	__u8 _pad[2];     /* 38 */
	__u8 saddr[16];   /* 40: IPv4 in the first 4 bytes */
	__u8 daddr[16];   /* 56 */
	char comm[16];    /* 72 */
};
_Static_assert(sizeof(struct clock) == 88, "clock layout");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, __u64);
	__type(value, struct hold);
} holds SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, __u64);
	__type(value, struct clock);
} clocks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 256 * 1024);
} events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, N_COUNTERS);
	__type(key, __u32);
	__type(value, __u64);
} counters SEC(".maps");

static __always_inline void count(__u32 c)
{
	__u64 *v = bpf_map_lookup_elem(&counters, &c);
	if (v)
		*v += 1;
}

static __always_inline bool before(__u32 a, __u32 b)
{
	return (__s32)(a - b) < 0;
}

/* Through a trusted pointer (direct loads). */
static __always_inline __u8 in_loss_recovery(struct tcp_sock *tp)
{
	struct inet_connection_sock *icsk = &tp->inet_conn;
	return BPF_CORE_READ_BITFIELD(icsk, icsk_ca_state) != 0;
}

/* Through any pointer (probe reads). */
static __always_inline __u8 in_loss_recovery_probed(struct tcp_sock *tp)
{
	struct inet_connection_sock *icsk = &tp->inet_conn;
	return BPF_CORE_READ_BITFIELD_PROBED(icsk, icsk_ca_state) != 0;
}

/*
 * When the newest segment in flight was sent (the one whose ACK the held write waits for):
 * the last skb of the retransmit queue, an rbtree ordered by sequence (its rightmost node),
 * stamped with the same clock as bpf_ktime_get_ns. 0 if not found within 24 levels.
 */
static __always_inline __u64 last_sent_ns(struct sock *sk)
{
	struct rb_node *n = BPF_CORE_READ(sk, tcp_rtx_queue.rb_node);
	if (!n)
		return 0;
	for (int i = 0; i < 24; i++) {
		struct rb_node *r = BPF_CORE_READ(n, rb_right);
		if (!r) {
			struct sk_buff *skb =
				(void *)n - bpf_core_field_offset(struct sk_buff, rbnode);
			return BPF_CORE_READ(skb, skb_mstamp_ns);
		}
		n = r;
	}
	return 0;
}

/* `sk` as the TCP socket of an IPv4 or IPv6 stream (its family in *family), or NULL. Direct
 * loads: every caller's `sk` is a trusted pointer. */
static __always_inline struct tcp_sock *tcp_stream(struct sock *sk, unsigned short *family)
{
	if (sk->sk_protocol != IPPROTO_TCP || sk->sk_type != SOCK_STREAM)
		return NULL;
	*family = sk->__sk_common.skc_family;
	if (*family != AF_INET && *family != AF_INET6)
		return NULL;
	return bpf_skc_to_tcp_sock(sk);
}

/* Whose turn it is on a connection, as its program's reads and writes tell: after a write
 * its peer's (a client's request sent: the server answers, the path carries it), after a
 * read of data its program's (a server's request read: it answers; a client's answer read:
 * it makes its next request). A turn runs from the last write (or read) to the first read
 * (or write) after it, so what the program does between two reads of one request, or two
 * writes of one answer, is not a turn. Kept in the socket's own storage (freed with it) by
 * `turn_read` and `send_done`, and read by the walks and at closes with the other counters.
 * On a connection whose two directions run at once (HTTP/2, a stream each way) turns mean
 * little: the two sides' sums then share its time as its reads and writes alternate. */
#define TURN_READ 1
#define TURN_SENT 2
#define MSG_PEEK 2
#define MSG_ERRQUEUE 0x2000

struct turns {
	__u64 read_ns;    /* its program's last read of data (CLOCK_MONOTONIC) */
	__u64 sent_ns;    /* its last write */
	__u64 own_ns;     /* its program's turns ended, summed */
	__u64 peer_ns;    /* its peer's */
	__u32 own_turns;  /* its program's turns ended */
	__u32 peer_turns; /* its peer's */
	__u8 last;        /* TURN_READ or TURN_SENT: what it did last (0: neither yet) */
};

struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct turns);
} turns SEC(".maps");

/* The socket's program read data (TURN_READ) or wrote (TURN_SENT): the other side's turn,
 * if it was on, is over. (Two threads of one program, one reading and one writing, may race
 * on `last`; the sums themselves are added atomically.) */
static __always_inline void turn(struct sock *sk, __u8 did)
{
	struct turns *t = bpf_sk_storage_get(&turns, sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
	if (!t)
		return;
	__u64 now = bpf_ktime_get_ns();
	if (did == TURN_READ) {
		if (t->last == TURN_SENT && now > t->sent_ns) {
			__sync_fetch_and_add(&t->peer_ns, now - t->sent_ns);
			__sync_fetch_and_add(&t->peer_turns, 1);
		}
		t->read_ns = now;
	} else {
		if (t->last == TURN_READ && now > t->read_ns) {
			__sync_fetch_and_add(&t->own_ns, now - t->read_ns);
			__sync_fetch_and_add(&t->own_turns, 1);
		}
		t->sent_ns = now;
	}
	t->last = did;
}

/* A read on a socket returned data (not a peek, nor the error queue's timestamps). */
SEC("tp_btf/sock_recv_length")
int BPF_PROG(turn_read, struct sock *sk, int ret, int flags)
{
	if (!sk || ret <= 0 || (flags & (MSG_PEEK | MSG_ERRQUEUE)))
		return 0;
	unsigned short family;
	if (tcp_stream(sk, &family))
		turn(sk, TURN_READ);
	return 0;
}

SEC("tp_btf/sock_send_length")
int BPF_PROG(send_done, struct sock *sk, int ret, int flags)
{
	/* Direct loads through the tracepoint's typed pointers keep the common case, a send
	 * that leaves nothing held, cheap: the one lookup is the socket's own storage, for its
	 * turns. */
	if (!sk || ret <= 0)
		return 0;
	unsigned short family;
	struct tcp_sock *tp = tcp_stream(sk, &family);
	if (!tp)
		return 0;
	turn(sk, TURN_SENT);
	__u32 write_seq = tp->write_seq;
	__u32 snd_nxt = tp->snd_nxt;
	if (!before(snd_nxt, write_seq))
		return 0; /* all sent */
	__u32 packets_out = tp->packets_out;
	if (packets_out >= tp->snd_cwnd)
		return 0; /* the congestion window is full */
	/* The sender's own cork: TCP_CORK on; or, with nothing in flight (when Nagle holds
	 * nothing) and the peer's window open to all the bytes, a send with MSG_MORE (which the
	 * socket does not remember: this tracepoint's flags are the receive side's). */
	__u8 cork = BPF_CORE_READ_BITFIELD(tp, nonagle) & TCP_NAGLE_CORK;
	if (packets_out == 0 && !cork) {
		if (tp->snd_wnd == 0 || before(tp->snd_una + tp->snd_wnd, write_seq))
			return 0; /* a window too small for them holds them, not Nagle, no cork */
		cork = 1;
	}
	if (cork && tp->snd_wnd == 0)
		return 0; /* a shut window holds it, not the cork */
	unsigned char state = sk->__sk_common.skc_state;
	if (state != TCP_ESTABLISHED && state != TCP_CLOSE_WAIT)
		return 0;
	__u64 key = (__u64)sk;
	__u32 notsent = write_seq - snd_nxt;
	__u8 zw = tp->snd_wnd == 0;
	__u8 loss = in_loss_recovery(tp);
	struct hold *h = bpf_map_lookup_elem(&holds, &key);
	if (h && before(snd_nxt, h->end_seq)) {
		/* Still holding: this write joins the hold. */
		h->end_seq = write_seq;
		if (notsent > h->held)
			h->held = notsent;
		h->zero_window |= zw;
		h->loss |= loss;
		return 0;
	}
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	struct hold n = {
		.start_ns = bpf_ktime_get_ns(),
		.sent_ns = last_sent_ns(sk),
		.cgroup = bpf_get_current_cgroup_id(),
		.cookie = bpf_get_socket_cookie(sk),
		.end_seq = write_seq,
		.una = tp->snd_una,
		.held = notsent,
		.mss = tp->mss_cache,
		.pid = pid_tgid >> 32,
		.tid = (__u32)pid_tgid,
		.uid = (__u32)bpf_get_current_uid_gid(),
		.zero_window = zw,
		.loss = loss,
		.cork = cork,
	};
	bpf_get_current_comm(n.comm, sizeof(n.comm));
	bpf_map_update_elem(&holds, &key, &n, BPF_ANY);
	count(HOLDS);
	return 0;
}

SEC("tp_btf/tcp_probe")
int BPF_PROG(segment_in, struct sock *sk, struct sk_buff *skb)
{
	__u64 key = (__u64)sk;
	struct hold *h = bpf_map_lookup_elem(&holds, &key);
	if (h)
		h->seg_ns = bpf_ktime_get_ns();
	return 0;
}

SEC("tp_btf/tcp_destroy_sock")
int BPF_PROG(destroyed, struct sock *sk)
{
	__u64 key = (__u64)sk;
	bpf_map_delete_elem(&holds, &key);
	return 0;
}

/* The socket's local and remote addresses, into the 16-byte fields of the structs userspace
 * reads (IPv4 in the first 4 bytes, the rest left as they are). */
static __always_inline void addresses(struct sock *sk, __u16 family, __u8 (*saddr)[16],
				      __u8 (*daddr)[16])
{
	if (family == AF_INET) {
		__be32 s = BPF_CORE_READ(sk, __sk_common.skc_rcv_saddr);
		__be32 d = BPF_CORE_READ(sk, __sk_common.skc_daddr);
		__builtin_memcpy(*saddr, &s, 4);
		__builtin_memcpy(*daddr, &d, 4);
	} else {
		BPF_CORE_READ_INTO(saddr, sk, __sk_common.skc_v6_rcv_saddr.in6_u.u6_addr8);
		BPF_CORE_READ_INTO(daddr, sk, __sk_common.skc_v6_daddr.in6_u.u6_addr8);
	}
}

static __always_inline void report(struct sock *sk, struct tcp_sock *tp, struct hold *h,
				   __u64 now, __u64 hold_ns)
{
	struct event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e) {
		count(LOST);
		return;
	}
	e->cookie = h->cookie;
	e->hold_ns = hold_ns;
	e->cgroup = h->cgroup;
	e->pid = h->pid;
	e->tid = h->tid;
	e->uid = h->uid;
	e->held = h->held;
	e->mss = h->mss;
	e->min_rtt_us = BPF_CORE_READ(tp, rtt_min.s[0].v);
	e->srtt_us = BPF_CORE_READ(tp, srtt_us) >> 3;
	e->family = BPF_CORE_READ(sk, __sk_common.skc_family);
	e->sport = BPF_CORE_READ(sk, __sk_common.skc_num);
	e->dport = __builtin_bswap16(BPF_CORE_READ(sk, __sk_common.skc_dport));
	e->flags = (h->zero_window || BPF_CORE_READ(tp, snd_wnd) == 0 ? FLAG_ZERO_WINDOW : 0) |
		   (h->cork ? FLAG_CORK : 0);
	e->loss = h->loss || in_loss_recovery_probed(tp);
	__builtin_memset(e->saddr, 0, sizeof(e->saddr));
	__builtin_memset(e->daddr, 0, sizeof(e->daddr));
	addresses(sk, e->family, &e->saddr, &e->daddr);
	__builtin_memcpy(e->comm, h->comm, sizeof(e->comm));
	__u64 gap = h->seg_ns && now > h->seg_ns ? (now - h->seg_ns) / 1000 : 0;
	e->gap_us = gap > 0xffffffff ? 0xffffffff : (__u32)gap;
	e->wait_ns = h->sent_ns && now > h->sent_ns ? now - h->sent_ns : 0;
	e->released_ns = now;
	bpf_ringbuf_submit(e, 0);
	count(REPORTED);
}

/* A short hold an ACK released: added to its socket's clock (one lookup and two atomic adds;
 * the first of a drain interval also reads the socket's addresses). */
static __always_inline void clocked(struct sock *sk, struct hold *h, __u64 hold_ns)
{
	struct clock *c = bpf_map_lookup_elem(&clocks, &h->cookie);
	if (c) {
		__sync_fetch_and_add(&c->held_ns, hold_ns);
		__sync_fetch_and_add(&c->count, 1);
		count(CLOCKED);
		return;
	}
	struct clock n = {
		.held_ns = hold_ns,
		.count = 1,
		.cgroup = h->cgroup,
		.pid = h->pid,
		.uid = h->uid,
	};
	n.family = BPF_CORE_READ(sk, __sk_common.skc_family);
	n.sport = BPF_CORE_READ(sk, __sk_common.skc_num);
	n.dport = __builtin_bswap16(BPF_CORE_READ(sk, __sk_common.skc_dport));
	addresses(sk, n.family, &n.saddr, &n.daddr);
	__builtin_memcpy(n.comm, h->comm, sizeof(n.comm));
	/* (Another CPU may have added it meanwhile: then this hold is not counted.) */
	if (bpf_map_update_elem(&clocks, &h->cookie, &n, BPF_NOEXIST) == 0)
		count(CLOCKED);
}

SEC("tp_btf/net_dev_queue")
int BPF_PROG(packet_out, struct sk_buff *skb)
{
	struct sock *sk = skb->sk;
	if (!sk)
		return 0;
	__u64 key = (__u64)sk;
	struct hold *h = bpf_map_lookup_elem(&holds, &key);
	if (!h)
		return 0;
	/* Only data segments: the TCP payload is what follows the header. */
	unsigned char *head = skb->head;
	unsigned char *data = skb->data;
	__u16 th_off = skb->transport_header;
	__u8 doff = 0;
	bpf_probe_read_kernel(&doff, 1, head + th_off + 12);
	__s64 payload = (__s64)skb->len - (th_off - (data - head)) - (doff >> 4) * 4;
	if (payload <= 0)
		return 0;
	/* skb->sk is only RCU-protected: probe reads from here on (a socket holding a write). */
	struct tcp_sock *tp = (struct tcp_sock *)sk;
	/* A cork no arriving ACK ended just now (none moved snd_una, or none came within
	 * clock_gap_ns): the program sent the rest, cleared the cork, or the kernel's ceiling
	 * ended it; reported if that took cork_min_ns or more. One that left as an ACK arrived
	 * (a TCP_CORK hold whose program uncorked then) goes on as any hold, no longer a cork. */
	if (h->cork) {
		__u64 now = bpf_ktime_get_ns();
		bool acked = before(h->una, BPF_CORE_READ(tp, snd_una)) && h->seg_ns &&
			     now - h->seg_ns <= clock_gap_ns;
		h->cork = !acked;
		if (!acked) {
			__u64 hold_ns = now - h->start_ns;
			if (hold_ns >= cork_min_ns)
				report(sk, tp, h, now, hold_ns);
			else
				count(SENT_NO_ACK);
			bpf_map_delete_elem(&holds, &key);
			return 0;
		}
	}
	if (!before(h->una, BPF_CORE_READ(tp, snd_una))) {
		bpf_map_delete_elem(&holds, &key);
		count(SENT_NO_ACK);
		return 0;
	}
	__u64 now = bpf_ktime_get_ns();
	__u64 hold_ns = now - h->start_ns;
	__u64 wait_ns = h->sent_ns && now > h->sent_ns ? now - h->sent_ns : 0;
	count(RELEASED);
	if (hold_ns >= min_hold_ns || wait_ns >= min_hold_ns)
		report(sk, tp, h, now, hold_ns);
	else if (h->held < h->mss && h->seg_ns && now - h->seg_ns <= clock_gap_ns)
		clocked(sk, h, hold_ns);
	bpf_map_delete_elem(&holds, &key);
	return 0;
}

/* The waits iterator's settings, written by userspace before each walk: report only the
 * sockets whose chronos moved at or after the jiffy at [0] (low 32 bits; 0: every socket that
 * was ever busy or sent again, or had a turn), or whose program read or wrote at or after the
 * time at [1] (CLOCK_MONOTONIC ns). */
#define SINCE_JIFFY 0
#define SINCE_NS 1
/* How long a turn its program holds open is read at every walk. */
#define OPEN_TURN_NS 10000000000ULL
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, __u64);
} walk SEC(".maps");

/* One socket's counters, as the iterator writes them; watch/src/ebpf/waits.rs mirrors it,
 * offsets asserted. The times are tcp_info's chronos in jiffies, the running one included. */
struct waits {
	__u64 cookie;        /* 0 */
	__u64 cgroup;        /* 8: the holding task's cgroup (v2) id */
	__u64 busy_j;        /* 16 */
	__u64 rwnd_j;        /* 24 */
	__u64 sndbuf_j;      /* 32 */
	__u64 jiffies;       /* 40: bpf_jiffies64() when read */
	__u64 now_ns;        /* 48: bpf_ktime_get_ns() when read */
	__u32 total_retrans; /* 56 */
	__u32 pid;           /* 60: the holding process */
	__u32 uid;           /* 64 */
	__u16 family;        /* 68 */
	__u16 sport;         /* 70: host order */
	__u16 dport;         /* 72: host order */
	__u8 timeouts;       /* 74: timeouts in a row (icsk_retransmits) */
	__u8 probes;         /* 75: zero-window probes in a row (icsk_probes_out) */
	__u8 saddr[16];      /* 76: IPv4 in the first 4 bytes */
	__u8 daddr[16];      /* 92 */
	char comm[16];       /* 108 */
	__u8 backoff;        /* 124: icsk_backoff, the exponent of the next wait */
	__u8 _pad2[3];       /* 125 */
	__u64 own_ns;        /* 128: its program's turns ended, summed (struct turns) */
	__u64 peer_ns;       /* 136: its peer's */
	__u64 own_open_ns;   /* 144: the age of its program's turn, if one is open */
	__u64 peer_open_ns;  /* 152: of its peer's */
	__u32 own_turns;     /* 160: its program's turns ended */
	__u32 peer_turns;    /* 164: its peer's */
	__u32 min_rtt_us;    /* 168: the least round trip it saw (the kernel's windowed minimum) */
	__u32 _pad3;         /* 172 */
};
_Static_assert(sizeof(struct waits) == 176, "waits layout");

/* The sockets a program closes (or shuts the sending side of): their counters at that moment
 * and the process that closed them, which no walk can find once the files are gone. Drained
 * by userspace with the events (every 50 ms): 256 KiB, about 1,600 records of 168 bytes
 * (with the ring's header), room for some 32,000 closes a second. */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 256 * 1024);
} closes SEC(".maps");

/* Fills `w` with `tp`'s counters as they are now, as held by `task`; 0 (and `w` left
 * unfilled) for a socket that never counted anything (never busy, nothing sent again). */
static __always_inline int read_waits(struct sock *sk, struct tcp_sock *tp, unsigned short family,
				      struct task_struct *task, struct waits *w)
{
	__u8 type = BPF_CORE_READ_BITFIELD(tp, chrono_type);
	__u32 start = tp->chrono_start;
	__u64 jiffies = bpf_jiffies64();
	__u64 stat[3];
	for (int i = 0; i < 3; i++) {
		stat[i] = tp->chrono_stat[i];
		if (type == i + 1)
			stat[i] += (__u32)jiffies - start;
	}
	__u32 retrans = tp->total_retrans;
	struct turns *t = bpf_sk_storage_get(&turns, sk, 0, 0);
	if (stat[0] + stat[1] + stat[2] == 0 && retrans == 0 && !t)
		return 0; /* never busy, nor read nor written */
	w->cookie = bpf_get_socket_cookie(sk);
	w->cgroup = BPF_CORE_READ(task, cgroups, dfl_cgrp, kn, id);
	w->busy_j = stat[0] + stat[1] + stat[2];
	w->rwnd_j = stat[1];
	w->sndbuf_j = stat[2];
	w->jiffies = jiffies;
	w->now_ns = bpf_ktime_get_ns();
	w->total_retrans = retrans;
	w->pid = BPF_CORE_READ(task, tgid);
	w->uid = BPF_CORE_READ(task, cred, uid.val);
	w->family = family;
	w->sport = sk->__sk_common.skc_num;
	w->dport = __builtin_bswap16(sk->__sk_common.skc_dport);
	w->timeouts = tp->inet_conn.icsk_retransmits;
	w->probes = tp->inet_conn.icsk_probes_out;
	w->backoff = tp->inet_conn.icsk_backoff;
	w->min_rtt_us = tp->rtt_min.s[0].v;
	if (t) {
		__u64 now = w->now_ns;
		w->own_ns = t->own_ns;
		w->peer_ns = t->peer_ns;
		/* The turn open, if the connection ever went the other way too (a sink that
		 * never answers holds no request; a client that never had an answer waits for
		 * none). */
		if (t->last == TURN_READ && t->sent_ns && now > t->read_ns)
			w->own_open_ns = now - t->read_ns;
		if (t->last == TURN_SENT && t->read_ns && now > t->sent_ns)
			w->peer_open_ns = now - t->sent_ns;
		w->own_turns = t->own_turns;
		w->peer_turns = t->peer_turns;
	}
	addresses(sk, family, &w->saddr, &w->daddr);
	bpf_probe_read_kernel(w->comm, sizeof(w->comm), task->comm);
	return 1;
}

SEC("iter/task_file")
int waits(struct bpf_iter__task_file *ctx)
{
	struct task_struct *task = ctx->task;
	struct file *file = ctx->file;
	if (!task || !file)
		return 0;
	struct socket *sock = bpf_sock_from_file(file);
	if (!sock)
		return 0;
	struct sock *sk = sock->sk;
	if (!sk)
		return 0;
	unsigned short family;
	struct tcp_sock *tp = tcp_stream(sk, &family);
	if (!tp)
		return 0;
	__u32 key = SINCE_JIFFY, key_ns = SINCE_NS;
	__u64 *since = bpf_map_lookup_elem(&walk, &key);
	__u64 *since_ns = bpf_map_lookup_elem(&walk, &key_ns);
	__u8 type = BPF_CORE_READ_BITFIELD(tp, chrono_type);
	__u32 start = tp->chrono_start;
	__u8 timeouts = tp->inet_conn.icsk_retransmits;
	if (since && *since && type == 0 && timeouts == 0 && before(start, (__u32)*since)) {
		/* Its chronos idle since the last walk: read all the same if its program read or
		 * wrote since (an answer's bytes ACKed within a tick count no busy time), or has
		 * held a turn open for less than OPEN_TURN_NS (a server thinking over a request:
		 * the age of its turn; longer ones are read by the full walks, as idle clients
		 * whose last act was a read are). */
		struct turns *t = bpf_sk_storage_get(&turns, sk, 0, 0);
		if (!t || !since_ns)
			return 0;
		bool moved = t->read_ns >= *since_ns || t->sent_ns >= *since_ns;
		bool thinking = t->last == TURN_READ && bpf_ktime_get_ns() - t->read_ns < OPEN_TURN_NS;
		if (!moved && !thinking)
			return 0;
	}
	struct waits w = {};
	if (read_waits(sk, tp, family, task, &w))
		bpf_seq_write(ctx->meta->seq, &w, sizeof(w));
	return 0;
}

#define TCP_FIN_WAIT1 4
#define TCP_LAST_ACK 9

/* A program closes a socket, or shuts its sending side down (tcp_close, tcp_shutdown: in the
 * program's own context, so the current task is the one that held it): its counters now go
 * to the `closes` ring buffer. Not seen here: a socket reset or timed out (no program at
 * hand), and an abortive close (SO_LINGER 0, or unread data), which goes to TCP_CLOSE
 * directly, as a reset received in softirq does. */
SEC("tp_btf/inet_sock_set_state")
int BPF_PROG(closing, struct sock *sk, int oldstate, int newstate)
{
	if (newstate != TCP_FIN_WAIT1 && newstate != TCP_LAST_ACK)
		return 0;
	unsigned short family;
	struct tcp_sock *tp = tcp_stream(sk, &family);
	if (!tp)
		return 0;
	struct waits w = {};
	if (!read_waits(sk, tp, family, bpf_get_current_task_btf(), &w))
		return 0;
	if (bpf_ringbuf_output(&closes, &w, sizeof(w), 0))
		count(CLOSES_LOST);
	else
		count(CLOSES);
	return 0;
}
