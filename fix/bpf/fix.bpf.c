// SPDX-License-Identifier: (MIT OR GPL-2.0)
/*
 * nagless fix's kernel half: a sock_ops program attached to a cgroup (v2). Every TCP
 * connection a process of that cgroup makes or accepts is handed to it as it becomes
 * established (BPF_SOCK_OPS_ACTIVE_ESTABLISHED_CB, BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB);
 * if its local or remote port is one of the configured ports (or no port is configured),
 * it sets, with bpf_setsockopt:
 *
 * - TCP_NODELAY (from BPF: Linux 6.1): the sender's fix (Nagle holds no small write for an
 *   ACK);
 * - TCP_BPF_DELACK_MAX (Linux 5.10): the receiver's fix for peers that cannot be changed
 *   (its delayed ACK waits at most that long; the kernel refuses less than two jiffies).
 *
 * Sockets charged to another cgroup than the selection's (a fix of one process that shares
 * its cgroup with others; a listener made before its process was moved: every socket it
 * accepts is charged where the listener was made) are reached by marks instead: `mine`
 * holds a mark per socket of the selection, set by mark_new (cgroup/sock_create, in process
 * context: the creating process is known) for the sockets the selected processes make, by
 * userspace for the sockets they hold already, and copied by the kernel to every connection
 * a marked listener accepts (BPF_F_CLONE). fix_marked, the same as fix_sockops but only for
 * marked sockets, is attached to the root cgroup, so that it sees them wherever they are
 * charged; nothing unmarked is touched. A socket both programs see gets the options once.
 *
 * Userspace (fix/src/attach.rs) fills `config` once before attaching and reads `counters`.
 * Connections that exist already are reached from userspace (fix/src/existing.rs).
 * Nothing runs per packet: the kernel calls it a few times per connection (its init
 * callbacks, then established), and it acts once.
 *
 * A second program, note_choice (cgroup/setsockopt, Linux 5.3), runs at every setsockopt a
 * process of the cgroup makes, and notes in `chosen` (per socket) the options of the fix's
 * that the program set itself: the fix's undo (fix/src/existing.rs) leaves those alone, so
 * that ending a fix never takes back a program's own TCP_NODELAY. The fix's own calls (made
 * on copies of the program's descriptors, from its own process, which may be in the cgroup
 * too) are taken off `chosen` again by userspace right after it makes them.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

char LICENSE[] SEC("license") = "Dual MIT/GPL";

#define SOL_TCP 6
#define IPPROTO_TCP 6
#define TCP_NODELAY 1
#define TCP_DELACK_MAX_US 46
#define MAX_PORTS 16

/* Mirrored by fix/src/plan.rs's `Config` (#[repr(C)], offsets asserted there; its test reads
 * this struct and MAX_PORTS). */
struct config {
	__u32 nodelay;       /* 1: set TCP_NODELAY */
	__u32 delack_max_us; /* 0: leave the delayed ACK alone; else TCP_BPF_DELACK_MAX */
	__u32 nports;        /* 0: every connection; else only these ports (local or remote) */
	__u16 ports[MAX_PORTS];
	__u32 fixer_tgid;    /* the nagless fix process (for `nagless fix --list`) */
	__u32 target_pid;    /* the process (and children) fixed; 0: the whole cgroup */
};

/* The processes of a fix of one process and its children (target_pid != 0): their tgids,
 * kept by userspace as children come and go. mark_new marks the sockets they make. */
#define MAX_TARGETED 4096

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_TARGETED);
	__type(key, __u32);
	__type(value, __u8);
} targeted SEC(".maps");

/* Bits of `mine` (read and written by fix/src/attach.rs too). */
#define MINE_MARKED 1  /* a socket of the selection */
#define MINE_APPLIED 2 /* the options were set on it (by either program) */

struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC | BPF_F_CLONE);
	__type(key, int);
	__type(value, __u32);
} mine SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct config);
} config SEC(".maps");

/* Read, summed over CPUs, into fix/src/attach.rs's `Counters`, member by member (its test
 * reads this enum, and the defines Rust shares). */
enum counter {
	ESTABLISHED,     /* connections seen becoming established */
	SELECTED,        /* of those, on a selected port */
	NODELAY_SET,     /* TCP_NODELAY set */
	DELACK_SET,      /* TCP_BPF_DELACK_MAX set */
	REFUSED,         /* a bpf_setsockopt the kernel refused */
	NCOUNTERS,
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, NCOUNTERS);
	__type(key, __u32);
	__type(value, __u64);
} counters SEC(".maps");

static __always_inline void count(__u32 which)
{
	__u64 *n = bpf_map_lookup_elem(&counters, &which);
	if (n)
		*n += 1;
}

static __always_inline int selected(const struct config *c, __u16 local, __u16 remote)
{
	if (c->nports == 0)
		return 1;
	for (int i = 0; i < MAX_PORTS; i++) {
		if (i >= c->nports)
			break;
		if (c->ports[i] == local || c->ports[i] == remote)
			return 1;
	}
	return 0;
}

