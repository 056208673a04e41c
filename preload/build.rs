//! Compiles what stable Rust cannot write: the variadic exec functions (`c/execl.c`) and an
//! initial-exec thread-local counter (`c/handler_depth.c`).
fn main() {
    println!("cargo:rerun-if-changed=c");
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        cc::Build::new()
            .file("c/execl.c")
            .file("c/handler_depth.c")
            .warnings(true)
            .extra_warnings(true)
            .compile("nagless_execl");
    }
}
