//! The doctor's one integer reader, for packet headers (network order) and capture files (the
//! file's own order): a field at an offset, `None` past the end of the bytes.

/// The byte order of a field: network order, or a capture file's (its magic number says).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Order {
    Big,
    Little,
}

/// The 16-bit field at `at`.
pub(crate) fn u16_at(b: &[u8], at: usize, order: Order) -> Option<u16> {
    let a = *b.get(at..)?.first_chunk::<2>()?;
    Some(match order {
        Order::Big => u16::from_be_bytes(a),
        Order::Little => u16::from_le_bytes(a),
    })
}

/// The 32-bit field at `at`.
pub(crate) fn u32_at(b: &[u8], at: usize, order: Order) -> Option<u32> {
    let a = *b.get(at..)?.first_chunk::<4>()?;
    Some(match order {
        Order::Big => u32::from_be_bytes(a),
        Order::Little => u32::from_le_bytes(a),
    })
}

/// A header's 16-bit field at `at`, in network order.
pub(crate) fn be16(b: &[u8], at: usize) -> Option<u16> {
    u16_at(b, at, Order::Big)
}

/// A header's 32-bit field at `at`, in network order.
pub(crate) fn be32(b: &[u8], at: usize) -> Option<u32> {
    u32_at(b, at, Order::Big)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_read_in_either_order_and_none_past_the_end() {
        let b = [0x12, 0x34, 0x56, 0x78, 0x9a];
        assert_eq!(be16(&b, 0), Some(0x1234));
        assert_eq!(u16_at(&b, 1, Order::Little), Some(0x5634));
        assert_eq!(be32(&b, 1), Some(0x3456_789a));
        assert_eq!(u32_at(&b, 0, Order::Little), Some(0x7856_3412));
        assert_eq!(be32(&b, 2), None);
        assert_eq!(be16(&b, 4), None);
        assert_eq!(be16(&b, usize::MAX), None);
    }
}
