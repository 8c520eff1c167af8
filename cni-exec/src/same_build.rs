//! Delegation without a process when the delegate is a plugin of this same
//! build.
//!
//! A plugin binary built on this crate can carry a *marker*: 64 bytes in an
//! ELF section named [`MARKER_SECTION`] saying which plugin it is and which
//! build it comes from ([`plugin_marker`]). [`SameBuildExec`] finds a
//! delegate on `CNI_PATH` exactly as [`ProcessExec`] does; when the file it
//! finds carries the marker of a plugin registered here under the same
//! build, the delegate runs in this process through [`dispatch`](crate::dispatch) (the same
//! code the binary would run, with the same environment and stdin), and
//! otherwise as a process. A Go plugin, a plugin of another build, or a
//! file without the marker is always exec'd, so a node's choice of binary
//! on `CNI_PATH` is honoured.
//!
//! Setting `CNI_RS_EXEC_DELEGATES=1` in the plugin's environment turns the
//! shortcut off.
//!
//! # Trust model
//!
//! The build identity is whatever string the binaries are given; the
//! `cni-plugins` binaries use a hash of the code they are built from (the
//! workspace crates' sources, `Cargo.lock`, the enabled features), so two
//! binaries share it exactly when built from the same code, and a patched
//! or forked build of the same version does not.
//!
//! - **What the marker proves**: nothing cryptographic. It is the file's
//!   own claim to be plugin `<name>` built from the same code as the
//!   caller. A file without it, or with another identity (another version,
//!   a patch, a fork, a Go plugin, a file given a name-and-version marker),
//!   is always exec'd, so a node operator's choice of binary is honoured.
//! - **What it does not prove**: that the file *is* that build. The 64
//!   bytes can be copied into any file, which the caller then never runs:
//!   it runs its own built-in code, the same code the claim names.
//! - **Why that is enough**: `CNI_PATH` is root-owned. Whoever can put a
//!   file there can replace any plugin the runtime execs, with or without
//!   a marker; the shortcut gives such a writer nothing more. Do not copy
//!   the marker into a program that is not our plugin, and set
//!   `CNI_RS_EXEC_DELEGATES=1` to have every delegate exec'd whatever it
//!   carries.
//!
//! ```
//! use std::sync::Arc;
//! use cni_exec::same_build::{plugin_marker, SameBuildExec};
//! use cni_exec::{Plugin, Request};
//! use cni_types::{CniError, CniResult};
//!
//! struct Ipam;
//! impl Plugin for Ipam {
//!     type Error = cni_types::CniError;
//!     fn name(&self) -> &str {
//!         "ipam"
//!     }
//!     fn add(&self, _: &Request) -> Result<CniResult, CniError> { Ok(CniResult::default()) }
//!     fn del(&self, _: &Request) -> Result<(), CniError> { Ok(()) }
//! }
//!
//! let marker = plugin_marker("my-ipam", "1.2.3");
//! assert!(marker.starts_with(b"cni-rs-plugin\0my-ipam\01.2.3\0"));
//! let exec = SameBuildExec::new("1.2.3").register("my-ipam", || Arc::new(Ipam));
//! assert!(exec.is_registered("my-ipam"));
//! ```

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::invoke::{find_in_path, run_in_process, Exec, PluginEnv, ProcessExec};
use crate::skel::{Env, OwnNetnsGuard};
use crate::{DynPlugin, Error};

/// The ELF section holding a plugin binary's marker.
pub const MARKER_SECTION: &str = ".cni_rs_plugin";

/// The size of a marker.
pub const MARKER_LEN: usize = 64;

const MARKER_PREFIX: &[u8] = b"cni-rs-plugin\0";

/// The marker of plugin `name` of build `build`:
/// `cni-rs-plugin\0<name>\0<build>\0`, zero-padded (and cut) to
/// [`MARKER_LEN`] bytes. A `const fn`, so a binary can place it in its
/// [`MARKER_SECTION`] at compile time.
pub const fn plugin_marker(name: &str, build: &str) -> [u8; MARKER_LEN] {
    let mut out = [0u8; MARKER_LEN];
    let mut at = 0;
    let mut i = 0;
    while i < MARKER_PREFIX.len() {
        out[at] = MARKER_PREFIX[i];
        at += 1;
        i += 1;
    }
    let parts = [name.as_bytes(), build.as_bytes()];
    let mut p = 0;
    while p < parts.len() {
        let part = parts[p];
        let mut j = 0;
        // Leave room for the terminating zero of each part.
        while j < part.len() && at < MARKER_LEN - 1 {
            out[at] = part[j];
            at += 1;
            j += 1;
        }
        if at < MARKER_LEN {
            at += 1;
        }
        p += 1;
    }
    out
}

