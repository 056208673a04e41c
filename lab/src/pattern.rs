//! The `custom` scenario's pattern language.
//!
//! A pattern is one side's part of a round, as comma-separated steps: `wN` writes N bytes
//! (one write call), `rN` reads exactly N bytes. Example: client `w100,w100,r100`, server
//! `r200,w100` is the write-write-read exchange. Consecutive writes form a burst whose last
//! write comes before the next read or the end of the round. Each side must read exactly what
//! the other writes, in every round, or the exchange would deadlock: [`check_pair`] says so.

use std::fmt;

/// One step of a pattern.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    /// Write this many bytes in one call.
    Write(usize),
    /// Read exactly this many bytes.
    Read(usize),
}

/// A parsed pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pattern(pub(crate) Vec<Step>);

/// A pattern that does not parse or does not fit its peer's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PatternError {
    /// A step is not `w<bytes>` or `r<bytes>`.
    #[error(
        "bad step '{step}' in pattern '{pattern}': expected w<bytes> or r<bytes>, e.g. w100,r100"
    )]
    BadStep {
        /// The offending step.
        step: String,
        /// The whole pattern.
        pattern: String,
    },
    /// A step's size is zero or too large.
    #[error("step '{step}' in pattern '{pattern}': size must be 1..=16777216 bytes")]
    BadSize {
        /// The offending step.
        step: String,
        /// The whole pattern.
        pattern: String,
    },
    /// The pattern is empty.
    #[error("empty pattern")]
    Empty,
    /// The two sides do not exchange the same bytes.
    #[error("{0}")]
    Mismatch(String),
}

const MAX_STEP: usize = 16 * 1024 * 1024;

impl Pattern {
    /// Parses `w100,w100,r100`.
    pub fn parse(text: &str) -> Result<Pattern, PatternError> {
        let mut steps = Vec::new();
        for raw in text.split(',') {
            let tok = raw.trim();
            if tok.is_empty() {
                continue;
            }
            let bad = || PatternError::BadStep {
                step: tok.to_string(),
                pattern: text.to_string(),
            };
            let (kind, num) = tok.split_at(1);
            let n: usize = num.parse().map_err(|_| bad())?;
            if n == 0 || n > MAX_STEP {
                return Err(PatternError::BadSize {
                    step: tok.to_string(),
                    pattern: text.to_string(),
                });
            }
            steps.push(match kind {
                "w" | "W" => Step::Write(n),
                "r" | "R" => Step::Read(n),
                _ => return Err(bad()),
            });
        }
        if steps.is_empty() {
            return Err(PatternError::Empty);
        }
        Ok(Pattern(steps))
    }

    /// Bytes this side writes per round.
    pub(crate) fn written(&self) -> usize {
        self.0
            .iter()
            .map(|s| if let Step::Write(n) = s { *n } else { 0 })
            .sum()
    }

    /// Bytes this side reads per round.
    pub(crate) fn read(&self) -> usize {
        self.0
            .iter()
            .map(|s| if let Step::Read(n) = s { *n } else { 0 })
            .sum()
    }

    /// Whether the write at `index` is the last of its burst.
    pub(crate) fn ends_burst(&self, index: usize) -> bool {
        !matches!(self.0.get(index + 1), Some(Step::Write(_)))
    }
}

impl fmt::Display for Pattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self
            .0
            .iter()
            .map(|s| match s {
                Step::Write(n) => format!("w{n}"),
                Step::Read(n) => format!("r{n}"),
            })
            .collect();
        f.write_str(&parts.join(","))
    }
}

/// Checks that the server reads what the client writes and the other way round.
pub fn check_pair(client: &Pattern, server: &Pattern) -> Result<(), PatternError> {
    if client.written() != server.read() {
        return Err(PatternError::Mismatch(format!(
            "client writes {} bytes per round but server reads {}",
            client.written(),
            server.read()
        )));
    }
    if server.written() != client.read() {
        return Err(PatternError::Mismatch(format!(
            "server writes {} bytes per round but client reads {}",
            server.written(),
            client.read()
        )));
    }
    if client.read() == 0 {
        return Err(PatternError::Mismatch(
            "the client must read at least once per round (a round ends with a reply)".into(),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_checks_write_write_read() {
        let c = Pattern::parse("w100,w100,r100").unwrap();
        let s = Pattern::parse("r200, w100").unwrap();
        assert_eq!(
            c.0,
            vec![Step::Write(100), Step::Write(100), Step::Read(100)]
        );
        assert!(!c.ends_burst(0));
        assert!(c.ends_burst(1));
        check_pair(&c, &s).unwrap();
        assert_eq!(c.to_string(), "w100,w100,r100");
    }

    #[test]
    fn rejects_malformed_and_mismatched() {
        assert!(matches!(
            Pattern::parse("x5"),
            Err(PatternError::BadStep { .. })
        ));
        assert!(matches!(
            Pattern::parse("w"),
            Err(PatternError::BadStep { .. })
        ));
        assert!(matches!(
            Pattern::parse("w0"),
            Err(PatternError::BadSize { .. })
        ));
        assert!(matches!(Pattern::parse(""), Err(PatternError::Empty)));
        let c = Pattern::parse("w100,r100").unwrap();
        let s = Pattern::parse("r50,w100").unwrap();
        assert!(matches!(check_pair(&c, &s), Err(PatternError::Mismatch(_))));
    }
}
