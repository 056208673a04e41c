//! hyper's HTTP/2 client (issue 56): TASKS tokio tasks share one `http2::SendRequest` on one
//! connection (HTTP/2 multiplexes their requests as streams) to an HTTP/2 server that takes
//! cleartext HTTP/2 with prior knowledge (nginx; `scripts/bench-clients` starts one), each
//! making a GET and reading its whole body, over the stream of each way (the kernel's defaults,
//! `TCP_NODELAY`, nagless's default policy, `FlushPolicy::clocked`), ways in turn, ROUNDS times
//! (the figures: `nagless_integrations::clients`). HTTP/2's control frames the server never
//! answers (`WINDOW_UPDATE`, `SETTINGS` and `PING` acknowledgements) travel on the same
//! connection.
//!
//! usage: h2_clients PORT [REQUESTS] [ROUNDS] [TASKS] [PIECES]   (default 100,000, 3, 32, 1)
//! PIECES 2 hands each of the connection's flushes to the socket in two writes.
//! MODES=kernel,clocked (say) runs only the ways named.

use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper_util::rt::{TokioExecutor, TokioIo};
use nagless_integrations::clients::{self, Args, Run, Way};

async fn run(a: &Args, way: Way) -> Result<Run, String> {
    let e = |e: hyper::Error| e.to_string();
    let (stream, segments) = clients::connect(a.port, way, a.pieces).await?;
    let (send, connection) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
            .await
            .map_err(e)?;
    let connection = tokio::spawn(connection);
    let port = a.port;
    let run = clients::drive(
        send,
        &segments,
        a.requests,
        a.tasks,
        move |mut send, _| async move {
            send.ready().await.map_err(e)?;
            let request = hyper::Request::get(format!("http://127.0.0.1:{port}/"))
                .body(Empty::<Bytes>::new())
                .map_err(|e| e.to_string())?;
            let response = send.send_request(request).await.map_err(e)?;
            if !response.status().is_success() {
                return Err(format!("status {}", response.status()));
            }
            let body = response.into_body().collect().await.map_err(e)?.to_bytes();
            if body.is_empty() {
                return Err("an empty body".into());
            }
            Ok(())
        },
    )
    .await;
    connection.abort();
    run
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> std::process::ExitCode {
    let a = match Args::parse("h2_clients", 100_000) {
        Ok(a) => a,
        Err(code) => return code,
    };
    clients::rounds("hyper HTTP/2 SendRequest", &a, |way| run(&a, way)).await
}
