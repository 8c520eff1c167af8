//! Scrapes and parses Prometheus metrics the way Prometheus' own tooling
//! does: a real HTTP client (python's `urllib`) and the `prometheus_client`
//! package's text-format parser, not our own code.
//!
//! A test that uses it fails when python3 or `prometheus_client` is
//! missing (`pip install prometheus-client==0.21.1`), unless
//! `CNI_TEST_SKIP_PROMETHEUS=1` (then it prints SKIP with the reason and
//! returns early) or the workspace's `CNI_TEST_ALLOW_SKIP=1`.

use std::collections::BTreeMap;
use std::process::{Command, Output};

use serde_json::Value;

/// The variable that turns a missing parser into a SKIP.
pub(crate) const SKIP_VAR: &str = "CNI_TEST_SKIP_PROMETHEUS";

/// Fetches `argv[1]` (http:// or file://) with urllib, checks an HTTP
/// reply's status and content type, parses the text with
/// prometheus_client, and prints the families and samples as JSON.
const SCRIPT: &str = r#"
import json, sys, urllib.request
from prometheus_client.parser import text_string_to_metric_families
url = sys.argv[1]
with urllib.request.urlopen(url, timeout=10) as r:
    ctype = r.headers.get("Content-Type", "")
    status = getattr(r, "status", 200)
    text = r.read().decode("utf-8")
if url.startswith("http"):
    assert status == 200, status
    assert ctype.startswith("text/plain; version=0.0.4"), ctype
families = {}
samples = []
for f in text_string_to_metric_families(text):
    families[f.name] = f.type
    for s in f.samples:
        samples.append([s.name, s.labels, s.value])
print(json.dumps({"families": families, "samples": samples}))
"#;

/// True when python3 with `prometheus_client` is here; otherwise fails
/// the test, or prints SKIP and returns false when skipping is allowed.
pub(crate) fn require_parser() -> bool {
    let ok = Command::new("python3")
        .args(["-c", "import prometheus_client.parser"])
        .output()
        .is_ok_and(|o| o.status.success());
    if ok {
        return true;
    }
    let reason = "needs python3 with prometheus_client (pip install prometheus-client==0.21.1)";
    if std::env::var(SKIP_VAR).as_deref() == Ok("1") {
        let test = std::thread::current().name().unwrap_or("test").to_string();
        eprintln!("SKIP {test}: {reason} ({SKIP_VAR}=1)");
        return false;
    }
    cni_testkit::premise::require(false, &format!("{reason}, or set {SKIP_VAR}=1"))
}

/// The command that scrapes and parses `url` (run it where the endpoint
/// is reachable, a network namespace's loopback for instance).
pub(crate) fn scrape_command(url: &str) -> Command {
    scrape_command_via(&[], url)
}

/// [`scrape_command`] run through `wrapper` (`["ip", "netns", "exec",
/// "node"]`).
pub(crate) fn scrape_command_via(wrapper: &[&str], url: &str) -> Command {
    let (program, pre) = match wrapper.split_first() {
        Some((p, rest)) => (*p, rest),
        None => ("python3", &[][..]),
    };
    let mut c = Command::new(program);
    c.args(pre);
    if !wrapper.is_empty() {
        c.arg("python3");
    }
    c.args(["-c", SCRIPT, url]);
    c
}

/// What the parser made of an exposition.
#[derive(Debug, Clone)]
pub(crate) struct Scrape {
    /// Family name (counters without `_total`, as the parser names them)
    /// to type.
    pub(crate) families: BTreeMap<String, String>,
    /// (sample name, labels, value).
    pub(crate) samples: Vec<(String, BTreeMap<String, String>, f64)>,
}

impl Scrape {
    /// The parse of a [`scrape_command`]'s output; panics with its stderr
    /// when it failed.
    pub(crate) fn from_output(out: &Output) -> Scrape {
        assert!(
            out.status.success(),
            "scrape failed: {}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        let v: Value = serde_json::from_slice(&out.stdout).expect("scrape JSON");
        let families = v["families"]
            .as_object()
            .expect("families")
            .iter()
            .map(|(k, t)| (k.clone(), t.as_str().unwrap_or_default().to_string()))
            .collect();
        let samples = v["samples"]
            .as_array()
            .expect("samples")
            .iter()
            .map(|s| {
                let labels = s[1]
                    .as_object()
                    .expect("labels")
                    .iter()
                    .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                    .collect();
                (
                    s[0].as_str().expect("name").to_string(),
                    labels,
                    s[2].as_f64().expect("value"),
                )
            })
            .collect();
        Scrape { families, samples }
    }

    /// Scrapes `url` from this process.
    pub(crate) fn get(url: &str) -> Scrape {
        Scrape::from_output(&scrape_command(url).output().expect("run python3"))
    }

    /// The sum of the samples named `name` whose labels include `labels`
    /// (0 when there is none).
    pub(crate) fn sum(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.samples
            .iter()
            .filter(|(n, l, _)| {
                n == name
                    && labels
                        .iter()
                        .all(|(k, v)| l.get(*k).map(String::as_str) == Some(*v))
            })
            .map(|(_, _, v)| v)
            .sum()
    }

    /// The type of family `name`.
    pub(crate) fn family_type(&self, name: &str) -> Option<&str> {
        self.families.get(name).map(String::as_str)
    }
}
