//! One end of a flow: an address and port ([`Endpoint`]), and how reports write it.

use std::net::IpAddr;

/// An address and port.
pub(super) type Endpoint = (IpAddr, u16);

/// `ip:port`, IPv6 as `[ip]:port`.
pub(super) fn addr(a: Endpoint) -> String {
    match a.0 {
        IpAddr::V4(v) => format!("{v}:{}", a.1),
        IpAddr::V6(v) => format!("[{v}]:{}", a.1),
    }
}