/// The marker in the executable at `path`, if it is a 64-bit little-endian
/// ELF file with a [`MARKER_SECTION`] section of at least [`MARKER_LEN`]
/// bytes. Reads the ELF header, the section headers, the section name table
/// and the marker: four small reads, no mapping of the file.
pub fn read_marker(path: &Path) -> Option<[u8; MARKER_LEN]> {
    let file = File::open(path).ok()?;
    let mut header = [0u8; 64];
    file.read_exact_at(&mut header, 0).ok()?;
    // ELFCLASS64, ELFDATA2LSB.
    if &header[..4] != b"\x7fELF" || header[4] != 2 || header[5] != 1 {
        return None;
    }
    let u16_at = |b: &[u8], o: usize| u16::from_le_bytes([b[o], b[o + 1]]) as usize;
    let u32_at = |b: &[u8], o: usize| u32::from_le_bytes(b[o..o + 4].try_into().unwrap_or([0; 4]));
    let u64_at = |b: &[u8], o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap_or([0; 8]));
    let (shoff, shentsize, shnum, shstrndx) = (
        u64_at(&header, 0x28),
        u16_at(&header, 0x3a),
        u16_at(&header, 0x3c),
        u16_at(&header, 0x3e),
    );
    if shentsize != 64 || shnum == 0 || shstrndx >= shnum {
        return None;
    }
    let mut sections = vec![0u8; shnum * 64];
    file.read_exact_at(&mut sections, shoff).ok()?;
    let section = |i: usize| &sections[i * 64..(i + 1) * 64];
    let names_header = section(shstrndx);
    let names_len = usize::try_from(u64_at(names_header, 0x20)).ok()?;
    if names_len > 1 << 20 {
        return None;
    }
    let mut names = vec![0u8; names_len];
    file.read_exact_at(&mut names, u64_at(names_header, 0x18))
        .ok()?;
    let wanted = MARKER_SECTION.as_bytes();
    let found = (0..shnum).map(section).find(|s| {
        let start = u32_at(s, 0) as usize;
        names
            .get(start..)
            .and_then(|rest| rest.split(|&b| b == 0).next())
            .is_some_and(|name| name == wanted)
    })?;
    if u64_at(found, 0x20) < MARKER_LEN as u64 {
        return None;
    }
    let mut marker = [0u8; MARKER_LEN];
    file.read_exact_at(&mut marker, u64_at(found, 0x18)).ok()?;
    Some(marker)
}

/// Makes the plugin value a registered type runs as.
pub type PluginFactory = fn() -> Arc<dyn DynPlugin>;

/// An [`Exec`] that runs a delegate in this process when the binary found
/// on `CNI_PATH` is a registered plugin of this build (see the module
/// page), and as a process ([`ProcessExec`]) otherwise.
#[derive(Clone)]
pub struct SameBuildExec {
    build: &'static str,
    plugins: HashMap<&'static str, PluginFactory>,
    process: ProcessExec,
    enabled: bool,
}

impl std::fmt::Debug for SameBuildExec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut names: Vec<&&str> = self.plugins.keys().collect();
        names.sort();
        f.debug_struct("SameBuildExec")
            .field("build", &self.build)
            .field("plugins", &names)
            .field("enabled", &self.enabled)
            .finish()
    }
}

impl SameBuildExec {
    /// An executor for binaries of build `build` (the string their markers
    /// carry), with nothing registered yet; `CNI_RS_EXEC_DELEGATES=1` in
    /// the environment turns the in-process path off.
    pub fn new(build: &'static str) -> Self {
        SameBuildExec {
            build,
            plugins: HashMap::new(),
            process: ProcessExec::new(),
            enabled: std::env::var_os("CNI_RS_EXEC_DELEGATES").is_none_or(|v| v != "1"),
        }
    }

    /// Runs binaries named `plugin_type` that carry this build's marker for
    /// that name as `factory()`'s plugin.
    pub fn register(mut self, plugin_type: &'static str, factory: PluginFactory) -> Self {
        self.plugins.insert(plugin_type, factory);
        self
    }

    /// Turns the in-process path on or off (off: every delegate is exec'd).
    pub fn enabled(mut self, on: bool) -> Self {
        self.enabled = on;
        self
    }

    /// Whether `plugin_type` is registered.
    pub fn is_registered(&self, plugin_type: &str) -> bool {
        self.plugins.contains_key(plugin_type)
    }

    /// The registered plugin `path` is a binary of, if its file name is a
    /// registered type and the file carries this build's marker for it.
    fn same_build(&self, path: &Path) -> Option<(&'static str, PluginFactory)> {
        if !self.enabled {
            return None;
        }
        let name = path.file_name()?.to_str()?;
        let (&name, &factory) = self.plugins.get_key_value(name)?;
        (read_marker(path)? == plugin_marker(name, self.build)).then_some((name, factory))
    }
}

impl Exec for SameBuildExec {
    fn find_plugin(&self, plugin_type: &str, paths: &[PathBuf]) -> Result<PathBuf, Error> {
        find_in_path(plugin_type, paths)
    }

    fn exec_plugin(&self, plugin: &Path, stdin: &[u8], env: &PluginEnv) -> Result<Vec<u8>, Error> {
        match self.same_build(plugin) {
            Some((name, factory)) => {
                tracing::debug!(plugin = %plugin.display(), "same build: running {name} in-process");
                crate::exec::traced_exec(plugin, env, |env| {
                    let env = Env::new(env.vars())
                        .with_netns_guard(Arc::new(OwnNetnsGuard))
                        .with_exec(Arc::new(self.clone()));
                    run_in_process(factory().as_ref(), &env, stdin)
                })
            }
            None => self.process.exec_plugin(plugin, stdin, env),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marker_layout_and_truncation() {
        let m = plugin_marker("host-local", "0.1.0");
        assert_eq!(&m[..31], b"cni-rs-plugin\0host-local\x000.1.0\0");
        assert!(m[31..].iter().all(|&b| b == 0));
        let long = "x".repeat(100);
        let m = plugin_marker(&long, "1");
        assert_eq!(m[MARKER_LEN - 1], 0);
        assert_ne!(plugin_marker("a", "1"), plugin_marker("a", "2"));
        assert_ne!(plugin_marker("ab", "1"), plugin_marker("a", "b1"));
    }

    #[test]
    fn non_elf_and_missing_files_have_no_marker() {
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("host-local");
        std::fs::write(&script, "#!/bin/sh\necho hi\n").unwrap();
        assert_eq!(read_marker(&script), None);
        assert_eq!(read_marker(&dir.path().join("absent")), None);
        // A real ELF file without the section.
        assert_eq!(read_marker(Path::new("/bin/true")), None);
    }
}
