//! A log file rotated as Multus's lumberjack rotates it
//! (`gopkg.in/natefinch/lumberjack.v2`), while the process runs:
//!
//! * a write that would take the file past `maxSize` first renames it to
//!   `<stem>-<UTC 2006-01-02T15-04-05.000><.ext>` and starts a new one
//!   (with the old file's mode; 0600 for a first file); opening an
//!   existing file that this write would fill rotates it too; a single
//!   write larger than `maxSize` is an error;
//! * after every rotation (and at first open) the backups are "milled":
//!   backups are recognised by name (`<stem>-<timestamp><.ext>[.gz]`) and
//!   ordered by the timestamp in the name; beyond `maxBackups` (0: keep
//!   all) or older than `maxAge` days (0: keep) they are removed; the
//!   rest are gzipped (`<name>.gz`, same mode) when `compress` is set.
//!
//! A `maxSize` of 0 means lumberjack's default, 100 megabytes.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// Log file rotation (`logOptions`, lumberjack's settings as Multus uses
/// them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rotation {
    /// Rotate once the file has this many bytes (`maxSize`, in megabytes).
    pub max_size: u64,
    /// Keep at most this many rotated files (`maxBackups`; 0 keeps all).
    pub max_backups: usize,
    /// Remove rotated files older than this (`maxAge`, in days; zero keeps them).
    pub max_age: Duration,
    /// Gzip rotated files (`compress`).
    pub compress: bool,
}

impl Default for Rotation {
    /// Multus's defaults: 100 megabytes, 5 backups, 5 days, compressed.
    fn default() -> Self {
        Rotation {
            max_size: 100 << 20,
            max_backups: 5,
            max_age: Duration::from_secs(5 * 86_400),
            compress: true,
        }
    }
}

const MEGABYTE: u64 = 1024 * 1024;
const DEFAULT_MAX_SIZE: u64 = 100 * MEGABYTE;
const GZ: &str = ".gz";

/// A log file with lumberjack's rotation: see the module documentation.
#[derive(Debug)]
pub struct RotatingFile {
    path: PathBuf,
    rotation: Rotation,
    file: Option<File>,
    size: u64,
}

