//! Where a capture comes from: a file or stdin (`-`), plain or compressed with gzip or zstd
//! (told apart by their magic bytes, not by the file name).

use std::io::{self, BufRead, BufReader, Read};
use std::path::Path;

/// A capture source.
pub struct Input {
    /// The capture's bytes, decompressed.
    pub reader: Box<dyn Read>,
    /// It was compressed (so its size on disk is not the bytes the reader gives).
    pub compressed: bool,
    /// Size of the file, if it is one.
    pub file_size: Option<u64>,
}

/// Opens `path` (`-` for stdin) and undoes gzip or zstd compression if the first bytes say so.
pub fn open(path: &Path) -> io::Result<Input> {
    let (raw, file_size): (Box<dyn Read>, _) = if path.as_os_str() == "-" {
        (Box::new(io::stdin().lock()), None)
    } else {
        let f = std::fs::File::open(path)?;
        let size = f.metadata().ok().filter(|m| m.is_file()).map(|m| m.len());
        (Box::new(f), size)
    };
    let (reader, compressed) = decompressed(raw)?;
    Ok(Input {
        reader,
        compressed,
        file_size,
    })
}

/// The largest zstd window decoded, as a power of two: 32 MiB, which every level up to 19
/// stays under (8 MiB); `--ultra -22` and `--long` captures are to be decompressed first.
pub(crate) const ZSTD_WINDOW_LOG_MAX: u32 = 25;

/// A zstd decoder whose "too much memory" error says what to do.
struct ZstdErrors<R>(R);

impl<R: Read> Read for ZstdErrors<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.0.read(buf).map_err(|e| {
            if e.to_string().contains("too much memory") {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!(
                        "its zstd frame asks for a window over {} MiB (made with --long or --ultra?), more than the doctor takes; decompress it first: zstd -d --long=31",
                        1 << (ZSTD_WINDOW_LOG_MAX - 20)
                    ),
                )
            } else {
                e
            }
        })
    }
}

/// `src`, decompressed if it starts with a gzip or zstd header, and whether it did.
pub fn decompressed<'a>(src: impl Read + 'a) -> io::Result<(Box<dyn Read + 'a>, bool)> {
    let mut src = BufReader::with_capacity(1 << 20, src);
    // A pipe may give fewer bytes than the magic at first: read until 4 or the end.
    let mut head = Vec::with_capacity(4);
    while head.len() < 4 {
        let buf = src.fill_buf()?;
        if buf.is_empty() {
            break;
        }
        let n = buf.len().min(4 - head.len());
        head.extend_from_slice(&buf[..n]);
        src.consume(n);
    }
    let src = io::Cursor::new(head.clone()).chain(src);
    Ok(match head[..] {
        [0x1f, 0x8b, ..] => (Box::new(flate2::read::MultiGzDecoder::new(src)), true),
        [0x28, 0xb5, 0x2f, 0xfd, ..] => {
            let mut d = zstd::stream::read::Decoder::new(src)?;
            // The window is kept in memory; a frame may ask for up to 2 GiB (--long=31).
            d.window_log_max(ZSTD_WINDOW_LOG_MAX)?;
            (Box::new(ZstdErrors(d)), true)
        }
        _ => (Box::new(src), false),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// Gives one byte per read for the first `n` reads.
    struct OneByteFirst<'a>(&'a [u8], usize);

    impl Read for OneByteFirst<'_> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            let n = if self.1 > 0 { 1 } else { buf.len() }
                .min(self.0.len())
                .min(buf.len());
            self.1 = self.1.saturating_sub(1);
            buf[..n].copy_from_slice(&self.0[..n]);
            self.0 = &self.0[n..];
            Ok(n)
        }
    }

    #[test]
    fn gzip_zstd_and_plain_read_the_same() {
        let plain: Vec<u8> = (0..100_000u32).flat_map(|i| i.to_le_bytes()).collect();
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(&plain).unwrap();
        let gz = gz.finish().unwrap();
        let zst = zstd::encode_all(&plain[..], 1).unwrap();
        for input in [&plain[..], &gz[..], &zst[..]] {
            let mut out = Vec::new();
            decompressed(input)
                .unwrap()
                .0
                .read_to_end(&mut out)
                .unwrap();
            assert_eq!(out, plain);
            // Through a pipe that hands out one byte at a time at first.
            let mut out = Vec::new();
            let slow = OneByteFirst(input, 3);
            decompressed(slow).unwrap().0.read_to_end(&mut out).unwrap();
            assert_eq!(out, plain);
        }
    }
}
