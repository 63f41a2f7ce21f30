//! Which paths belong to the device view: exactly `/sys/class/infiniband`,
//! `/sys/class/infiniband_verbs` and `/dev/infiniband`, and everything under them. Every
//! other path passes through untouched; the test costs a few byte compares.

/// The viewed prefixes (each matches itself and `prefix/...`).
pub const PREFIXES: [&[u8]; 3] = [
    b"/sys/class/infiniband",
    b"/sys/class/infiniband_verbs",
    b"/dev/infiniband",
];

/// True when `path` (without its NUL) is one of the viewed paths. `byte(i)` returns the
/// path's byte `i`, or 0 at and past its end; it is called only as far as a prefix
/// matches, so a C caller never reads past the string's NUL.
pub fn is_viewed(byte: impl Fn(usize) -> u8) -> bool {
    // Fast rejection: every viewed path starts with "/s" or "/d".
    if byte(0) != b'/' || !matches!(byte(1), b's' | b'd') {
        return false;
    }
    PREFIXES.iter().any(|prefix| {
        prefix
            .iter()
            .enumerate()
            .skip(2)
            .all(|(i, &c)| byte(i) == c)
            && matches!(byte(prefix.len()), 0 | b'/')
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn viewed(s: &str) -> bool {
        let b = s.as_bytes();
        is_viewed(|i| b.get(i).copied().unwrap_or(0))
    }

    #[test]
    fn exactly_the_three_trees_are_viewed() {
        for p in [
            "/sys/class/infiniband",
            "/sys/class/infiniband/",
            "/sys/class/infiniband/softib0/ports/1/gids/0",
            "/sys/class/infiniband_verbs",
            "/sys/class/infiniband_verbs/uverbs0/ibdev",
            "/dev/infiniband",
            "/dev/infiniband/uverbs0",
        ] {
            assert!(viewed(p), "{p}");
        }
        for p in [
            "",
            "/",
            "/sys",
            "/sys/class/net/lo",
            "/sys/class/infiniband_mad",
            "/sys/class/infinibandx",
            "/dev/infinibandx",
            "/dev/null",
            "sys/class/infiniband",
            "/tmp/sys/class/infiniband",
        ] {
            assert!(!viewed(p), "{p}");
        }
    }
}
