//! tokio-postgres (issue 56): TASKS tokio tasks share one `Client` on one connection to a
//! PostgreSQL server (tokio-postgres pipelines their queries), each running a prepared
//! `SELECT $1::INT8`, over the stream of each way (the kernel's defaults, `TCP_NODELAY`,
//! nagless's default policy, `FlushPolicy::clocked`), ways in turn, ROUNDS times (the figures:
//! `nagless_integrations::clients`). The connection is made with `Config::connect_raw` over
//! the stream, without TLS.
//!
//! usage: pg_clients PORT [REQUESTS] [ROUNDS] [TASKS] [PIECES]   (default 100,000, 3, 32, 1)
//! PIECES 2 hands each of the connection's flushes to the socket in two writes.
//! MODES=kernel,clocked (say) runs only the ways named. Needs a server on 127.0.0.1:PORT that
//! lets the user `postgres` in without a password (scripts/bench-clients starts one).

use std::sync::Arc;

use nagless_integrations::clients::{self, Args, Run, Way};

async fn run(a: &Args, way: Way) -> Result<Run, String> {
    let e = |e: tokio_postgres::Error| e.to_string();
    let (stream, segments) = clients::connect(a.port, way, a.pieces).await?;
    let mut config = tokio_postgres::Config::new();
    config.user("postgres").dbname("postgres");
    let (client, connection) = config
        .connect_raw(stream, tokio_postgres::NoTls)
        .await
        .map_err(e)?;
    let connection = tokio::spawn(connection);
    let query = client.prepare("SELECT $1::INT8").await.map_err(e)?;
    let shared = Arc::new((client, query));
    let run = clients::drive(
        shared,
        &segments,
        a.requests,
        a.tasks,
        move |c, i| async move {
            let row = c.0.query_one(&c.1, &[&(i as i64)]).await.map_err(e)?;
            let back: i64 = row.get(0);
            if back != i as i64 {
                return Err(format!("asked {i}, got {back}"));
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
    let a = match Args::parse("pg_clients", 100_000) {
        Ok(a) => a,
        Err(code) => return code,
    };
    clients::rounds("tokio-postgres Client", &a, |way| run(&a, way)).await
}
