//! Counting TLS records in a byte stream by their headers: shared by the TLS tests
//! (`tls_support`) and the `tls_cost` example (which includes it with `#[path]`).

/// Counts TLS records in a byte stream by their 5-byte headers.
#[derive(Default)]
pub struct RecordScan {
    header: Vec<u8>,
    skip: usize,
    /// Records of content type application_data (23): in TLS 1.3 every record after the
    /// handshake, alerts and key updates included.
    pub app_records: u64,
}

impl RecordScan {
    pub fn feed(&mut self, mut b: &[u8]) {
        while !b.is_empty() {
            if self.skip > 0 {
                let n = self.skip.min(b.len());
                self.skip -= n;
                b = &b[n..];
                continue;
            }
            let n = (5 - self.header.len()).min(b.len());
            self.header.extend_from_slice(&b[..n]);
            b = &b[n..];
            if self.header.len() == 5 {
                if self.header[0] == 23 {
                    self.app_records += 1;
                }
                self.skip = usize::from(u16::from_be_bytes([self.header[3], self.header[4]]));
                self.header.clear();
            }
        }
    }
}
