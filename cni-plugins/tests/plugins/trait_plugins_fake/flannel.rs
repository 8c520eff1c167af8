//! flannel's delegate path without root (the in-process fake `bridge` of
//! `flannel_plugin::`): a failed delegate ADD keeps the saved delegate
//! config, as Go's flannel does, because the runtime's DEL after the
//! failed ADD must send the delegate its DEL (which releases what the
//! delegate's own rollback could not); that DEL removes it, and DEL again
//! or on a vanished data dir succeeds without calling the delegate.
//! (passthru needs no such test: its ADD changes nothing and its DEL does
//! nothing.)

use std::sync::atomic::Ordering;

use cni_exec::Command;

use crate::flannel_plugin::Fixture;

#[test]
fn flannel_failed_delegate_add_is_undone_by_del_and_del_twice_passes() {
    let f = Fixture::new();
    let saved = f.data_dir().join("c1@eth0");
    f.bridge.fail_add.store(true, Ordering::Relaxed);
    let (code, out) = f.run("ADD", "c1", "eth0", &f.conf(""));
    assert_ne!(code, 0);
    assert!(out.contains("bridge ADD failed"), "{out}");
    let kept = std::fs::read(&saved).expect("the delegate config is kept for DEL");

    assert_eq!(f.run("DEL", "c1", "eth0", &f.conf("")).0, 0);
    let calls = f.bridge.calls();
    let del = calls.last().unwrap();
    assert_eq!(
        (del.0, del.1.as_str(), del.2.as_str()),
        (Command::Del, "c1", "eth0")
    );
    assert_eq!(del.3, kept, "DEL sends the delegate what ADD sent");
    assert!(!saved.exists());
    assert!(
        !f.data_dir().join("c1").exists(),
        "the reference's copy went too"
    );

    // Again, and with the data dir gone: nothing to delegate.
    let before = f.bridge.calls().len();
    assert_eq!(f.run("DEL", "c1", "eth0", &f.conf("")).0, 0);
    std::fs::remove_dir_all(f.data_dir()).unwrap();
    assert_eq!(f.run("DEL", "c1", "eth0", &f.conf("")).0, 0);
    assert_eq!(f.bridge.calls().len(), before);
}