impl RotatingFile {
    /// A rotating file at `path`; nothing is opened before the first write.
    pub fn new(path: impl Into<PathBuf>, rotation: Rotation) -> RotatingFile {
        RotatingFile {
            path: path.into(),
            rotation,
            file: None,
            size: 0,
        }
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The rotation settings.
    pub fn rotation(&self) -> &Rotation {
        &self.rotation
    }

    fn max(&self) -> u64 {
        if self.rotation.max_size == 0 {
            DEFAULT_MAX_SIZE
        } else {
            self.rotation.max_size
        }
    }

    /// Closes the file and rotates it now, as lumberjack's `Rotate`.
    pub fn rotate(&mut self) -> io::Result<()> {
        self.file = None;
        self.open_new()?;
        self.mill();
        Ok(())
    }

    fn open_existing_or_new(&mut self, len: u64) -> io::Result<()> {
        self.mill();
        let size = match std::fs::metadata(&self.path) {
            Ok(m) => m.len(),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return self.open_new(),
            Err(e) => return Err(e),
        };
        if size + len >= self.max() {
            return self.rotate();
        }
        match OpenOptions::new().append(true).open(&self.path) {
            Ok(f) => {
                self.file = Some(f);
                self.size = size;
                Ok(())
            }
            // As lumberjack: a file that cannot be appended to is replaced.
            Err(_) => self.open_new(),
        }
    }

    fn open_new(&mut self) -> io::Result<()> {
        let dir = parent(&self.path);
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(dir)?;
        let mut mode = 0o600;
        if let Ok(m) = std::fs::metadata(&self.path) {
            mode = m.permissions().mode() & 0o7777;
            std::fs::rename(&self.path, self.free_backup_name(SystemTime::now()))?;
        }
        let f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(mode)
            .open(&self.path)?;
        // The mode of a file that existed (create's mode is masked).
        let _ = f.set_permissions(std::fs::Permissions::from_mode(mode));
        self.file = Some(f);
        self.size = 0;
        Ok(())
    }

    /// lumberjack's name for a backup made at `now`; a later millisecond
    /// when that name is taken (lumberjack would overwrite it).
    fn free_backup_name(&self, now: SystemTime) -> PathBuf {
        let mut t = now;
        loop {
            let p = backup_name(&self.path, t);
            let mut gz = p.clone().into_os_string();
            gz.push(GZ);
            if !p.exists() && !Path::new(&gz).exists() {
                return p;
            }
            t += Duration::from_millis(1);
        }
    }

    /// Removes and compresses backups (lumberjack's `millRunOnce`);
    /// failures are ignored, as lumberjack's background mill does.
    fn mill(&self) {
        let _ = self.mill_at(SystemTime::now());
    }

    fn mill_at(&self, now: SystemTime) -> io::Result<()> {
        let r = &self.rotation;
        if r.max_backups == 0 && r.max_age.is_zero() && !r.compress {
            return Ok(());
        }
        let mut files = self.backups()?;
        // Newest first.
        files.sort_by_key(|f| std::cmp::Reverse(f.0));
        let mut remove = Vec::new();
        if r.max_backups > 0 && r.max_backups < files.len() {
            let mut preserved = std::collections::HashSet::new();
            let mut remaining = Vec::new();
            for f in files {
                let name = f.1.to_string_lossy();
                let base = name.strip_suffix(GZ).unwrap_or(&name).to_string();
                preserved.insert(base);
                if preserved.len() > r.max_backups {
                    remove.push(f);
                } else {
                    remaining.push(f);
                }
            }
            files = remaining;
        }
        if !r.max_age.is_zero() {
            let cutoff = now.checked_sub(r.max_age).unwrap_or(SystemTime::UNIX_EPOCH);
            let (old, keep): (Vec<_>, Vec<_>) = files.into_iter().partition(|f| f.0 < cutoff);
            remove.extend(old);
            files = keep;
        }
        for (_, p) in &remove {
            let _ = std::fs::remove_file(p);
        }
        if r.compress {
            for (_, p) in files
                .iter()
                .filter(|f| !f.1.to_string_lossy().ends_with(GZ))
            {
                let _ = gzip(p);
            }
        }
        Ok(())
    }

    /// The backups next to the file: `(timestamp from the name, path)`.
    fn backups(&self) -> io::Result<Vec<(SystemTime, PathBuf)>> {
        let (dir, prefix, ext) = split_name(&self.path);
        let mut out = Vec::new();
        for e in std::fs::read_dir(&dir)?.flatten() {
            if e.file_type().map(|t| t.is_dir()).unwrap_or(true) {
                continue;
            }
            let name = e.file_name().to_string_lossy().into_owned();
            let stamp = name.strip_prefix(&prefix).and_then(|rest| {
                rest.strip_suffix(&ext)
                    .or_else(|| rest.strip_suffix(&format!("{ext}{GZ}")))
            });
            if let Some(t) = stamp.and_then(parse_stamp) {
                out.push((t, e.path()));
            }
        }
        Ok(out)
    }
}

impl Write for RotatingFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let len = buf.len() as u64;
        if len > self.max() {
            return Err(io::Error::other(format!(
                "write length {len} exceeds maximum file size {}",
                self.max()
            )));
        }
        if self.file.is_none() {
            self.open_existing_or_new(len)?;
        }
        if self.size + len > self.max() {
            self.rotate()?;
        }
        let Some(f) = self.file.as_mut() else {
            return Err(io::Error::other("log file not open"));
        };
        let n = f.write(buf)?;
        self.size += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        match self.file.as_mut() {
            Some(f) => f.flush(),
            None => Ok(()),
        }
    }
}

