//! What a test needs before it can mean anything: root (namespaces,
//! nftables), a kernel feature, a program. One rule for every test of the
//! workspace: a test that cannot establish its premise **fails**, unless the
//! run opts out with `CNI_TEST_ALLOW_SKIP=1`, and then it prints `SKIP
//! <test>: <reason>` on stderr and returns early. It never passes silently.
//!
//! ```
//! use cni_testkit::premise;
//!
//! fn needs_root() {
//!     if !premise::require_root() {
//!         return; // not root, and CNI_TEST_ALLOW_SKIP=1: SKIP printed
//!     }
//!     // ... create namespaces ...
//! }
//! # if premise::is_root() { needs_root() }
//! ```

/// The variable that turns a missing premise from a failure into a SKIP.
pub const ALLOW_SKIP: &str = "CNI_TEST_ALLOW_SKIP";

/// True when the process runs as root.
pub fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// The running test's name (libtest names each test's thread after it).
fn test_name() -> String {
    std::thread::current()
        .name()
        .unwrap_or("this test")
        .to_string()
}

/// `true` when `ok`. Otherwise panics naming the test and `reason`, or,
/// with `CNI_TEST_ALLOW_SKIP=1`, prints `SKIP <test>: <reason>` and returns
/// `false` (the test then returns early).
pub fn require(ok: bool, reason: &str) -> bool {
    if ok {
        return true;
    }
    let test = test_name();
    if std::env::var(ALLOW_SKIP).as_deref() == Ok("1") {
        eprintln!("SKIP {test}: {reason}");
        return false;
    }
    panic!("{test}: {reason} (set {ALLOW_SKIP}=1 to skip such tests instead)");
}

/// [`require`] root.
pub fn require_root() -> bool {
    require(
        is_root(),
        "needs root (network namespaces, netlink, nftables)",
    )
}

/// [`require`] a program on `PATH`.
pub fn require_program(program: &str) -> bool {
    let found = std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(program).is_file()));
    require(found, &format!("needs the program {program:?} on PATH"))
}
