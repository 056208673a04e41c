//! Reading an HTTP request's head: its request line, its headers, and whether it asks for
//! OpenMetrics.

/// The request line of an HTTP request: method and path.
pub(super) fn request_line(head: &str) -> Option<(&str, &str)> {
    let mut w = head.lines().next()?.split_whitespace();
    let method = w.next()?;
    let target = w.next()?;
    w.next()?.starts_with("HTTP/").then_some((method, target))
}

/// Whether the request's `Accept` header asks for OpenMetrics (Prometheus does, first); any
/// other client gets Prometheus's text format.
pub(super) fn accepts_openmetrics(head: &str) -> bool {
    header(head, "accept").is_some_and(|v| {
        v.split(',').any(|range| {
            let mut parts = range.split(';').map(str::trim);
            let refused = |p: &str| {
                p.split_once('=').is_some_and(|(k, q)| {
                    k.trim().eq_ignore_ascii_case("q") && q.trim().parse::<f32>() == Ok(0.0)
                })
            };
            parts
                .next()
                .is_some_and(|t| t.eq_ignore_ascii_case("application/openmetrics-text"))
                && !parts.any(refused)
        })
    })
}

/// The value of header `name` in the request head (up to its blank line), if present.
pub(super) fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines()
        .skip(1)
        .take_while(|l| !l.is_empty())
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.trim().eq_ignore_ascii_case(name).then(|| v.trim())
        })
}
