//! tuning on the fake kernel, without root: ADD's sysctls (written even
//! when they hold the value) and link attributes, DEL putting them back,
//! a kernel failure at each of ADD's steps leaving the pod as it was, and
//! DEL on a half-gone pod. The real-kernel oracle: `tuning::` (and its
//! differential tests against Go).

use cni_exec::{Command, Plugin, Request};
use cni_netns::kernel::{Errno, FakeKernel, KernelOp, NetKernel, NetnsHandle};
use cni_plugins::tuning::Tuning;
use cni_types::NetworkConfig;
use serde_json::json;

/// A fake pod with `eth0` up (MTU 1500) and two sysctls as Linux has them.
struct Pod {
    kernel: FakeKernel,
    path: String,
    data_dir: tempfile::TempDir,
}

fn pod() -> Pod {
    // Each test has a kernel of its own: the name needs no suffix.
    let path = "/run/netns/fake-tuning-pod".to_owned();
    let kernel = FakeKernel::new();
    kernel.add_netns(&path);
    let h = kernel.open(&path).unwrap();
    let eth0 = h.add_dummy("eth0").unwrap();
    h.set_up(eth0.index).unwrap();
    h.sysctl_set("net/ipv4/conf/eth0/arp_filter", "0").unwrap();
    h.sysctl_set("net/core/somaxconn", "4096").unwrap();
    Pod {
        kernel,
        path,
        data_dir: tempfile::tempdir().unwrap(),
    }
}

impl Pod {
    fn request(&self, command: Command) -> Request {
        let conf = json!({
            "cniVersion": "1.0.0", "name": "n", "type": "tuning",
            "dataDir": self.data_dir.path(),
            "sysctl": {
                "net.ipv4.conf.IFNAME.arp_filter": "1",
                // The value it holds: written all the same, as Go does.
                "net.core.somaxconn": "4096",
            },
            "mac": "c2:11:22:33:44:55",
            "mtu": 1400,
            "promisc": true,
            "allmulti": true,
            "txQLen": 2000,
            "prevResult": {
                "cniVersion": "1.0.0",
                "interfaces": [{"name": "eth0", "sandbox": self.path}],
                "ips": [{"address": "10.1.0.2/24", "interface": 0}],
            },
        });
        let config = NetworkConfig::from_slice(conf.to_string().as_bytes()).unwrap();
        Request::builder(command, config)
            .container_id("c1")
            .netns(&self.path)
            .ifname("eth0")
            .path("/nonexistent-cni-path")
            .build()
            .unwrap()
    }

    fn tuning(&self) -> Tuning<FakeKernel> {
        Tuning::with_kernel(self.kernel.clone())
    }

    fn state(&self) -> Option<String> {
        self.kernel.state(&self.path)
    }

    fn backups(&self) -> Vec<std::path::PathBuf> {
        std::fs::read_dir(self.data_dir.path())
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect()
    }
}

#[test]
fn tuning_add_sets_everything_and_del_puts_it_back() {
    let pod = pod();
    let before = pod.state();
    let result = pod.tuning().add(&pod.request(Command::Add)).unwrap();
    assert_eq!(result.interfaces[0].mac, "c2:11:22:33:44:55");
    let h = pod.kernel.open(&pod.path).unwrap();
    let eth0 = h.link_by_name("eth0").unwrap();
    assert_eq!(eth0.mtu, 1400);
    assert_eq!(eth0.mac.unwrap().to_string(), "c2:11:22:33:44:55");
    assert!(eth0.is_promisc() && eth0.is_allmulti());
    assert_eq!(h.link_txqlen(eth0.index).unwrap(), 2000);
    let sysctl = |k| pod.kernel.sysctl(&pod.path, k);
    assert_eq!(
        sysctl("net/ipv4/conf/eth0/arp_filter").as_deref(),
        Some("1")
    );
    let writes: Vec<String> = pod
        .kernel
        .calls()
        .into_iter()
        .filter(|c| c.op == KernelOp::WriteSysctl)
        .map(|c| c.object)
        .collect();
    assert!(
        writes
            .iter()
            .filter(|w| *w == "net/core/somaxconn=4096")
            .count()
            == 2,
        "the unchanged value is written too: {writes:?}"
    );
    assert_eq!(pod.backups().len(), 1);
    pod.tuning().check(&pod.request(Command::Check)).unwrap();

    pod.tuning().del(&pod.request(Command::Del)).unwrap();
    assert_eq!(pod.state(), before);
    assert!(pod.backups().is_empty());
    // Again: nothing to restore.
    pod.tuning().del(&pod.request(Command::Del)).unwrap();
    assert_eq!(pod.state(), before);
}

#[test]
fn tuning_add_failing_at_each_kernel_step_leaves_the_pod_as_it_was() {
    let mut failed = 0;
    for op in [
        KernelOp::GetLink,
        KernelOp::WriteSysctl,
        KernelOp::SetMac,
        KernelOp::SetMtu,
        KernelOp::SetLinkOption,
    ] {
        for n in 1..=3 {
            let pod = pod();
            let before = pod.state();
            pod.kernel.fail_nth(op, &pod.path, n, Errno::ENOBUFS);
            match pod.tuning().add(&pod.request(Command::Add)) {
                Ok(_) => continue,
                Err(e) => {
                    failed += 1;
                    let e = cni_types::CniError::from(e);
                    assert!(e.msg.contains("No buffer space"), "{op:?} #{n}: {e:?}");
                }
            }
            assert_eq!(pod.state(), before, "{op:?} #{n}");
            assert!(pod.backups().is_empty(), "{op:?} #{n}");
            // The runtime's DEL after the failed ADD.
            pod.tuning().del(&pod.request(Command::Del)).unwrap();
            assert_eq!(pod.state(), before, "{op:?} #{n}");
        }
    }
    assert!(failed >= 8, "only {failed} ADDs met a fault");
}

#[test]
fn tuning_del_succeeds_when_the_link_or_the_namespace_is_gone() {
    // The interface gone: the namespace-wide sysctl is put back.
    let pod = pod();
    pod.tuning().add(&pod.request(Command::Add)).unwrap();
    let h = pod.kernel.open(&pod.path).unwrap();
    let eth0 = h.link_by_name("eth0").unwrap();
    h.sysctl_set("net/core/somaxconn", "5").unwrap();
    h.delete_link(eth0.index).unwrap();
    pod.tuning().del(&pod.request(Command::Del)).unwrap();
    assert_eq!(
        pod.kernel
            .sysctl(&pod.path, "net/core/somaxconn")
            .as_deref(),
        Some("4096")
    );
    assert!(pod.backups().is_empty());

    // The namespace gone: the backup goes too.
    let pod = self::pod();
    pod.tuning().add(&pod.request(Command::Add)).unwrap();
    pod.kernel.remove_netns(&pod.path);
    pod.tuning().del(&pod.request(Command::Del)).unwrap();
    assert!(pod.backups().is_empty());
    pod.tuning().del(&pod.request(Command::Del)).unwrap();

    // A missing namespace fails ADD.
    let pod = self::pod();
    pod.kernel.remove_netns(&pod.path);
    let e = pod.tuning().add(&pod.request(Command::Add)).unwrap_err();
    assert!(e.to_string().contains(&pod.path), "{e}");
}
