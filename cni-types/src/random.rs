//! Random numbers for names and protocol ids: the workspace's one source.
//!
//! Temporary link and namespace names, DHCP transaction ids and retry
//! jitter only need to differ between callers, not to be secret: they come
//! from the kernel's random source (`getrandom(2)`), or from the clock and
//! the process id where that is unavailable. Not for keys or tokens.

/// A random `u32` (see the [module](self) for its source).
pub fn random_u32() -> u32 {
    getrandom::u32().unwrap_or_else(|_| {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        t ^ std::process::id().rotate_left(16)
    })
}

/// A random `u64` (see the [module](self) for its source).
pub fn random_u64() -> u64 {
    (u64::from(random_u32()) << 32) | u64::from(random_u32())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_differ() {
        // 2^-32 chance of a false failure per pair: three pairs.
        let a: Vec<u32> = (0..4).map(|_| random_u32()).collect();
        assert!(a.windows(2).any(|w| w[0] != w[1]), "{a:?}");
        assert_ne!(random_u64(), random_u64());
    }
}