/* Sets the configured options on the connection `ops` once it is established and on a
 * selected port; `marked_only`: only if it is marked as the selection's. */
static __always_inline int apply(struct bpf_sock_ops *ops, int marked_only)
{
	if (ops->op != BPF_SOCK_OPS_ACTIVE_ESTABLISHED_CB &&
	    ops->op != BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB)
		return 1;
	__u32 zero = 0;
	struct config *c = bpf_map_lookup_elem(&config, &zero);
	if (!c)
		return 1;
	struct bpf_sock *sk = ops->sk;
	if (!sk)
		return 1;
	__u32 *m = bpf_sk_storage_get(&mine, sk, 0, marked_only ? 0 : BPF_SK_STORAGE_GET_F_CREATE);
	if (marked_only && (!m || !(*m & MINE_MARKED)))
		return 1;
	/* Both programs may see one connection (charged to the selection's cgroup and marked):
	 * the first sets the options, the second leaves it. */
	if (m && (*m & MINE_APPLIED))
		return 1;
	if (m)
		*m |= MINE_APPLIED;
	count(ESTABLISHED);
	/* local_port is in host order; remote_port holds the network-order port in its upper
	 * half on little-endian hosts (bpf_ntohl puts it right). */
	__u16 local = (__u16)ops->local_port;
	__u16 remote = (__u16)bpf_ntohl(ops->remote_port);
	if (!selected(c, local, remote))
		return 1;
	count(SELECTED);
	if (c->nodelay) {
		int one = 1;
		if (bpf_setsockopt(ops, SOL_TCP, TCP_NODELAY, &one, sizeof(one)) == 0)
			count(NODELAY_SET);
		else
			count(REFUSED);
	}
	if (c->delack_max_us) {
		int us = c->delack_max_us;
		if (bpf_setsockopt(ops, SOL_TCP, TCP_BPF_DELACK_MAX, &us, sizeof(us)) == 0)
			count(DELACK_SET);
		else
			count(REFUSED);
	}
	return 1;
}

/* On the selection's cgroup, for a fix of the whole cgroup: every connection charged to it. */
SEC("sockops")
int fix_sockops(struct bpf_sock_ops *ops)
{
	return apply(ops, 0);
}

/* On the root cgroup: every marked connection, wherever it is charged. */
SEC("sockops")
int fix_marked(struct bpf_sock_ops *ops)
{
	return apply(ops, 1);
}

/* On the root cgroup, for a fix of one process and its children: marks each TCP socket one
 * of them makes (the kernel calls it in the process's context, at socket()). */
SEC("cgroup/sock_create")
int mark_new(struct bpf_sock *sk)
{
	if (sk->protocol != IPPROTO_TCP)
		return 1;
	__u32 zero = 0;
	struct config *c = bpf_map_lookup_elem(&config, &zero);
	if (!c || !c->target_pid)
		return 1;
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	if (!bpf_map_lookup_elem(&targeted, &tgid))
		return 1;
	__u32 *m = bpf_sk_storage_get(&mine, sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
	if (m)
		*m |= MINE_MARKED;
	/* 1: the socket is made as asked. */
	return 1;
}

/* Bits of `chosen`: the options a program set itself (read by fix/src/attach.rs). */
#define CHOSE_NODELAY 1
#define CHOSE_DELACK_MAX 2

struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, __u32);
} chosen SEC(".maps");

#define PAGE_SIZE 4096

SEC("cgroup/setsockopt")
int note_choice(struct bpf_sockopt *ctx)
{
	/* A value larger than a page: the kernel uses the caller's buffer (before Linux 6.5 it
	 * fails the call with EFAULT unless told so). No option of ours is that large. */
	if (ctx->optlen > PAGE_SIZE) {
		ctx->optlen = 0;
		return 1;
	}
	if (ctx->level != SOL_TCP)
		return 1;
	__u32 bit = ctx->optname == TCP_NODELAY	      ? CHOSE_NODELAY :
		    ctx->optname == TCP_DELACK_MAX_US ? CHOSE_DELACK_MAX :
							0;
	if (!bit)
		return 1;
	/* The fix's configuration is this program's too: `nagless fix --list` and the refusal of
	 * overlapping fixes read it through either program. */
	__u32 zero = 0;
	if (!bpf_map_lookup_elem(&config, &zero))
		return 1;
	struct bpf_sock *sk = ctx->sk;
	if (!sk)
		return 1;
	__u32 *v = bpf_sk_storage_get(&chosen, sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
	/* Setting the bit twice is harmless; two threads setting two options on one socket at
	 * the same instant could lose one (no 32-bit atomic OR before BPF ISA v3). */
	if (v)
		*v |= bit;
	/* 1: the kernel makes the call as asked (the buffer untouched). */
	return 1;
}
