//! Compiles the variadic exec functions (`c/execl.c`), which stable Rust cannot define.
fn main() {
    println!("cargo:rerun-if-changed=c/execl.c");
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        cc::Build::new()
            .file("c/execl.c")
            .warnings(true)
            .extra_warnings(true)
            .compile("nagless_execl");
    }
}
