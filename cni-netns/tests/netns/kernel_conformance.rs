//! The kernel conformance suite on Linux (root): every script of
//! `cni_netns::kernel::conformance` run on `LinuxKernel`, in two throwaway
//! namespaces per script, and on `FakeKernel` in lockstep, compared after
//! every step. Where this kernel lacks a link kind a script makes (dummy,
//! vrf, ifb, macvlan), the fake is told to lack it too and the refusal is
//! compared: `EOPNOTSUPP` on both, nothing changed. (The fake alone
//! against the table's outcomes runs without root in the library's tests,
//! `kernel::conformance::`.)

use cni_netns::kernel::conformance::{compare, lacking_link_kinds, scripts, Run};
use cni_netns::kernel::{FakeKernel, LinuxKernel};
use cni_netns::OwnedNetns;

#[test]
fn linux_and_the_fake_agree_after_every_step() {
    if !cni_testkit::premise::require_root() {
        return;
    }
    let path = |ns: &OwnedNetns| ns.netns().path().display().to_string();
    let lacking = {
        let probe = OwnedNetns::new("cniconf").unwrap();
        lacking_link_kinds(&LinuxKernel, &path(&probe)).unwrap()
    };
    let mut report = Vec::new();
    let mut refused = Vec::new();
    for script in scripts() {
        // Dropped (deleted) at the end of each script, also on a panic.
        let (a, b) = (
            OwnedNetns::new("cniconf").unwrap(),
            OwnedNetns::new("cniconf").unwrap(),
        );
        let mut linux = Run::new(&LinuxKernel, &path(&a), &path(&b)).unwrap();
        let fake = FakeKernel::new();
        for kind in &lacking {
            fake.lack_link_kind(kind);
        }
        fake.add_netns("a");
        fake.add_netns("b");
        let mut modelled = Run::new(&fake, "a", "b").unwrap();
        let c = compare(&script, &mut linux, &mut modelled).unwrap();
        report.extend(c.divergences.iter().map(|d| d.to_string()));
        if let Some((i, op)) = c.lacking {
            eprintln!(
                "{}: step {i} {op}: this kernel lacks the link kind; \
                 EOPNOTSUPP on Linux and the fake, nothing changed",
                script.name
            );
            refused.push(script.name);
        }
    }
    assert!(
        report.is_empty(),
        "Linux (first) and the fake (second) diverge:\n{}",
        report.join("\n")
    );
    // Every kind this kernel lacks was refused cleanly by some script, and
    // only then.
    assert_eq!(
        refused.is_empty(),
        lacking.is_empty(),
        "lacking {lacking:?}, refused in {refused:?}"
    );
    assert!(refused.len() < scripts().len(), "no script ran to its end");
}
