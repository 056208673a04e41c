//! The metrics page in Prometheus's text format 0.0.4, made from the OpenMetrics one, for
//! clients that do not ask for OpenMetrics.

/// The OpenMetrics page `om` in Prometheus's text format 0.0.4, for clients that do not ask for
/// OpenMetrics (`curl`, `promtool check metrics`, older scrapers): no `# UNIT` lines and no
/// `# EOF`; a counter's family takes its samples' name (`_total`); OpenMetrics's `info` and
/// `unknown` types become `gauge` and `untyped`.
pub(crate) fn text_format(om: &str) -> String {
    let mut out = String::with_capacity(om.len());
    let lines: Vec<&str> = om.lines().collect();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        if line == "# EOF" || line.starts_with("# UNIT ") {
            i += 1;
            continue;
        }
        // A family: its HELP line, then its TYPE line.
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest.split_once(' ').unwrap_or((rest, ""));
            let ty = lines
                .get(i + 1)
                .and_then(|l| l.strip_prefix("# TYPE "))
                .and_then(|t| t.split_once(' '))
                .filter(|(n, _)| *n == name)
                .map(|(_, t)| t);
            let (name, ty) = match ty {
                Some("counter") => (format!("{name}_total"), "counter"),
                Some("info") => (format!("{name}_info"), "gauge"),
                Some("unknown") => (name.to_owned(), "untyped"),
                Some(t) => (name.to_owned(), t),
                None => (name.to_owned(), ""),
            };
            out.push_str(&format!("# HELP {name} {help}\n"));
            if !ty.is_empty() {
                out.push_str(&format!("# TYPE {name} {ty}\n"));
                i += 1;
            }
            i += 1;
            continue;
        }
        out.push_str(line);
        out.push('\n');
        i += 1;
    }
    out
}
