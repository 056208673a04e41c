//! The committed BPF object (fix/bpf/fix.bpf.o) is built from its source (see
//! `nagless_test_support::bpf_object`).

#[test]
fn bpf_object_matches_its_source() {
    nagless_test_support::bpf_object::assert_built_from_source(
        env!("CARGO_MANIFEST_DIR"),
        "fix",
        "fix.bpf.o",
        &["fix.bpf.c"],
    );
}
