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
//!
//! A test with several premises states them together, and the failure
//! names every one that is missing:
//!
//! ```
//! use cni_testkit::premise::{self, Need};
//!
//! fn differential() {
//!     if !premise::require_all(&[Need::Root, Need::GoPlugin("bridge")]) {
//!         return;
//!     }
//!     // ... run ours and Go's, compare ...
//! }
//! # if premise::is_root() && std::path::Path::new("/usr/lib/cni/bridge").is_file() { differential() }
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

/// Where Debian's containernetworking-plugins installs Go's reference
/// plugins, the oracle of the differential tests.
pub const GO_PLUGINS: &str = "/usr/lib/cni";

/// One thing a test needs. A test states all of its premises in one
/// [`require_all`] call; the failure (or SKIP) names each missing one.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub enum Need<'a> {
    /// Root (network namespaces, netlink, nftables, mounts, chown).
    Root,
    /// A program on `PATH` (`"nft"`, `"dnsmasq"`, ...).
    Program(&'a str),
    /// Go's reference plugin of this name in [`GO_PLUGINS`].
    GoPlugin(&'a str),
    /// A file at this path (a tool outside `PATH`, a fixture).
    File(&'a str),
    /// Any other condition, described by what it needs (`"a pids
    /// cgroup"`).
    That(bool, &'a str),
}

impl Need<'_> {
    /// `None` when the premise holds, else what is missing.
    fn missing(&self) -> Option<String> {
        match *self {
            Need::Root => (!is_root()).then(|| "root".to_owned()),
            Need::Program(program) => {
                let found = std::env::var_os("PATH").is_some_and(|path| {
                    std::env::split_paths(&path).any(|dir| dir.join(program).is_file())
                });
                (!found).then(|| format!("the program {program:?} on PATH"))
            }
            Need::GoPlugin(name) => {
                let path = std::path::Path::new(GO_PLUGINS).join(name);
                (!path.is_file()).then(|| {
                    format!("Go's {name} in {GO_PLUGINS} (Debian containernetworking-plugins)")
                })
            }
            Need::File(path) => (!std::path::Path::new(path).exists()).then(|| path.to_owned()),
            Need::That(ok, what) => (!ok).then(|| what.to_owned()),
        }
    }
}

/// [`require`] every one of `needs`; the reason lists each missing one.
pub fn require_all(needs: &[Need<'_>]) -> bool {
    let missing: Vec<String> = needs.iter().filter_map(Need::missing).collect();
    require(missing.is_empty(), &format!("needs {}", missing.join(", ")))
}

/// [`require`] root.
pub fn require_root() -> bool {
    require_all(&[Need::Root])
}

/// [`require`] a program on `PATH`.
pub fn require_program(program: &str) -> bool {
    require_all(&[Need::Program(program)])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_need_says_what_is_missing() {
        assert_eq!(Need::That(true, "x").missing(), None);
        assert_eq!(Need::That(false, "x").missing().as_deref(), Some("x"));
        assert_eq!(Need::Program("sh").missing(), None);
        assert!(Need::Program("no-such-program-cni-rs")
            .missing()
            .is_some_and(|m| m.contains("no-such-program-cni-rs")));
        assert_eq!(
            Need::File("/nonexistent/cni-rs").missing().as_deref(),
            Some("/nonexistent/cni-rs")
        );
        assert_eq!(Need::Root.missing().is_none(), is_root());
    }

    /// The failure names every missing premise, and only those (under
    /// `CNI_TEST_ALLOW_SKIP=1` it is a SKIP: `false`).
    #[test]
    fn require_all_names_every_missing_premise() {
        let needs = [
            Need::That(false, "a"),
            Need::That(true, "z"),
            Need::That(false, "b"),
        ];
        let outcome = std::panic::catch_unwind(|| require_all(&needs));
        if std::env::var(ALLOW_SKIP).as_deref() == Ok("1") {
            assert!(matches!(outcome, Ok(false)));
            return;
        }
        let panic = outcome.expect_err("a missing premise fails the test");
        let message = panic.downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(message.contains("needs a, b ("), "{message}");
        assert!(require_all(&[Need::That(true, "z")]));
    }
}
