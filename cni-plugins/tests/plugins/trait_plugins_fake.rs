//! sbr on the fake kernel, without root: ADD's rules and tables, DEL
//! putting the rules and tables back, and a kernel failure at each of
//! ADD's steps leaving the namespace as it was. The real-kernel oracle:
//! `sbr_firewall::sbr_*` (and its differential tests against Go).

use cni_exec::{Command, Plugin, Request};
use cni_netns::kernel::{Errno, FakeKernel, KernelOp, NetKernel, NetnsHandle};
use cni_netns::{AddressOptions, KernelRoute};
use cni_plugins::sbr::Sbr;
use cni_types::NetworkConfig;
use serde_json::json;

/// A fake node whose pod (named by an existing file: sbr locks the
/// namespace file) has `eth0` up with 10.1.0.2/24 and a default route via
/// 10.1.0.1.
struct Pod {
    kernel: FakeKernel,
    _file: tempfile::NamedTempFile,
    path: String,
}

fn pod() -> Pod {
    let file = tempfile::NamedTempFile::new().unwrap();
    let path = file.path().display().to_string();
    let kernel = FakeKernel::new();
    kernel.add_netns(&path);
    let h = kernel.open(&path).unwrap();
    let eth0 = h.add_dummy("eth0").unwrap();
    h.set_up(eth0.index).unwrap();
    let opts = AddressOptions::default();
    h.add_address(eth0.index, "10.1.0.2/24".parse().unwrap(), opts)
        .unwrap();
    h.add_route(&KernelRoute {
        oif: Some(eth0.index),
        ..KernelRoute::default_via("10.1.0.1".parse().unwrap())
    })
    .unwrap();
    Pod {
        kernel,
        _file: file,
        path,
    }
}

impl Pod {
    fn request(&self, command: Command, table: Option<u32>) -> Request {
        let mut conf = json!({
            "cniVersion": "1.0.0", "name": "n", "type": "sbr",
            "prevResult": {
                "cniVersion": "1.0.0",
                "interfaces": [{"name": "eth0", "sandbox": self.path}],
                "ips": [{"address": "10.1.0.2/24", "gateway": "10.1.0.1", "interface": 0}],
            },
        });
        if let Some(t) = table {
            conf["table"] = json!(t);
        }
        let config = NetworkConfig::from_slice(conf.to_string().as_bytes()).unwrap();
        Request::builder(command, config)
            .container_id("c1")
            .netns(&self.path)
            .ifname("eth0")
            .path("/nonexistent-cni-path")
            .build()
            .unwrap()
    }

    fn sbr(&self) -> Sbr<FakeKernel> {
        Sbr::with_kernel(self.kernel.clone())
    }

    /// The pod's rules and routes (sorted).
    fn state(&self) -> (Vec<String>, Vec<String>) {
        let mut routes = self.kernel.route_list(&self.path);
        routes.sort();
        (self.kernel.rule_list(&self.path), routes)
    }
}

#[test]
fn sbr_add_moves_the_routes_to_a_table_and_del_removes_rule_and_table() {
    let pod = pod();
    let (rules_before, _) = pod.state();
    let result = pod.sbr().add(&pod.request(Command::Add, None)).unwrap();
    assert_eq!(result.ips.len(), 1);
    let (rules, routes) = pod.state();
    assert!(
        rules.contains(&"pref 32765 from 10.1.0.2/32 lookup 100".to_owned()),
        "{rules:?}"
    );
    assert!(
        routes
            .iter()
            .any(|r| r.starts_with("0.0.0.0/0 via 10.1.0.1 dev eth0") && r.ends_with("table 100")),
        "{routes:?}"
    );
    assert!(
        routes
            .iter()
            .any(|r| r.starts_with("10.1.0.0/24 dev eth0") && r.ends_with("table 100")),
        "{routes:?}"
    );
    assert!(
        !routes.iter().any(|r| !r.contains("table")),
        "eth0's routes left the main table: {routes:?}"
    );
    pod.sbr().check(&pod.request(Command::Check, None)).unwrap();

    pod.sbr().del(&pod.request(Command::Del, None)).unwrap();
    let (rules, routes) = pod.state();
    assert_eq!(rules, rules_before);
    assert!(
        !routes.iter().any(|r| r.contains("table 100")),
        "{routes:?}"
    );
    // Again, and after the namespace is gone.
    pod.sbr().del(&pod.request(Command::Del, None)).unwrap();
    pod.kernel.remove_netns(&pod.path);
    pod.sbr().del(&pod.request(Command::Del, None)).unwrap();
}

#[test]
fn sbr_with_a_table_adds_only_the_rule() {
    let pod = pod();
    let (_, routes_before) = pod.state();
    pod.sbr()
        .add(&pod.request(Command::Add, Some(5000)))
        .unwrap();
    let (rules, routes) = pod.state();
    assert!(
        rules.contains(&"pref 32765 from 10.1.0.2/32 lookup 5000".to_owned()),
        "{rules:?}"
    );
    assert_eq!(routes, routes_before);
    pod.sbr()
        .del(&pod.request(Command::Del, Some(5000)))
        .unwrap();
    assert!(!pod.state().0.iter().any(|r| r.contains("5000")));
}

#[test]
fn sbr_add_failing_at_each_kernel_step_leaves_the_pod_as_it_was() {
    let mut failed = 0;
    for op in [
        KernelOp::ListRules,
        KernelOp::ListRoutes,
        KernelOp::AddRule,
        KernelOp::AddRoute,
        KernelOp::DelRoute,
    ] {
        for n in 1..=3 {
            let pod = pod();
            let before = pod.state();
            pod.kernel.fail_nth(op, &pod.path, n, Errno::ENOBUFS);
            match pod.sbr().add(&pod.request(Command::Add, None)) {
                Ok(_) => continue,
                Err(e) => {
                    failed += 1;
                    let e = cni_types::CniError::from(e);
                    assert!(e.msg.contains("No buffer space"), "{op:?} #{n}: {e:?}");
                }
            }
            assert_eq!(pod.state(), before, "{op:?} #{n}");
        }
    }
    assert!(failed >= 5, "only {failed} ADDs met a fault");
}

#[test]
fn sbr_on_a_missing_namespace_fails_add_and_passes_del() {
    let pod = pod();
    pod.kernel.remove_netns(&pod.path);
    let e = pod.sbr().add(&pod.request(Command::Add, None)).unwrap_err();
    assert!(e.to_string().contains(&pod.path), "{e}");
    pod.sbr().del(&pod.request(Command::Del, None)).unwrap();
}

mod bandwidth;
mod dhcp;
mod firewall;
mod flannel;
mod portmap;
mod tuning;
