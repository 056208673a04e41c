/* The few kernel types holds.bpf.c reads (and the context of the iterator it runs), declared by hand for CO-RE: only the fields used,
 * each relocated at load time against the running kernel's BTF (/sys/kernel/btf/vmlinux), so
 * their order and offsets here do not matter. */
#ifndef NAGLESS_VMLINUX_H
#define NAGLESS_VMLINUX_H

typedef unsigned char __u8;
typedef unsigned short __u16;
typedef unsigned int __u32;
typedef unsigned long long __u64;
typedef signed int __s32;
typedef signed long long __s64;
typedef __u16 __be16;
typedef __u32 __be32;
typedef __u32 __wsum;
typedef _Bool bool;
enum { false = 0, true = 1 };

enum { BPF_ANY = 0, BPF_NOEXIST = 1 };

enum bpf_map_type {
	BPF_MAP_TYPE_ARRAY = 2,
	BPF_MAP_TYPE_PERCPU_ARRAY = 6,
	BPF_MAP_TYPE_LRU_HASH = 9,
	BPF_MAP_TYPE_SK_STORAGE = 24,
	BPF_MAP_TYPE_RINGBUF = 27,
};

enum { BPF_F_NO_PREALLOC = 1 };
enum { BPF_SK_STORAGE_GET_F_CREATE = 1 };

#pragma clang attribute push(__attribute__((preserve_access_index)), apply_to = record)

struct in6_addr {
	union {
		__u8 u6_addr8[16];
	} in6_u;
};

struct sock_common {
	__be32 skc_daddr;
	__be32 skc_rcv_saddr;
	__be16 skc_dport;
	__u16 skc_num;
	unsigned short skc_family;
	volatile unsigned char skc_state;
	struct in6_addr skc_v6_daddr;
	struct in6_addr skc_v6_rcv_saddr;
};

struct rb_node {
	struct rb_node *rb_right;
};

struct rb_root {
	struct rb_node *rb_node;
};

struct sock {
	struct sock_common __sk_common;
	struct rb_root tcp_rtx_queue;
	__u16 sk_protocol;
	__u16 sk_type;
};

struct sk_buff {
	struct rb_node rbnode;
	__u64 skb_mstamp_ns;
	struct sock *sk;
	unsigned int len;
	__u16 transport_header;
	unsigned char *head;
	unsigned char *data;
};

struct inet_connection_sock {
	__u8 icsk_ca_state : 5;
	__u8 icsk_retransmits;
	__u8 icsk_probes_out;
	__u8 icsk_backoff;
};

struct minmax_sample {
	__u32 t;
	__u32 v;
};

struct minmax {
	struct minmax_sample s[3];
};

struct tcp_sock {
	struct inet_connection_sock inet_conn;
	__u32 snd_wnd;
	__u32 mss_cache;
	__u32 snd_cwnd;
	struct minmax rtt_min;
	__u32 write_seq;
	__u32 snd_nxt;
	__u32 snd_una;
	__u32 srtt_us;
	__u32 packets_out;
	__u32 total_retrans;
	__u32 chrono_start;
	__u32 chrono_stat[3];
	__u8 chrono_type : 2;
	__u8 nonagle : 4;
};

/* What the waits iterator (iter/task_file) reads: a task's files, and who the task is. */
struct seq_file;

struct kernfs_node {
	__u64 id;
};

struct cgroup {
	struct kernfs_node *kn;
};

struct css_set {
	struct cgroup *dfl_cgrp;
};

typedef struct {
	__u32 val;
} kuid_t;

struct cred {
	kuid_t uid;
};

struct task_struct {
	__s32 tgid;
	char comm[16];
	const struct cred *cred;
	struct css_set *cgroups;
};

struct file;

struct socket {
	struct sock *sk;
};

struct bpf_iter_meta {
	struct seq_file *seq;
	__u64 session_id;
	__u64 seq_num;
};

struct bpf_iter__task_file {
	struct bpf_iter_meta *meta;
	struct task_struct *task;
	__u32 fd;
	struct file *file;
};

#pragma clang attribute pop

#endif