fn parent(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// `(dir, "<stem>-", ".<ext>")` of a log file path (Go's `filepath.Ext`).
fn split_name(path: &Path) -> (PathBuf, String, String) {
    let name = path
        .file_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let (stem, ext) = match name.rfind('.') {
        Some(i) => (name[..i].to_string(), name[i..].to_string()),
        None => (name.clone(), String::new()),
    };
    (parent(path).to_path_buf(), format!("{stem}-"), ext)
}

/// lumberjack's backup name: `<stem>-2006-01-02T15-04-05.000<ext>` (UTC).
fn backup_name(path: &Path, now: SystemTime) -> PathBuf {
    let (dir, prefix, ext) = split_name(path);
    let (y, mo, d, h, mi, s, ms) = utc(now);
    dir.join(format!(
        "{prefix}{y:04}-{mo:02}-{d:02}T{h:02}-{mi:02}-{s:02}.{ms:03}{ext}"
    ))
}

/// RFC 3339 in UTC with seconds (Go's `time.RFC3339` of a UTC time):
/// `2006-01-02T15:04:05Z`.
pub fn rfc3339_utc(t: SystemTime) -> String {
    let (y, mo, d, h, mi, s, _) = utc(t);
    format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}Z")
}

type Civil = (i64, u32, u32, u64, u64, u64, u32);

fn utc(t: SystemTime) -> Civil {
    let d = t.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
    let (days, secs) = (d.as_secs() / 86_400, d.as_secs() % 86_400);
    let (y, m, day) = civil_from_days(days as i64);
    (
        y,
        m,
        day,
        secs / 3600,
        secs / 60 % 60,
        secs % 60,
        d.subsec_millis(),
    )
}

/// The time in a backup name (`2006-01-02T15-04-05.000`, UTC).
fn parse_stamp(s: &str) -> Option<SystemTime> {
    let b = s.as_bytes();
    if b.len() != 23 || b[4] != b'-' || b[7] != b'-' || b[10] != b'T' || b[19] != b'.' {
        return None;
    }
    let num = |r: std::ops::Range<usize>| -> Option<u64> {
        let t = s.get(r)?;
        t.bytes()
            .all(|c| c.is_ascii_digit())
            .then(|| t.parse().ok())?
    };
    if b[13] != b'-' || b[16] != b'-' {
        return None;
    }
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, sec, ms) = (num(11..13)?, num(14..16)?, num(17..19)?, num(20..23)?);
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || sec > 60 {
        return None;
    }
    let days = days_from_civil(y as i64, mo as u32, d as u32);
    let secs = u64::try_from(days).ok()? * 86_400 + h * 3600 + mi * 60 + sec;
    Some(SystemTime::UNIX_EPOCH + Duration::from_secs(secs) + Duration::from_millis(ms))
}

