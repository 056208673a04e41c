//! Built with `panic = "abort"` by `tests/panic_abort.rs`: makes a tokio stream on a runtime
//! with or without a timer (`timer` / `no-timer`), one with a policy that needs no timer on a
//! runtime without one (`no-timer-explicit`), or a local stream outside a `LocalSet`
//! (`local`), and says how far it got.
fn main() {
    let what = std::env::args().nth(1).unwrap_or_default();
    let mut b = tokio::runtime::Builder::new_current_thread();
    b.enable_io();
    if !what.starts_with("no-timer") {
        b.enable_time();
    }
    let rt = b.build().unwrap();
    rt.block_on(async {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let tcp = tokio::net::TcpStream::connect(l.local_addr().unwrap())
            .await
            .unwrap();
        eprintln!("making the stream");
        let made = if what == "local" {
            nagless::tokio_adapter::NaglessStream::from_io_local(tcp, Default::default()).is_ok()
        } else if what == "no-timer-explicit" {
            nagless::tokio_adapter::NaglessStream::with_policy(
                tcp,
                nagless::FlushPolicy::explicit_only(),
            )
            .is_ok()
        } else {
            nagless::tokio_adapter::NaglessStream::new(tcp).is_ok()
        };
        eprintln!("made: {made}");
    });
}
