//! `RecordingTables` (the in-memory node tables the firewall plugin's
//! no-root tests run on) against the real thing: one script of
//! `IptablesTable` calls run on `SystemTables` (the system
//! `iptables`/`ip6tables`, in a throwaway network namespace) and on the
//! double, comparing every call's outcome. The script holds the calls the
//! firewall plugin makes (its chains, jumps and per-address rules in Go's
//! forms) and the refusals the double claims to share with the kernel.

use cni_firewall::{IptablesTable, NodeTables, RecordingTables, SystemTables};
use cni_netns::OwnedNetns;

/// One step: its name and what it does to a table.
type Step = (&'static str, fn(&dyn IptablesTable) -> String);

fn ok(r: cni_firewall::Result<()>) -> String {
    match r {
        Ok(()) => "ok".into(),
        Err(_) => "refused".into(),
    }
}

fn answer(r: cni_firewall::Result<bool>) -> String {
    match r {
        Ok(b) => b.to_string(),
        Err(_) => "refused".into(),
    }
}

const ACCEPT_FROM: [&str; 4] = ["-s", "10.77.0.2/32", "-j", "ACCEPT"];
const ACCEPT_TO: [&str; 8] = [
    "-d",
    "10.77.0.2/32",
    "-m",
    "conntrack",
    "--ctstate",
    "RELATED,ESTABLISHED",
    "-j",
    "ACCEPT",
];

fn script() -> Vec<Step> {
    vec![
        ("exists in a missing chain", |t| {
            answer(t.exists("CNI-CONF", &ACCEPT_FROM))
        }),
        ("append to a missing chain", |t| {
            ok(t.append_unique("CNI-CONF", &ACCEPT_FROM))
        }),
        ("delete from a missing chain", |t| {
            answer(t.delete("CNI-CONF", &ACCEPT_FROM))
        }),
        ("create the chain", |t| ok(t.ensure_chain("CNI-CONF"))),
        ("create it again", |t| ok(t.ensure_chain("CNI-CONF"))),
        ("append", |t| ok(t.append_unique("CNI-CONF", &ACCEPT_FROM))),
        ("exists", |t| answer(t.exists("CNI-CONF", &ACCEPT_FROM))),
        ("append again (unique)", |t| {
            ok(t.append_unique("CNI-CONF", &ACCEPT_FROM))
        }),
        ("delete", |t| answer(t.delete("CNI-CONF", &ACCEPT_FROM))),
        ("delete again: one copy only", |t| {
            answer(t.delete("CNI-CONF", &ACCEPT_FROM))
        }),
        ("append Go's conntrack rule", |t| {
            ok(t.append_unique("CNI-CONF", &ACCEPT_TO))
        }),
        ("exists", |t| answer(t.exists("CNI-CONF", &ACCEPT_TO))),
        ("insert at 1", |t| {
            ok(t.insert_unique("CNI-CONF", 1, &ACCEPT_FROM))
        }),
        ("insert at 0", |t| {
            ok(t.insert_unique("CNI-CONF", 0, &["-s", "10.77.0.3/32", "-j", "ACCEPT"]))
        }),
        ("insert past the end", |t| {
            ok(t.insert_unique("CNI-CONF", 9, &["-s", "10.77.0.4/32", "-j", "ACCEPT"]))
        }),
        ("insert right after the end", |t| {
            ok(t.insert_unique("CNI-CONF", 3, &["-s", "10.77.0.5/32", "-j", "ACCEPT"]))
        }),
        ("jump to a missing chain", |t| {
            ok(t.append_unique("CNI-CONF", &["-j", "CNI-CONF-MISSING"]))
        }),
        ("create a second chain", |t| ok(t.ensure_chain("CNI-CONF2"))),
        ("jump to it", |t| {
            ok(t.append_unique(
                "CNI-CONF",
                &[
                    "-m",
                    "comment",
                    "--comment",
                    "CNI firewall plugin rules",
                    "-j",
                    "CNI-CONF2",
                ],
            ))
        }),
        ("jump to it from FORWARD at 1", |t| {
            ok(t.insert_unique("FORWARD", 1, &["-j", "CNI-CONF"]))
        }),
        ("exists in FORWARD", |t| {
            answer(t.exists("FORWARD", &["-j", "CNI-CONF"]))
        }),
        ("delete the jump", |t| {
            answer(t.delete("FORWARD", &["-j", "CNI-CONF"]))
        }),
    ]
}

/// The script's outcomes on the IPv4 (or IPv6, addresses swapped) table
/// of `tables`.
fn run(tables: &dyn NodeTables, v6: bool) -> Vec<String> {
    let table = tables.iptables(v6);
    script()
        .into_iter()
        .map(|(_, step)| step(table.as_ref()))
        .collect()
}

#[test]
fn recording_iptables_answers_as_the_system_iptables() {
    if !cni_testkit::premise::require_root() {
        return;
    }
    assert!(
        std::path::Path::new("/usr/sbin/iptables").exists(),
        "premise: iptables is installed (test-all installs it)"
    );
    let node = OwnedNetns::new("cnitabconf").unwrap();
    // IPv4 only: the script's rules are IPv4; ip6tables runs the same code
    // path of the double.
    let real = node.netns().run(|| run(&SystemTables, false)).unwrap();
    let fake = run(&RecordingTables::new(), false);
    let names: Vec<&str> = script().iter().map(|(n, _)| *n).collect();
    let diverged: Vec<String> = names
        .iter()
        .zip(real.iter().zip(&fake))
        .filter(|(_, (r, f))| r != f)
        .map(|(n, (r, f))| format!("{n}: iptables {r}, RecordingTables {f}"))
        .collect();
    assert!(diverged.is_empty(), "divergences:\n{}", diverged.join("\n"));
    // The premise: the script did reach the kernel's refusals.
    assert!(real.iter().any(|o| o == "refused"), "{real:?}");
}
