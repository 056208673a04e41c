//! The committed BPF object (watch/bpf/holds.bpf.o) is built from its source and the kernel
//! types it includes (see `nagless_test_support::bpf_object`).

#[test]
fn bpf_object_matches_its_source() {
    nagless_test_support::bpf_object::assert_built_from_source(
        env!("CARGO_MANIFEST_DIR"),
        "watch",
        "holds.bpf.o",
        &["holds.bpf.c", "vmlinux.h"],
    );
}