/// Days since 1970-01-01 to a proleptic Gregorian date (Howard Hinnant's
/// algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// The inverse of [`civil_from_days`].
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = i64::from((m + 9) % 12);
    let doy = (153 * mp + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Gzips `path` to `<path>.gz` with the same mode, then removes `path`
/// (lumberjack's `compressLogFile`); on failure the partial `.gz` goes.
fn gzip(path: &Path) -> io::Result<()> {
    let mut gz_name = path.as_os_str().to_owned();
    gz_name.push(GZ);
    let gz_name = PathBuf::from(gz_name);
    let mut input = File::open(path)?;
    let mode = input.metadata()?.permissions().mode() & 0o7777;
    let mut write = || -> io::Result<()> {
        let out = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(mode)
            .open(&gz_name)?;
        let mut enc = flate2::write::GzEncoder::new(out, flate2::Compression::default());
        io::copy(&mut input, &mut enc)?;
        enc.finish()?.sync_all()
    };
    if let Err(e) = write() {
        let _ = std::fs::remove_file(&gz_name);
        return Err(e);
    }
    std::fs::remove_file(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    fn rotation(max_size: u64, max_backups: usize, days: u64, compress: bool) -> Rotation {
        Rotation {
            max_size,
            max_backups,
            max_age: Duration::from_secs(days * 86_400),
            compress,
        }
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn names_and_stamps_like_lumberjack() {
        let t = SystemTime::UNIX_EPOCH + Duration::from_millis(1_764_515_045_123);
        assert_eq!(
            backup_name(Path::new("/var/log/multus.log"), t),
            PathBuf::from("/var/log/multus-2025-11-30T15-04-05.123.log")
        );
        assert_eq!(
            backup_name(Path::new("/var/log/multus"), t),
            PathBuf::from("/var/log/multus-2025-11-30T15-04-05.123")
        );
        assert_eq!(parse_stamp("2025-11-30T15-04-05.123"), Some(t));
        assert_eq!(parse_stamp("2025-11-30T15:04:05.123"), None);
        assert_eq!(parse_stamp("2025-13-30T15-04-05.123"), None);
        assert_eq!(rfc3339_utc(t), "2025-11-30T15:04:05Z");
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
        for z in [-1000, 0, 59, 60, 11_016, 20_000, 100_000] {
            let (y, m, d) = civil_from_days(z);
            assert_eq!(days_from_civil(y, m, d), z);
        }
    }

    #[test]
    fn rotates_on_the_write_that_would_overflow() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("plugin.log");
        let mut f = RotatingFile::new(&log, rotation(10, 0, 0, false));
        f.write_all(b"12345").unwrap();
        f.write_all(b"67890").unwrap(); // exactly 10: no rotation
        assert_eq!(names(dir.path()), ["plugin.log"]);
        f.write_all(b"x").unwrap(); // would be 11
        let n = names(dir.path());
        assert_eq!(n.len(), 2, "{n:?}");
        assert!(n[0].starts_with("plugin-") && n[0].ends_with(".log"));
        assert_eq!(std::fs::read(&log).unwrap(), b"x");
        assert_eq!(
            std::fs::read(dir.path().join(&n[0])).unwrap(),
            b"1234567890"
        );
        assert!(f.write_all(b"too long a line").is_err());
        // A second writer (a new process) appends, or rotates when its
        // first write would fill the file.
        let mut g = RotatingFile::new(&log, rotation(10, 0, 0, false));
        g.write_all(b"yz").unwrap();
        assert_eq!(std::fs::read(&log).unwrap(), b"xyz");
        let mut h = RotatingFile::new(&log, rotation(10, 0, 0, false));
        h.write_all(b"0123456").unwrap();
        assert_eq!(std::fs::read(&log).unwrap(), b"0123456");
        assert_eq!(names(dir.path()).len(), 3);
    }

    #[test]
    fn mill_prunes_by_count_and_age_and_compresses() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("m.log");
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_764_515_045);
        let day = Duration::from_secs(86_400);
        for age in [1, 2, 3, 10] {
            std::fs::write(backup_name(&log, now - day * age), format!("{age}")).unwrap();
        }
        std::fs::write(dir.path().join("m-junk.log"), "not a backup").unwrap();
        std::fs::write(dir.path().join("other.log"), "x").unwrap();
        let f = RotatingFile::new(&log, rotation(10, 2, 5, true));
        f.mill_at(now).unwrap();
        let n = names(dir.path());
        assert_eq!(
            n,
            [
                "m-2025-11-28T15-04-05.000.log.gz",
                "m-2025-11-29T15-04-05.000.log.gz",
                "m-junk.log",
                "other.log"
            ]
        );
        let mut text = String::new();
        flate2::read::GzDecoder::new(File::open(dir.path().join(&n[1])).unwrap())
            .read_to_string(&mut text)
            .unwrap();
        assert_eq!(text, "1");
        // maxAge alone (no count limit) removes the old one.
        std::fs::write(backup_name(&log, now - day * 9), "9").unwrap();
        RotatingFile::new(&log, rotation(10, 0, 5, false))
            .mill_at(now)
            .unwrap();
        assert_eq!(names(dir.path()).len(), 4);
    }
}
