//! redis-rs's `MultiplexedConnection` (issue 56): TASKS tokio tasks share one connection to a
//! redis server, each making small SETs and GETs in turn, over the stream of each way (the
//! kernel's defaults, `TCP_NODELAY`, nagless's default policy, `FlushPolicy::clocked`), ways in
//! turn, ROUNDS times (the figures: `nagless_integrations::clients`).
//!
//! usage: redis_clients PORT [REQUESTS] [ROUNDS] [TASKS] [PIECES]   (default 200,000, 3, 32, 1)
//! PIECES 2 hands each of redis-rs's flushes to the socket in two writes, as a client that
//! writes a request in pieces does. MODES=kernel,clocked (say) runs only the ways named.
//! Needs a redis server on 127.0.0.1:PORT (scripts/bench-clients starts one).

use nagless_integrations::clients::{self, Args, Run, Way};

async fn run(a: &Args, way: Way) -> Result<Run, String> {
    let (stream, segments) = clients::connect(a.port, way, a.pieces).await?;
    let info = redis::RedisConnectionInfo::default();
    let (conn, driver) = redis::aio::MultiplexedConnection::new(&info, stream)
        .await
        .map_err(|e| e.to_string())?;
    let driver = tokio::spawn(driver);
    let run = clients::drive(
        conn,
        &segments,
        a.requests,
        a.tasks,
        |mut conn, i| async move {
            let key = format!("nagless:{}", i % 64);
            if i.is_multiple_of(2) {
                redis::cmd("SET")
                    .arg(&key)
                    .arg("v")
                    .query_async::<()>(&mut conn)
                    .await
            } else {
                redis::cmd("GET")
                    .arg(&key)
                    .query_async::<Option<String>>(&mut conn)
                    .await
                    .map(drop)
            }
            .map_err(|e| e.to_string())
        },
    )
    .await;
    driver.abort();
    run
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> std::process::ExitCode {
    let a = match Args::parse("redis_clients", 200_000) {
        Ok(a) => a,
        Err(code) => return code,
    };
    clients::rounds("redis-rs MultiplexedConnection", &a, |way| run(&a, way)).await
}
