//! The kernel conformance suite on Linux (root): every script of
//! `cni_netns::kernel::conformance` run on `LinuxKernel`, in two throwaway
//! namespaces per script, and on `FakeKernel` in lockstep, compared after
//! every step. (The fake alone against the table's outcomes runs without
//! root in the library's tests, `kernel::conformance::`.)

use cni_netns::kernel::conformance::{compare, scripts, Run};
use cni_netns::kernel::{FakeKernel, LinuxKernel};
use cni_netns::OwnedNetns;

#[test]
fn linux_and_the_fake_agree_after_every_step() {
    if !cni_testkit::premise::require_root() {
        return;
    }
    let mut report = Vec::new();
    let mut ran = 0;
    for script in scripts() {
        // Dropped (deleted) at the end of each script, also on a panic.
        let (a, b) = (
            OwnedNetns::new("cniconf").unwrap(),
            OwnedNetns::new("cniconf").unwrap(),
        );
        let path = |ns: &OwnedNetns| ns.netns().path().display().to_string();
        let mut linux = Run::new(&LinuxKernel, &path(&a), &path(&b)).unwrap();
        let fake = FakeKernel::new();
        fake.add_netns("a");
        fake.add_netns("b");
        let mut modelled = Run::new(&fake, "a", "b").unwrap();
        match compare(&script, &mut linux, &mut modelled).unwrap() {
            None => eprintln!(
                "SKIP {}: this kernel lacks a link kind it makes",
                script.name
            ),
            Some(found) => {
                ran += 1;
                report.extend(found.iter().map(|d| d.to_string()));
            }
        }
    }
    assert!(ran > 0, "no script ran");
    assert!(
        report.is_empty(),
        "Linux (first) and the fake (second) diverge:\n{}",
        report.join("\n")
    );
}
